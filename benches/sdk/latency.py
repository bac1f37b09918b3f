"""Push-to-pop latency of single messages over plain HTTP (no client library).

A producer pushes one message every 1/RATE seconds to a random one of
PARTITIONS partitions of QUEUE, stamping the send time in the payload;
CONSUMERS consumers long-poll `GET /api/v1/pop/queue/QUEUE` (wait=true,
autoAck) and record, for each message, the time from the push's start to
its delivery. Runs SECONDS seconds after a one-second warm-up that creates
the queue and its partitions, then prints one JSON line: samples, lost
(pushed, never delivered within the drain), p50, p90, p99 and max in ms.

    python latency.py --url http://127.0.0.1:6632 --rate 50 --seconds 20
"""

import argparse
import json
import random
import threading
import time
import uuid

import httpx


def parse():
    p = argparse.ArgumentParser()
    p.add_argument("--url", default="http://127.0.0.1:6632")
    p.add_argument("--queue", default=f"lat-{uuid.uuid4().hex[:8]}")
    p.add_argument("--partitions", type=int, default=10)
    p.add_argument("--consumers", type=int, default=4)
    p.add_argument("--rate", type=float, default=50.0)
    p.add_argument("--seconds", type=float, default=20.0)
    return p.parse_args()


def percentile(sorted_ms, q):
    if not sorted_ms:
        return None
    return round(sorted_ms[min(len(sorted_ms) - 1, int(q * len(sorted_ms)))], 2)


def main():
    args = parse()
    lock = threading.Lock()
    delivered = {}
    stop = threading.Event()

    def push(http, n, measured):
        item = {
            "queue": args.queue,
            "partition": f"p{random.randrange(args.partitions)}",
            "payload": {"n": n, "t": time.time(), "measured": measured},
        }
        http.post("/api/v1/push", json={"items": [item]}).raise_for_status()

    def consume():
        with httpx.Client(base_url=args.url, timeout=30) as http:
            while not stop.is_set():
                r = http.get(
                    f"/api/v1/pop/queue/{args.queue}",
                    params={"batch": 10, "wait": "true", "timeout": 1000, "autoAck": "true"},
                )
                if r.status_code == 204 or not r.content:
                    continue
                r.raise_for_status()
                now = time.time()
                for m in r.json().get("messages", []):
                    data = m.get("data") or m.get("payload") or {}
                    if data.get("measured"):
                        with lock:
                            delivered[data["n"]] = (now - data["t"]) * 1000.0

    with httpx.Client(base_url=args.url, timeout=30) as http:
        # Warm-up: the queue and every partition exist before timing starts.
        for p in range(args.partitions):
            item = {"queue": args.queue, "partition": f"p{p}", "payload": {"n": -1 - p}}
            http.post("/api/v1/push", json={"items": [item]}).raise_for_status()
        consumers = [threading.Thread(target=consume, daemon=True) for _ in range(args.consumers)]
        for c in consumers:
            c.start()
        time.sleep(1.0)
        pushed = 0
        start = time.time()
        while time.time() - start < args.seconds:
            due = start + pushed / args.rate
            pause = due - time.time()
            if pause > 0:
                time.sleep(pause)
            push(http, pushed, True)
            pushed += 1
        drain_until = time.time() + 5.0
        while time.time() < drain_until:
            with lock:
                if len(delivered) >= pushed:
                    break
            time.sleep(0.05)
        stop.set()
    with lock:
        ms = sorted(delivered.values())
    print(json.dumps({
        "rate": args.rate,
        "partitions": args.partitions,
        "consumers": args.consumers,
        "samples": len(ms),
        "lost": pushed - len(ms),
        "p50_ms": percentile(ms, 0.50),
        "p90_ms": percentile(ms, 0.90),
        "p99_ms": percentile(ms, 0.99),
        "max_ms": round(ms[-1], 2) if ms else None,
    }))


if __name__ == "__main__":
    main()

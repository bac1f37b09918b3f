"""Consume + ack throughput with the official Python client (queen-mq).

Fills QUEUE with MESSAGES messages spread over PARTITIONS partitions (untimed),
then runs PROCESSES processes, each consuming with CONSUMERS concurrent workers
of the client's own consume loop (leased pops of BATCH, one batch ack each),
until every message has been consumed once. Prints one JSON line: messages,
seconds, msg/s, the client processes' CPU seconds, duplicates seen, and with
--broker-pid the broker's and PostgreSQL's CPU per consumed message over the
consume phase (read from /proc; PostgreSQL is every process of --pg-user).

    python consume.py --url http://127.0.0.1:6632 --messages 50000 \
        --partitions 100 --consumers 10 --batch 10 --processes 1
"""

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import pwd
import resource
import time
import uuid

import httpx
from queen import Queen


def parse():
    p = argparse.ArgumentParser()
    p.add_argument("--url", default="http://127.0.0.1:6632")
    p.add_argument("--queue", default=f"sdkc-{uuid.uuid4().hex[:8]}")
    p.add_argument("--group", default="bench")
    p.add_argument("--messages", type=int, default=50000)
    p.add_argument("--partitions", type=int, default=100)
    p.add_argument("--consumers", type=int, default=10)
    p.add_argument("--processes", type=int, default=1)
    p.add_argument("--batch", type=int, default=10)
    p.add_argument("--payload-bytes", type=int, default=100)
    p.add_argument("--fill-only", action="store_true", help="push the messages and stop")
    p.add_argument("--no-fill", action="store_true", help="consume what an earlier --fill-only pushed")
    p.add_argument("--broker-pid", type=int, default=None)
    p.add_argument("--pg-user", default="postgres")
    return p.parse_args()


def cpu_ticks(pids):
    """User+system clock ticks of these processes (gone ones count 0)."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except (OSError, IndexError, ValueError):
            pass
    return total


def pids_of_user(user):
    uid = pwd.getpwnam(user).pw_uid
    return [int(d) for d in os.listdir("/proc") if d.isdigit() and os.stat(f"/proc/{d}").st_uid == uid]


def server_ticks(args):
    if args.broker_pid is None:
        return None
    return cpu_ticks([args.broker_pid]), cpu_ticks(pids_of_user(args.pg_user))


def fill(args):
    """Push the messages in requests of 1,000, round-robin over the partitions."""
    pad = "x" * max(0, args.payload_bytes - 20)
    with httpx.Client(base_url=args.url, timeout=60) as http:
        sent = 0
        while sent < args.messages:
            n = min(1000, args.messages - sent)
            items = [
                {
                    "queue": args.queue,
                    "partition": f"p{(sent + i) % args.partitions}",
                    "payload": {"n": sent + i, "pad": pad},
                }
                for i in range(n)
            ]
            r = http.post("/api/v1/push", json={"items": items})
            r.raise_for_status()
            sent += n


def consumer(args, total, out):
    """One process: the client's consume loop until all processes together
    consumed every message (`total`, a shared counter)."""
    seen = []
    done = asyncio.Event()

    async def run():
        queen = Queen(args.url)

        async def handler(messages):
            batch = messages if isinstance(messages, list) else [messages]
            for m in batch:
                seen.append(m["data"]["n"])
            with total.get_lock():
                total.value += len(batch)
                finished = total.value >= args.messages
            if finished:
                done.set()

        async def consume():
            await (
                queen.queue(args.queue)
                .group(args.group)
                .concurrency(args.consumers)
                .batch(args.batch)
                .idle_millis(3000)
                .consume(handler)
            )

        task = asyncio.create_task(consume())
        async def others_done():
            # Another process may consume the last message.
            while total.value < args.messages:
                await asyncio.sleep(0.01)

        await asyncio.wait([task, asyncio.create_task(done.wait()), asyncio.create_task(others_done())],
                           return_when=asyncio.FIRST_COMPLETED)
        last = time.time()
        task.cancel()
        try:
            await task
        except BaseException:
            pass
        try:
            await queen.close()
        except Exception:
            pass
        return last

    last = asyncio.run(run())
    ru = resource.getrusage(resource.RUSAGE_SELF)
    out.put({"seen": seen, "last": last, "cpu": ru.ru_utime + ru.ru_stime})


def main():
    args = parse()
    if not args.no_fill:
        fill(args)
    if args.fill_only:
        return
    out = mp.Queue()
    total = mp.Value("i", 0)
    before = server_ticks(args)
    start = time.time()
    procs = [mp.Process(target=consumer, args=(args, total, out)) for _ in range(args.processes)]
    for p in procs:
        p.start()
    results = [out.get() for _ in procs]
    for p in procs:
        p.join()
    after = server_ticks(args)
    seen = [n for r in results for n in r["seen"]]
    last = max(r["last"] for r in results)
    seconds = last - start
    server = {}
    if before is not None and seen:
        us = 1e6 / os.sysconf("SC_CLK_TCK") / len(seen)
        server = {
            "broker_cpu_us_per_msg": round((after[0] - before[0]) * us, 1),
            "pg_cpu_us_per_msg": round((after[1] - before[1]) * us, 1),
        }
    print(json.dumps({
        "messages": args.messages,
        "consumed": len(seen),
        "distinct": len(set(seen)),
        "duplicates": len(seen) - len(set(seen)),
        "seconds": round(seconds, 3),
        "msg_per_s": round(len(set(seen)) / seconds, 1),
        "client_cpu_s": round(sum(r["cpu"] for r in results), 3),
        "processes": args.processes,
        "consumers": args.consumers,
        "batch": args.batch,
        "partitions": args.partitions,
        **server,
    }))


if __name__ == "__main__":
    main()

"""Windows with a grace period and the idle flush, with the official Python client.

Started by crates/queen-server/tests/it/sdk.rs with QUEEN_URL pointing at a
freshly booted broker and QUEEN_STREAM_RUN naming this run's queues.

Two `Stream`s run side by side on processing time (each message's
`createdAt`), each ending in a `foreach` that records when every window
closed:

- a tumbling window of TUMBLE_S seconds with a grace period of GRACE_S and
  an idle flush every FLUSH_MS, over two partitions: a burst on each, and a
  second burst on one of them a little later (inside the grace period of
  the windows the first burst opened, so a window closed early would be
  opened again and close twice);
- a session window (gap GAP_S, grace GRACE_S, the same idle flush) over two
  partitions: a burst on each, and once the first session of one partition
  has closed, a second burst there.

No message arrives after a window's end to close it, so every window is
closed by the idle flush. The runner's flush asks the broker for the rows
whose window ended at or before now - grace (`ripe_at_or_before` on
`/streams/v1/state/get`; the session flush filters what it reads itself).
The script reads every source message back with its own consumer group to
compute what each window must hold, then checks that every window closed
exactly once, with the right count and sum, never before its end plus the
grace period, and within a generous bound after it.

Exit status 0 when every check passes, 1 otherwise.
"""

import asyncio
import os
import sys
import time
from datetime import datetime, timezone

from queen import Queen, Stream

BASE_URL = os.environ.get("QUEEN_URL", "http://127.0.0.1:6632")
RUN = os.environ.get("QUEEN_STREAM_RUN", "local")
TUMBLE_SRC = f"win-tumble-{RUN}"
SESSION_SRC = f"win-session-{RUN}"
TUMBLE_S = 2
GAP_S = 1
GRACE_S = 3
FLUSH_MS = 200
# How late after end + grace a window may close and still pass: the flush
# runs every FLUSH_MS, but the machine may be busy.
LATE_BOUND_MS = 10_000
DEADLINE_S = 90


def now_ms():
    return int(time.time() * 1000)


def created_ms(message):
    """The message's createdAt as the runner reads it (epoch ms)."""
    text = message["createdAt"].strip()
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    stamp = datetime.fromisoformat(text)
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=timezone.utc)
    return int(stamp.timestamp() * 1000)


async def push_burst(queen, queue, partition, values, spacing_s=0.05):
    for value in values:
        results = await queen.queue(queue).partition(partition).push([{"data": {"v": value}}])
        if not all(r.get("status") == "queued" for r in results):
            raise RuntimeError(f"push answered {results}")
        await asyncio.sleep(spacing_s)


async def read_back(queen, queue, count):
    """Every message of `queue` (a consumer group of its own), by partition id."""
    messages = []
    deadline = time.monotonic() + 30
    while len(messages) < count and time.monotonic() < deadline:
        got = await queen.queue(queue).group("checker").batch(100).wait(True).timeout_millis(500).pop()
        if got:
            messages.extend(got)
            await queen.ack(got, True, {"group": "checker"})
    if len(messages) != count:
        raise RuntimeError(f"read {len(messages)} of {count} messages back from {queue}")
    return messages


def recorder(closed, kind):
    def record(value, ctx):
        closed.append({
            "kind": kind,
            "at": now_ms(),
            "key": ctx["key"],
            "start": ctx["windowStart"],
            "end": ctx["windowEnd"],
            "count": value.get("count"),
            "sum": value.get("sum"),
        })
    return record


def expected_tumbling(messages):
    """Windows per partition: {(partition id, start): (end, (count, sum))}."""
    width = TUMBLE_S * 1000
    windows = {}
    for message in messages:
        key = (message["partitionId"], created_ms(message) // width * width)
        count, total = windows.get(key, (0, 0))
        windows[key] = (count + 1, total + message["data"]["v"])
    return {key: (key[1] + width, agg) for key, agg in windows.items()}


def expected_sessions(messages):
    """Sessions per partition: a new one when the gap is exceeded."""
    by_key = {}
    for message in sorted(messages, key=created_ms):
        by_key.setdefault(message["partitionId"], []).append(message)
    sessions = {}
    for key, items in by_key.items():
        current = None
        for message in items:
            at = created_ms(message)
            if current is None or current["last"] + GAP_S * 1000 < at:
                current = {"start": at, "last": at, "count": 0, "sum": 0}
                sessions[(key, at)] = current
            current["last"] = at
            current["count"] += 1
            current["sum"] += message["data"]["v"]
    return {key: (s["last"] + GAP_S * 1000, (s["count"], s["sum"])) for key, s in sessions.items()}


def check(kind, want, closed, problems):
    seen = {}
    for row in closed:
        if row["kind"] != kind:
            continue
        key = (row["key"], row["start"])
        seen.setdefault(key, []).append(row)
    for key, (end, (count, total)) in sorted(want.items()):
        rows = seen.get(key, [])
        if len(rows) != 1:
            problems.append(f"{kind} window {key} closed {len(rows)} times: {rows}")
            continue
        row = rows[0]
        if row["end"] != end:
            problems.append(f"{kind} window {key} ended at {row['end']}, expected {end}")
        if (row["count"], row["sum"]) != (count, total):
            problems.append(f"{kind} window {key} holds {(row['count'], row['sum'])}, expected {(count, total)}")
        if row["at"] < end + GRACE_S * 1000:
            problems.append(
                f"{kind} window {key} closed {end + GRACE_S * 1000 - row['at']} ms before its end + grace")
        if row["at"] > end + GRACE_S * 1000 + LATE_BOUND_MS:
            problems.append(f"{kind} window {key} closed {row['at'] - end - GRACE_S * 1000} ms after end + grace")
    for key, rows in seen.items():
        if key not in want:
            problems.append(f"{kind} window {key} was not expected: {rows}")


async def wait_for(predicate, what):
    deadline = time.monotonic() + DEADLINE_S
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        await asyncio.sleep(0.1)


async def main():
    closed = []
    aggregate = {"count": lambda m: 1, "sum": lambda m: m["v"]}
    async with Queen(url=BASE_URL) as queen:
        await queen.queue(TUMBLE_SRC).create()
        await queen.queue(SESSION_SRC).create()
        tumbling = await (
            Stream.from_(queen.queue(TUMBLE_SRC))
            .window_tumbling(seconds=TUMBLE_S, grace_period=GRACE_S, idle_flush_ms=FLUSH_MS)
            .aggregate(aggregate)
            .foreach(recorder(closed, "tumbling"))
            .run(query_id=f"tumble-{RUN}", url=BASE_URL, max_wait_millis=200)
        )
        sessions = await (
            Stream.from_(queen.queue(SESSION_SRC))
            .window_session(gap=GAP_S, grace_period=GRACE_S, idle_flush_ms=FLUSH_MS)
            .aggregate(aggregate)
            .foreach(recorder(closed, "session"))
            .run(query_id=f"session-{RUN}", url=BASE_URL, max_wait_millis=200)
        )
        try:
            await asyncio.gather(
                push_burst(queen, TUMBLE_SRC, "a", [1, 2, 3, 4, 5]),
                push_burst(queen, TUMBLE_SRC, "b", [10, 20, 30]),
                push_burst(queen, SESSION_SRC, "a", [1, 2, 3, 4]),
                push_burst(queen, SESSION_SRC, "b", [100, 200]),
            )
            # Inside the grace period of every window the first burst opened.
            await asyncio.sleep(1.0)
            await push_burst(queen, TUMBLE_SRC, "a", [100, 200, 300])
            # The second session of partition a starts once its first closed.
            await wait_for(lambda: len([r for r in closed if r["kind"] == "session"]) >= 2,
                           "the first sessions")
            await push_burst(queen, SESSION_SRC, "a", [1000, 2000])

            tumble_messages = await read_back(queen, TUMBLE_SRC, 11)
            session_messages = await read_back(queen, SESSION_SRC, 8)
            want_tumbling = expected_tumbling(tumble_messages)
            want_sessions = expected_sessions(session_messages)
            latest = max(end for end, _ in list(want_tumbling.values()) + list(want_sessions.values()))
            await wait_for(
                lambda: len([r for r in closed if r["kind"] == "tumbling"]) >= len(want_tumbling)
                and len([r for r in closed if r["kind"] == "session"]) >= len(want_sessions),
                "every window to close")
            # Keep the runners going past the last close, for a second one.
            await asyncio.sleep(max(0, (latest + GRACE_S * 1000 - now_ms()) / 1000) + 1.5)
        finally:
            await tumbling.stop()
            await sessions.stop()
    print(f"tumbling {tumbling.metrics()}", flush=True)
    print(f"sessions {sessions.metrics()}", flush=True)
    problems = []
    check("tumbling", want_tumbling, closed, problems)
    check("session", want_sessions, closed, problems)
    for name, runner in (("tumbling", tumbling), ("session", sessions)):
        if runner.metrics()["errorsTotal"]:
            problems.append(f"the {name} runner reported errors: {runner.metrics()['lastError']}")
    if problems:
        for problem in problems:
            print(f"FAIL {problem}")
        return 1
    print(f"{len(want_tumbling)} tumbling and {len(want_sessions)} session windows closed once, "
          f"right, after their grace period", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))

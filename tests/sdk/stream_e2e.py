"""Streams end to end with the official Python client (queen-mq, issue 16).

Started by crates/queen-server/tests/it/sdk.rs with QUEEN_URL pointing at a
freshly booted broker and QUEEN_STREAM_RUN naming this run's queues:
source `stream-src-<run>` and sink `stream-sink-<run>`.

It pushes PARTITIONS x PER_PARTITION messages, each with an event time 100 ms
after the one before (so ten to a one-second window) and a value equal to its
sequence number, and one a minute later per partition that closes the last
window, then runs a `Stream` over the source: a tumbling one-second
window on event time, an aggregate of count, sum, min and max, and a sink.
While it runs, the Rust side restarts the broker (SIGTERM, then a new
process on the same port and database). The script then reads the sink with
its own consumer group until every window has arrived, and checks that each
window's aggregate is exactly right and arrived exactly once: no message
counted twice or lost.

Exit status 0 when every window is right, 1 otherwise.
"""

import asyncio
import os
import sys
import time

from queen import Queen, Stream

BASE_URL = os.environ.get("QUEEN_URL", "http://127.0.0.1:6632")
RUN = os.environ.get("QUEEN_STREAM_RUN", "local")
SOURCE = f"stream-src-{RUN}"
SINK = f"stream-sink-{RUN}"
PARTITIONS = 4
PER_PARTITION = 750  # 75 windows of 10 messages per partition: 3,000 in all
WINDOW = 10
DEADLINE_S = 150
# A whole second, so message i of a partition falls in window i // 10.
BASE_MS = 1_700_000_000_000


def expected():
    out = {}
    for part in range(PARTITIONS):
        windows = set()
        for w in range(PER_PARTITION // WINDOW):
            values = range(w * WINDOW, (w + 1) * WINDOW)
            windows.add((WINDOW, sum(values), min(values), max(values)))
        out[f"p{part}"] = windows
    return out


async def main():
    async with Queen(url=BASE_URL) as queen:
        # A short lease: a batch popped when the broker went down comes back soon.
        await queen.queue(SOURCE).config({"leaseTime": 5}).create()
        await queen.queue(SINK).create()
        for part in range(PARTITIONS):
            items = [
                {"data": {"ts": BASE_MS + i * 100, "v": i}}
                for i in range(PER_PARTITION)
            ]
            # One event a minute later closes the last window (its own
            # window never closes, and is not expected).
            items.append({"data": {"ts": BASE_MS + PER_PARTITION * 100 + 60_000, "v": -1}})
            for start in range(0, len(items), 250):
                results = await queen.queue(SOURCE).partition(f"p{part}").push(items[start:start + 250])
                if not all(r.get("status") == "queued" for r in results):
                    print(f"FAIL push answered {results[:2]}")
                    return 1
        print(f"pushed {PARTITIONS * (PER_PARTITION + 1)} messages", flush=True)

        def event_time(message):
            return message["data"]["ts"]

        runner = await (
            Stream.from_(queen.queue(SOURCE))
            # No idle flush: the runner's flush task runs beside its cycles
            # on the same partition, and with event times older than the
            # wall clock it closes windows the cycles close too (queen-mq
            # 0.15.0 emits such a window twice with no broker restart at
            # all). Windows close on event time only.
            .window_tumbling(seconds=1, event_time=event_time, idle_flush_ms=0)
            .aggregate({
                "count": lambda m: 1,
                "sum": lambda m: m["v"],
                "min": lambda m: m["v"],
                "max": lambda m: m["v"],
            })
            .to(queen.queue(SINK))
            .run(query_id=f"windows-{RUN}", url=BASE_URL, batch_size=10)
        )

        want = expected()
        total_wanted = sum(len(w) for w in want.values())
        # Sink messages by id: the checker itself consumes at least once (an
        # ack lost to the restart redelivers), the stream must emit each
        # window exactly once.
        emitted = {}
        started = time.monotonic()
        settle_until = None
        while time.monotonic() - started < DEADLINE_S:
            if len(emitted) >= total_wanted and settle_until is None:
                # Everything arrived: keep reading a little for late extras.
                settle_until = time.monotonic() + 3
            if settle_until is not None and time.monotonic() > settle_until:
                break
            try:
                messages = await queen.queue(SINK).group("checker").batch(100).wait(True).timeout_millis(500).pop()
            except Exception as error:  # the broker restarting
                print(f"pop while the broker restarts: {error}", flush=True)
                await asyncio.sleep(0.5)
                continue
            for message in messages or []:
                data = message["data"]
                emitted[message["id"]] = (
                    message["partition"],
                    (data.get("count"), data.get("sum"), data.get("min"), data.get("max")),
                )
            if messages:
                try:
                    await queen.ack(messages, True, {"group": "checker"})
                except Exception as error:
                    print(f"ack while the broker restarts: {error}", flush=True)
        await runner.stop()
        print(f"metrics {runner.metrics()}", flush=True)
        got = {part: [] for part in want}
        for part, window in emitted.values():
            got.setdefault(part, []).append(window)

        problems = []
        for part, windows in want.items():
            seen = got[part]
            if len(seen) != len(set(seen)):
                twice = sorted({w for w in seen if seen.count(w) > 1})
                problems.append(f"{part}: windows arrived twice: {twice[:4]} ({len(seen)} emissions)")
            if set(seen) != windows:
                missing = sorted(windows - set(seen))[:3]
                extra = sorted(set(seen) - windows)[:3]
                problems.append(f"{part}: missing {missing}..., wrong {extra}...")
        if problems:
            for problem in problems:
                print(f"FAIL {problem}")
            return 1
        print(f"all {total_wanted} windows exactly right", flush=True)
        return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))

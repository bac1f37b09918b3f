"""End-to-end mesh test: the official Queen Python SDK (queen-mq 0.15.0)
configured with several broker URLs (round-robin), against three brokers on
one database.

Started by crates/queen-server/tests/it/mesh.rs with QUEEN_URLS (comma
separated). Round-robin sends consecutive requests to different brokers, so
pushes land on all three and an ack usually reaches a broker that did not
serve its pop. Checks: every pushed message is received exactly once, in push
order, and every ack succeeds. Exit status 0 when all passed.
"""

import asyncio
import os
import sys
import uuid

from queen import Queen

URLS = os.environ["QUEEN_URLS"].split(",")
COUNT = 30


def fail(message):
    print(f"FAILED: {message}")
    sys.exit(1)


async def main():
    queue = f"mesh-{uuid.uuid4().hex[:8]}"
    async with Queen(urls=URLS, load_balancing_strategy="round-robin", retry_attempts=1) as queen:
        for n in range(COUNT):
            await queen.queue(queue).push([{"data": {"n": n}}])
        received = []
        for _ in range(COUNT * 4):
            if len(received) >= COUNT:
                break
            popped = await queen.queue(queue).batch(5).wait(True).timeout_millis(2000).pop()
            if not popped:
                continue
            received.extend(m["data"]["n"] for m in popped)
            ack = await queen.ack(popped, True)
            results = ack if isinstance(ack, list) else [ack]
            if not all(item.get("success") for item in results):
                fail(f"an ack failed: {ack}")
    if received != list(range(COUNT)):
        fail(f"received {received}")
    print("mesh: all scenarios passed")


asyncio.run(main())

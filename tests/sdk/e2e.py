"""End-to-end test: the official Queen Python SDK (queen-mq 0.15.0) against our broker.

Started by crates/queen-server/tests/it/sdk.rs with QUEEN_URL pointing at a
freshly booted `queen-server`. Every scenario uses the SDK the way its README
shows users doing it (push, consume with a handler, ack, DLQ, lease renewal,
transactions, traces) and asserts what must come out: values, counts and
per-partition order.

The SDK swallows several failures (pop returns [] on any error, consume's
auto-ack ignores per-item failures, dlq().get() returns an empty list on any
error). So that a broker error cannot pass for "nothing there", a response
hook records every HTTP exchange the SDK makes; each scenario then also
requires that every exchange answered 2xx and that every ack and lease-extend
item reported success, unless the scenario expects otherwise. On failure the
scenario's exchanges are printed.

QUEEN_SDK_SCENARIOS=name,name runs only those scenarios.
Exit status 0 when every scenario passed, 1 otherwise.
"""

import asyncio
import json
import os
import sys
import time
import traceback
import uuid
from datetime import datetime, timedelta, timezone
from urllib.parse import urlsplit

from queen import Queen

BASE_URL = os.environ.get("QUEEN_URL", "http://127.0.0.1:6632")
RUN = uuid.uuid4().hex[:8]
SCENARIO_TIMEOUT_S = 90
CONSUME_TIMEOUT_S = 45
# QUEEN_SDK_VERBOSE=1 prints every exchange, also of passing scenarios.
VERBOSE = os.environ.get("QUEEN_SDK_VERBOSE", "") not in ("", "0")


def name(kind):
    """A queue name unique to this run (nothing is ever deleted)."""
    return f"sdk-{RUN}-{kind}"


class Failed(Exception):
    """An assertion of a scenario did not hold."""


def check(condition, message, *details):
    if not condition:
        text = message
        for detail in details:
            text += "\n    " + _short(detail, 2000)
        raise Failed(text)


def _short(value, limit=600):
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} chars)"


# --------------------------------------------------------------------------
# Wire recorder
# --------------------------------------------------------------------------


class Exchange:
    def __init__(self, method, path, request_body, status, response_body):
        self.method = method
        self.path = path
        self.request_body = request_body
        self.status = status
        self.response_body = response_body

    def json(self):
        try:
            return json.loads(self.response_body) if self.response_body else None
        except ValueError:
            return None

    def __str__(self):
        req = f" {_short(self.request_body)}" if self.request_body else ""
        return f"{self.method} {self.path}{req}\n      -> {self.status} {_short(self.response_body)}"


class Wire:
    """Every request the SDK sent and what the broker answered, in order."""

    def __init__(self):
        self.exchanges = []

    def attach(self, queen):
        # Observation only: the SDK's httpx.AsyncClient gets a response hook.
        client = queen._http_client._client
        hooks = dict(client.event_hooks)
        hooks["response"] = list(hooks.get("response", [])) + [self._on_response]
        client.event_hooks = hooks

    async def _on_response(self, response):
        await response.aread()
        request = response.request
        url = urlsplit(str(request.url))
        path = url.path + (f"?{url.query}" if url.query else "")
        body = request.content.decode("utf-8", "replace") if request.content else ""
        self.exchanges.append(
            Exchange(request.method, path, body, response.status_code, response.text)
        )

    def mark(self):
        return len(self.exchanges)

    def since(self, mark):
        return self.exchanges[mark:]

    def problems(self, mark, allowed=lambda exchange: False):
        """Exchanges since `mark` that went wrong on the wire and were not expected."""
        found = []
        for exchange in self.since(mark):
            if allowed(exchange):
                continue
            if not 200 <= exchange.status < 300:
                found.append(f"HTTP {exchange.status}: {exchange}")
                continue
            body = exchange.json()
            path = exchange.path.split("?")[0]
            if path in ("/api/v1/ack", "/api/v1/ack/batch"):
                items = body if isinstance(body, list) else [body]
                bad = [i for i in items if not (isinstance(i, dict) and i.get("success") is True)]
                if bad:
                    found.append(f"ack item(s) not successful: {exchange}")
            elif path.startswith("/api/v1/lease/"):
                if not (isinstance(body, dict) and body.get("success") is True):
                    found.append(f"lease extend not successful: {exchange}")
        return found


# --------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------


async def consume_until_done(builder, what):
    """Await a consume() that ends through .limit(n), with a deadline."""
    try:
        await asyncio.wait_for(builder, CONSUME_TIMEOUT_S)
    except asyncio.TimeoutError:
        raise Failed(f"{what}: consume() did not reach its limit within {CONSUME_TIMEOUT_S}s")


def parse_ts(text):
    check(isinstance(text, str) and text.endswith("Z"), "timestamp is not ISO-8601 UTC with Z", text)
    return datetime.fromisoformat(text[:-1]).replace(tzinfo=timezone.utc)


def check_pushed(results, count, what):
    check(isinstance(results, list), f"{what}: push did not return a result list", results)
    check(len(results) == count, f"{what}: expected {count} push results, got {len(results)}", results)
    for idx, result in enumerate(results):
        check(result.get("status") == "queued", f"{what}: item {idx} not queued", result)
        check(result.get("index") == idx, f"{what}: results out of input order", results)
        check(
            isinstance(result.get("message_id"), str) and result["message_id"],
            f"{what}: item {idx} has no message_id",
            result,
        )
    ids = [r["message_id"] for r in results]
    check(len(set(ids)) == len(ids), f"{what}: message ids not unique", ids)
    partitions = {r.get("partition_id") for r in results}
    check(len(partitions) == 1 and None not in partitions, f"{what}: one push, one partition", results)
    return partitions.pop()


# --------------------------------------------------------------------------
# Scenarios
# --------------------------------------------------------------------------


async def push_and_consume(queen, wire):
    """Configure, push single and batch, consume in queue mode and in a group."""
    q = name("orders")

    # README: await queen.queue('orders').config({...}).create()
    created = await queen.queue(q).config({"leaseTime": 30, "retryLimit": 3}).create()
    check(created.get("configured") is True, "configure did not answer configured: true", created)
    check(created.get("queue") == q, "configure answered another queue name", created)
    options = created.get("options", {})
    check(
        options.get("leaseTime") == 30 and options.get("retryLimit") == 3,
        "configure did not echo the options",
        created,
    )

    # README: push with a custom transactionId (exactly-once), into a partition.
    first_txn = f"order-{RUN}-0"
    first_payload = {"partition": "tenant-a", "seq": 0, "note": "single push"}
    single = await queen.queue(q).partition("tenant-a").push(
        [{"transactionId": first_txn, "data": first_payload}]
    )
    tenant_a_id = check_pushed(single, 1, "single push")
    check(single[0].get("transaction_id") == first_txn, "push result lost the transactionId", single)

    # Batch pushes, one per partition, plus one to the Default partition.
    expected = {"tenant-a": [first_payload], "tenant-b": [], "Default": []}
    batch_a = [{"partition": "tenant-a", "seq": i, "items": list(range(i))} for i in range(1, 11)]
    batch_b = [{"partition": "tenant-b", "seq": i, "nested": {"k": f"v{i}"}} for i in range(10)]
    pushed_a = await queen.queue(q).partition("tenant-a").push([{"data": d} for d in batch_a])
    check(check_pushed(pushed_a, 10, "batch push tenant-a") == tenant_a_id,
          "tenant-a batch landed in another partition than the single push", single, pushed_a)
    tenant_b_id = check_pushed(
        await queen.queue(q).partition("tenant-b").push([{"data": d} for d in batch_b]),
        10,
        "batch push tenant-b",
    )
    default_payload = {"partition": "Default", "seq": 0, "text": "héllo ✓"}
    default_id = check_pushed(
        await queen.queue(q).push([{"data": default_payload}]), 1, "push to Default"
    )
    check(len({tenant_a_id, tenant_b_id, default_id}) == 3, "partitions share an id")
    expected["tenant-a"] += batch_a
    expected["tenant-b"] += batch_b
    expected["Default"].append(default_payload)
    total = sum(len(v) for v in expected.values())

    # Same transactionId again in the same partition: a duplicate, not a new message.
    dup = await queen.queue(q).partition("tenant-a").push(
        [{"transactionId": first_txn, "data": {"seq": 999}}]
    )
    check(
        isinstance(dup, list) and len(dup) == 1 and dup[0].get("status") == "duplicate",
        "re-pushing a transactionId was not reported as duplicate",
        dup,
    )

    # README: await queen.queue('tasks').consume(handler) -- auto-ack on success;
    # .limit(n) stops the worker after n messages.
    received = []

    async def process(message):
        received.append(message)

    await consume_until_done(queen.queue(q).limit(total).consume(process), "queue-mode consume")
    check(len(received) == total, f"expected {total} deliveries, got {len(received)}")
    txns = [m.get("transactionId") for m in received]
    check(len(set(txns)) == total, "a message was delivered twice", txns)
    by_partition = {}
    for message in received:
        check(
            all(message.get(k) for k in ("transactionId", "partitionId", "leaseId")),
            "delivered message lacks transactionId/partitionId/leaseId",
            message,
        )
        by_partition.setdefault(message.get("partition"), []).append(message)
    check(set(by_partition) == set(expected), "deliveries came from other partitions",
          sorted(by_partition, key=str))
    ids = {"tenant-a": tenant_a_id, "tenant-b": tenant_b_id, "Default": default_id}
    for partition, messages in by_partition.items():
        check(
            [m["data"] for m in messages] == expected[partition],
            f"partition {partition}: payloads not delivered exactly once in push order",
            [m["data"] for m in messages],
            expected[partition],
        )
        check(
            all(m["partitionId"] == ids[partition] for m in messages),
            f"partition {partition}: partitionId differs from the push result",
        )
    check(by_partition["tenant-a"][0]["transactionId"] == first_txn,
          "the custom transactionId did not come back on pop", by_partition["tenant-a"][0])

    # Every message was acked: nothing is left, and the next push is the next delivery.
    leftover = await queen.queue(q).wait(False).pop()
    check(leftover == [], "messages left after consume acked them all", leftover)
    extra = {"partition": "tenant-a", "seq": 11, "note": "after consume"}
    check_pushed(await queen.queue(q).partition("tenant-a").push([{"data": extra}]), 1, "extra push")
    popped = await queen.queue(q).partition("tenant-a").batch(5).wait(False).pop()
    check([m.get("data") for m in popped] == [extra],
          "pop after a full consume did not return exactly the new message", popped)
    # README: manual acknowledgment
    ack = await queen.ack(popped[0], True)
    check(ack.get("success") is True, "queen.ack(message, True) failed", ack)
    expected["tenant-a"].append(extra)

    # A consumer group sees every message again, in batches: handler gets lists,
    # auto-ack goes through /api/v1/ack/batch with the group.
    batches = []

    async def audit(messages):
        batches.append(messages)

    await consume_until_done(
        queen.queue(q).group("audit").batch(10).limit(total + 1).consume(audit), "group consume"
    )
    check(all(isinstance(b, list) and b for b in batches), "batch handler did not get lists",
          [type(b).__name__ for b in batches])
    group_seen = {}
    for messages in batches:
        check(len(messages) <= 10, "a batch exceeded batch(10)", len(messages))
        check(len({m["partition"] for m in messages}) == 1, "one pop mixed partitions")
        check(all(m.get("consumerGroup") == "audit" for m in messages),
              "group pop did not tag messages with the group", messages[0])
        for message in messages:
            group_seen.setdefault(message["partition"], []).append(message["data"])
    check(group_seen == expected, "group 'audit' did not see every message once, in order",
          group_seen, expected)
    check(len(batches) < total, "batch(10) delivered one message per pop", len(batches))
    leftover = await queen.queue(q).group("audit").wait(False).pop()
    check(leftover == [], "messages left in group 'audit' after its consume", leftover)
    return wire.problems


async def dead_letters(queen, wire):
    """Failures reach the DLQ after retryLimit+1 deliveries; good messages still flow."""
    q = name("risky")
    # README: await queen.queue('risky').config({'retryLimit': 3, 'dlqAfterMaxRetries': True}).create()
    created = await queen.queue(q).config({"retryLimit": 1, "dlqAfterMaxRetries": True}).create()
    check(created.get("configured") is True, "configure failed", created)

    good_1 = {"name": "good-1", "amount": 10}
    poison = {"name": "poison", "amount": -1, "why": "handler raises"}
    good_2 = {"name": "good-2", "amount": 20}
    pushed = await queen.queue(q).partition("mixed").push(
        [{"data": good_1}, {"data": poison}, {"data": good_2}]
    )
    check_pushed(pushed, 3, "push mixed")
    poison_txn = pushed[1]["transaction_id"]

    # consume(): an exception in the handler is an automatic nack (status failed).
    deliveries = []

    async def handler(message):
        deliveries.append(message["data"]["name"])
        if message["data"]["name"] == "poison":
            raise RuntimeError("cannot process a negative amount")

    await consume_until_done(queen.queue(q).limit(4).consume(handler), "consume with a failing handler")
    check(
        deliveries == ["good-1", "poison", "poison", "good-2"],
        "with retryLimit 1 the poison message must be delivered twice, then dead-lettered, "
        "and good-2 delivered after it",
        deliveries,
    )

    # README: await queen.ack(message, False, {'error': 'reason'}) on popped messages.
    reason = "schema mismatch: field 'amount' missing"
    explicit = {"name": "bad-explicit", "fields": []}
    pushed = await queen.queue(q).partition("explicit").push([{"data": explicit}])
    check_pushed(pushed, 1, "push explicit")
    explicit_txn = pushed[0]["transaction_id"]
    for attempt in (1, 2):
        popped = await queen.queue(q).partition("explicit").batch(1).wait(False).pop()
        check([m.get("data") for m in popped] == [explicit],
              f"delivery {attempt} of the failing message did not arrive", popped)
        nack = await queen.ack(popped[0], False, {"error": reason})
        check(nack.get("success") is True, f"nack {attempt} was refused", nack)
    gone = await queen.queue(q).partition("explicit").wait(False).pop()
    check(gone == [], "a message was redelivered after it was dead-lettered", gone)
    check(await queen.queue(q).wait(False).pop() == [], "queue not empty after the DLQ moves")

    # README: dlq = await queen.queue('risky').dlq().limit(10).get()
    #         print(f"Found {dlq['total']} failed messages")
    #         for msg in dlq['messages']: print('Error:', msg.get('errorMessage'))
    dlq = await queen.queue(q).dlq().limit(10).get()
    letters = dlq.get("messages")
    check(isinstance(letters, list) and len(letters) == 2,
          "expected exactly the 2 failed messages in the DLQ", dlq)
    by_txn = {m.get("transactionId"): m for m in letters}
    check(set(by_txn) == {poison_txn, explicit_txn}, "DLQ holds other messages than the failed ones",
          dlq)
    check(letters[0]["transactionId"] == explicit_txn, "DLQ is not newest first", dlq)
    first, second = by_txn[poison_txn], by_txn[explicit_txn]
    check(first.get("data") == poison, "DLQ lost the failed payload", first)
    check(second.get("data") == explicit, "DLQ lost the failed payload", second)
    check(second.get("errorMessage") == reason, "DLQ lost the ack's error text", second)
    check(first.get("errorMessage") == "Retries exhausted",
          "a nack without error text should read 'Retries exhausted'", first)
    for letter in letters:
        check(letter.get("queue") == q, "DLQ row names another queue", letter)
        check(letter.get("consumerGroup") == "__QUEUE_MODE__", "DLQ row group", letter)
        parse_ts(letter.get("failedAt"))
    check(first.get("partition") == "mixed" and second.get("partition") == "explicit",
          "DLQ rows name the wrong partitions", letters)
    check(dlq.get("total") == 2, "README reads dlq['total']; expected 2", dlq)

    # admin.retry_message (the dashboard's Retry button): the dead letter goes
    # back into the log once, is delivered again, and leaves the DLQ.
    retried = await queen.admin.retry_message(first["partitionId"], poison_txn)
    check(retried.get("success") is True and retried.get("requeued") == 1,
          "retry_message did not requeue the dead letter", retried)
    again = await queen.queue(q).partition("mixed").batch(5).wait(False).pop()
    check([m.get("data") for m in again] == [poison],
          "the retried message was not delivered again", again)
    check(again[0].get("transactionId") == poison_txn, "the retried message changed its id", again)
    done = await queen.ack(again[0], True)
    check(done.get("success") is True, "ack of the retried message was refused", done)
    check(await queen.queue(q).partition("mixed").wait(False).pop() == [],
          "the retried message came back after its ack")
    left = await queen.queue(q).dlq().limit(10).get()
    check(left.get("total") == 1, "the retried dead letter is still listed", left)
    return wire.problems


async def maintenance(queen, wire):
    """Maintenance mode (the reference client's maintenance test): pushes are
    buffered and not delivered; turned off, the spool drains and produced ==
    received exactly within 12 s."""
    q = name("maint")
    await queen.queue(q).create()
    state = await queen.admin.set_maintenance_mode(True)
    check(state.get("maintenanceMode") is True, "maintenance did not turn on", state)
    produced = []
    try:
        for batch_no in range(5):
            batch = [{"data": {"n": batch_no * 20 + i}} for i in range(20)]
            results = await queen.queue(q).push(batch)
            check(isinstance(results, list) and len(results) == 20, "push answered", results)
            check(all(r.get("status") == "buffered" for r in results),
                  "pushes during maintenance must answer buffered", results)
            produced += [item["data"]["n"] for item in batch]
        during = await queen.queue(q).wait(False).pop()
        check(during == [], "a message was delivered during maintenance", during)
        state = await queen.admin.get_maintenance_mode()
        check(state.get("bufferedMessages") == 100, "bufferedMessages", state)
    finally:
        off = await queen.admin.set_maintenance_mode(False)
    check(off.get("maintenanceMode") is False, "maintenance did not turn off", off)
    started = time.monotonic()
    while True:
        state = await queen.admin.get_maintenance_mode()
        if state.get("bufferedMessages") == 0:
            break
        check(time.monotonic() - started < 12, "the spool did not drain within 12 s", state)
        await asyncio.sleep(0.2)
    received = []

    async def handler(messages):
        # With batch > 1 the SDK hands the handler the whole batch.
        for message in messages if isinstance(messages, list) else [messages]:
            received.append(message["data"]["n"])

    await consume_until_done(queen.queue(q).batch(50).limit(100).consume(handler),
                             "consume after maintenance")
    check(received == produced, "produced != received after maintenance", received)
    check(time.monotonic() - started < 12, "draining and consuming took over 12 s")
    return wire.problems


async def lease_renewal(queen, wire):
    """queen.renew(message) keeps a lease past leaseTime; renew_lease() does it in consume."""
    q = name("slow")
    created = await queen.queue(q).config({"leaseTime": 3}).create()
    check(created.get("configured") is True, "configure failed", created)
    check_pushed(
        await queen.queue(q).push([{"data": {"job": "long-1"}}, {"data": {"job": "long-2"}}]),
        2,
        "push jobs",
    )

    popped = await queen.queue(q).batch(1).wait(False).pop()
    check([m.get("data") for m in popped] == [{"job": "long-1"}], "pop returned the wrong job", popped)
    message = popped[0]
    check(message.get("leaseId"), "popped message has no leaseId", message)

    # README: await queen.renew(message)
    before = datetime.now(timezone.utc)
    renewed = await queen.renew(message)
    check(renewed.get("success") is True, "renew(message) failed", renewed)
    check(renewed.get("leaseId") == message["leaseId"], "renew answered another lease", renewed)
    new_expiry = parse_ts(renewed.get("newExpiresAt"))
    check(new_expiry > before + timedelta(seconds=30),
          "renewal did not push the expiry well past leaseTime (default extension is 60 s)",
          renewed)

    # Past the configured 3 s lease: still ours, so nobody gets the partition
    # and the ack with our leaseId is accepted.
    await asyncio.sleep(4)
    stolen = await queen.queue(q).wait(False).pop()
    check(stolen == [], "the renewed lease was treated as expired: messages redelivered", stolen)
    ack = await queen.ack(message, True)
    check(ack.get("success") is True, "ack after renewal refused (lease lost?)", ack)

    # README: await queen.queue('q').renew_lease(True, 60000).consume(handler)
    # Here the handler outlives the 3 s lease; the SDK renews every 500 ms.
    # Past the 3 s, another consumer must still find the partition taken.
    mark = wire.mark()
    handled = []
    competing = []

    async def slow(msg):
        handled.append(msg["data"]["job"])
        await asyncio.sleep(4)
        competing.append(await queen.queue(q).wait(False).pop())
        await asyncio.sleep(1)

    await consume_until_done(
        queen.queue(q).renew_lease(True, 500).limit(1).consume(slow), "consume with renew_lease"
    )
    check(handled == ["long-2"], "consume with renew_lease handled the wrong jobs", handled)
    check(competing == [[]], "while auto-renewed, the lease expired: another pop got the job",
          competing)
    extends = [e for e in wire.since(mark) if e.path.startswith("/api/v1/lease/")]
    check(len(extends) >= 3, f"expected >= 3 automatic lease extensions, saw {len(extends)}",
          [str(e) for e in extends])
    check(await queen.queue(q).wait(False).pop() == [],
          "the job was redelivered: the auto-renewed lease or its ack failed")
    return wire.problems


async def transaction(queen, wire):
    """README: ack the input and push the output in one commit; a bad commit changes nothing."""
    src, dst = name("input"), name("output")
    check((await queen.queue(src).config({"leaseTime": 30}).create()).get("configured") is True,
          "configure input failed")
    check((await queen.queue(dst).create()).get("configured") is True, "configure output failed")
    check_pushed(
        await queen.queue(src).push([{"data": {"order": 1}}, {"data": {"order": 2}}]), 2, "push input"
    )

    # README:
    #   messages = await queen.queue('input').pop()
    #   await (queen.transaction().ack(messages[0]).queue('output')
    #          .push([{'data': processed_result}]).commit())
    messages = await queen.queue(src).pop()
    check([m.get("data") for m in messages] == [{"order": 1}], "pop of the input failed", messages)
    processed_result = {"order": 1, "processed": True, "total": 42.5}
    result = await (
        queen.transaction().ack(messages[0]).queue(dst).push([{"data": processed_result}]).commit()
    )
    check(result.get("success") is True, "commit did not succeed", result)
    results = result.get("results")
    check(isinstance(results, list) and len(results) == 2, "commit should report 2 operations", result)
    check([r.get("type") for r in results] == ["ack", "push"], "operations reported out of order",
          result)
    check(all(r.get("success") is True for r in results), "an operation of the commit failed", result)

    # The ack took effect: the input's next message comes at once (lease released,
    # cursor past order 1), and order 1 never comes back.
    following = await queen.queue(src).wait(False).pop()
    check([m.get("data") for m in following] == [{"order": 2}],
          "after the committed ack the input should yield order 2", following)
    check((await queen.ack(following[0], True)).get("success") is True, "ack of order 2 failed")
    check(await queen.queue(src).wait(False).pop() == [], "the acked input message came back")

    # The push took effect.
    output = await queen.queue(dst).wait(False).pop()
    check([m.get("data") for m in output] == [processed_result],
          "the committed push is not in the output queue", output)
    check((await queen.ack(output[0], True)).get("success") is True, "ack of the output failed")

    # An ack of a message that does not exist fails the whole commit: the push rolls back.
    ghost = {"transactionId": f"ghost-{RUN}", "partitionId": messages[0]["partitionId"]}
    mark = wire.mark()
    try:
        await queen.transaction().ack(ghost).queue(dst).push([{"data": {"ghost": True}}]).commit()
    except Exception as error:  # the SDK raises on any failed commit
        print(f"    (expected) failed commit raised: {error}")
    else:
        raise Failed("a commit acking a nonexistent message succeeded")
    rolled_back = wire.since(mark)
    check(await queen.queue(dst).wait(False).pop() == [],
          "the push of a failed commit is visible")

    def allowed(exchange):
        return exchange in rolled_back and exchange.path == "/api/v1/transaction"

    return lambda mark: wire.problems(mark, allowed)


async def tracing(queen, wire):
    """README: await msg['trace']({...}) inside a consume handler."""
    q = name("traced")
    check_pushed(await queen.queue(q).push([{"data": {"orderId": 12345, "total": 9.5}}]), 1, "push")
    traced = []

    async def handler(msg):
        order_id = msg["data"]["orderId"]
        traced.append(await msg["trace"]({
            "traceName": f"order-{order_id}",
            "eventType": "info",
            "data": {"text": "Order processing started"},
        }))
        traced.append(await msg["trace"]({
            "traceName": [f"order-{order_id}", "tenant-7"],
            "eventType": "processing",
            "data": {"text": "Order completed", "total": msg["data"]["total"]},
        }))

    await consume_until_done(queen.queue(q).limit(1).consume(handler), "consume with traces")
    check(len(traced) == 2 and all(t.get("success") is True for t in traced),
          "msg['trace'](...) did not succeed", traced)
    return wire.problems


SCENARIOS = [push_and_consume, dead_letters, lease_renewal, transaction, tracing, maintenance]


async def main():
    only = set(filter(None, os.environ.get("QUEEN_SDK_SCENARIOS", "").split(",")))
    wire = Wire()
    failures = []
    print(f"queen-mq SDK e2e against {BASE_URL} (run {RUN})")
    async with Queen(BASE_URL) as queen:
        wire.attach(queen)
        for scenario in SCENARIOS:
            if only and scenario.__name__ not in only:
                continue
            mark = wire.mark()
            started = time.monotonic()
            error = None
            try:
                problems_of = await asyncio.wait_for(scenario(queen, wire), SCENARIO_TIMEOUT_S)
                problems = problems_of(mark)
                if problems:
                    error = "the broker answered wrongly on the wire:\n    " + "\n    ".join(problems)
            except Failed as failed:
                error = str(failed)
            except asyncio.TimeoutError:
                error = f"scenario timed out after {SCENARIO_TIMEOUT_S}s"
            except Exception:
                error = "unexpected exception:\n" + traceback.format_exc()
            elapsed = time.monotonic() - started
            if error is None:
                print(f"PASS {scenario.__name__} ({elapsed:.1f}s, {len(wire.since(mark))} requests)")
                if VERBOSE:
                    for exchange in wire.since(mark):
                        print(f"    {exchange}")
                continue
            failures.append(scenario.__name__)
            print(f"FAIL {scenario.__name__} ({elapsed:.1f}s): {error}")
            print("  exchanges of this scenario:")
            for exchange in wire.since(mark):
                print(f"    {exchange}")
    sys.stdout.flush()
    if failures:
        print(f"{len(failures)} scenario(s) failed: {', '.join(failures)}")
        return 1
    print("all scenarios passed")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))

"""Kafka client quotas on tenant principals (transport/quota_admin.py), on the real broker:
set, reported unchanged, drift reported and pruned; and on the secured broker the quota
really throttles the tenant's producer."""

from __future__ import annotations

import asyncio
import time

import pytest

from kip.transport.admin import apply
from kip.topics.catalogue import TopicSpec
from kip.transport.quota_admin import apply_quotas, describe_quotas

pytestmark = pytest.mark.broker


def test_quotas_are_set_reported_and_pruned(broker, prefix):
    a, b = f"tenant-{prefix}a", f"tenant-{prefix}b"
    wanted = {a: {"producer_byte_rate": 1_000_000.0, "request_percentage": 25.0},
              b: {"producer_byte_rate": 2_000_000.0, "request_percentage": 50.0}}
    ours = f"tenant-{prefix}"

    async def go():
        first = await apply_quotas(broker.kafka, wanted, ours=ours)
        await _until(broker, ours, wanted)   # the broker's metadata takes a moment
        again = await apply_quotas(broker.kafka, wanted, ours=ours)
        fewer = await apply_quotas(broker.kafka, {a: wanted[a]}, ours=ours)
        pruned = await apply_quotas(broker.kafka, {a: wanted[a]}, ours=ours, prune=True)
        return first, again, fewer, pruned, await _until(broker, ours, {a: wanted[a]})
    first, again, fewer, pruned, left = asyncio.run(go())
    assert first.set == wanted and again.unchanged == wanted and not again.set
    assert fewer.drift == {b: wanted[b]} and pruned.removed == {b: wanted[b]}
    assert left == {a: wanted[a]}


async def _until(broker, ours: str, expected: dict, timeout_s: float = 10.0) -> dict:
    """The quotas of users starting with ``ours``, once they are ``expected`` (or the
    last seen after ``timeout_s``)."""
    admin = broker.kafka.admin()
    await admin.start()
    try:
        for _ in range(int(timeout_s / 0.2)):
            found = {u: q for u, q in (await describe_quotas(admin)).items()
                     if u.startswith(ours)}
            if found == expected:
                break
            await asyncio.sleep(0.2)
        return found
    finally:
        await admin.close()


@pytest.mark.timeout(120)
def test_the_broker_throttles_a_tenant_past_its_byte_rate(secure_broker, prefix):
    """tenant-greedy at 256 KiB/s: 2 MiB take it seconds; at 64 MiB/s, a fraction of
    one. The broker delays its responses and mutes its connection: the producer's own
    sends back up, before any kip process reads a byte."""
    topic = f"{prefix}.flood"
    greedy = "tenant-greedy"

    async def send_two_mib() -> float:
        producer = secure_broker.client(greedy).producer(linger_ms=5)
        await producer.start()
        try:
            started = time.monotonic()
            futures = [await producer.send(topic, b"x" * 65_536) for _ in range(32)]
            await asyncio.gather(*futures)
            return time.monotonic() - started
        finally:
            await producer.stop()

    async def go():
        from kip.transport.acl_admin import apply as apply_acls
        from kip.topics.acls import Acl, Operation, Pattern, Resource
        await apply(secure_broker.kafka, [TopicSpec(topic, 1, "test", "test")])
        acls = {Acl(f"User:{greedy}", Resource.TOPIC, topic, Pattern.LITERAL, op)
                for op in (Operation.WRITE, Operation.DESCRIBE)}
        from kip.topics.names import TopicNames
        await apply_acls(secure_broker.kafka, TopicNames(prefix), acls)
        timings = {}
        for rate in (64 * 2**20, 256 * 1024):
            await apply_quotas(secure_broker.kafka, {greedy: {
                "producer_byte_rate": float(rate), "request_percentage": 200.0}},
                ours="tenant-greedy")
            await asyncio.sleep(1)   # quotas reach the broker's cache asynchronously
            timings[rate] = await send_two_mib()
        await apply_quotas(secure_broker.kafka, {}, ours="tenant-greedy", prune=True)
        return timings
    timings = asyncio.run(go())
    fast, slow = timings[64 * 2**20], timings[256 * 1024]
    print(f"2 MiB from tenant-greedy: {fast:.2f} s at 64 MiB/s, {slow:.2f} s at 256 KiB/s")
    assert fast < 2.0 and slow > 3.0, timings

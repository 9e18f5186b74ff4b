"""A work item is run once (workers/single_use.py): copies written back onto its partition
or another, and one written too long after its routing, get no inference, no result and
no final audit record, also from a worker that starts after the original was answered;
on the real broker, with a real worker."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from aiokafka import AIOKafkaProducer

from kip.schemas import AuditRecord, DeadLetterRecord, InferenceResult, decode
from kip.schemas.codec import encode, now_ms
from kip.schemas.messages import Priority
from kip.schemas.stamps import stamped
from tests.e2e.conftest import read_topic
from tests.workers.test_background_pull import _worker_settings
from tests.workers.test_long_batches import _work_item
from kip.topics.names import TopicNames
from kip.workers.worker import Worker

pytestmark = pytest.mark.broker
COPIES = 6


async def _send(broker, topic: str, value: bytes, partition: int) -> None:
    async with AIOKafkaProducer(bootstrap_servers=broker.bootstrap) as producer:
        await producer.send_and_wait(topic, value, partition=partition)


async def _endings(broker, names: TopicNames, request_id: str, audits: int) -> tuple:
    """Results, audit records and dead letters of ``request_id``, once ``audits`` audit
    records are there (or after 30 s)."""
    for _ in range(60):
        audit = [a for a in (decode(AuditRecord, r.value) for r in
                             await read_topic(broker.kafka, names.audit))
                 if a.request_id == request_id]
        if len(audit) >= audits:
            break
        await asyncio.sleep(0.5)
    await asyncio.sleep(1)
    results = [decode(InferenceResult, r.value) for r in
               await read_topic(broker.kafka, names.results)]
    dead = [decode(DeadLetterRecord, r.value) for r in
            await read_topic(broker.kafka, names.deadletter)]
    return ([r for r in results if r.request_id == request_id], audit,
            [d for d in dead if d.request_id == request_id])


@pytest.mark.timeout(180)
def test_a_copied_work_item_is_answered_once(broker, registry, prefix, tmp_path):
    names = TopicNames(prefix)
    topic = names.work("digits", Priority.STANDARD)

    async def scenario():
        settings = await _worker_settings(broker, registry, names, tmp_path)
        item = stamped(_work_item(registry, names), settings.stamp_keys())
        value, rid = encode(item), item.request.request_id
        async with Worker(settings):
            await _send(broker, topic, value, 0)
            for _ in range(COPIES):   # copies on its partition: one owner, who knows it
                await _send(broker, topic, value, 0)
            await _send(broker, topic, value, 1)   # elsewhere: not where its stamp says
            first = await _endings(broker, names, rid, 1 + COPIES + 1)
        async with Worker(settings):   # a worker that starts after: it reads them back
            await _send(broker, topic, value, 0)
            second = await _endings(broker, names, rid, 1 + COPIES + 2)
        return first, second
    (results, audit, dead), (results_after, audit_after, dead_after) = asyncio.run(scenario())
    assert [r.status for r in results] == ["ok"] and results_after == results
    assert [a.decision for a in audit if a.final] == ["ok"]
    assert [a.decision for a in audit_after if a.final] == ["ok"]
    refused = [a for a in audit_after if not a.final]
    assert len(refused) == COPIES + 2 and {a.decision for a in refused} == {"refused"}
    assert sum(a.error_code == "DUPLICATE_REQUEST" for a in refused) == COPIES + 1
    assert sum("belongs on partition 0" in a.reason for a in refused) == 1
    assert len(dead_after) == COPIES + 2


@pytest.mark.timeout(120)
def test_a_work_item_appended_long_after_its_routing_is_refused(broker, registry, prefix,
                                                                tmp_path):
    """The work topics keep the broker's append time: an item appended more than the
    transit bound after its routing is a copy made later, whatever it says."""
    names = TopicNames(prefix)
    topic = names.work("digits", Priority.STANDARD)

    async def scenario():
        settings = await _worker_settings(broker, registry, names, tmp_path)
        old = _work_item(registry, names).model_copy(update={
            "routed_at_ms": now_ms() - 6 * 60_000, "deadline_ms": now_ms() + 60_000})
        item = stamped(old, settings.stamp_keys())
        async with Worker(settings):
            await _send(broker, topic, encode(item), 0)
            return await _endings(broker, names, item.request.request_id, 1)
    results, audit, dead = asyncio.run(scenario())
    assert results == [] and [a.decision for a in audit] == ["refused"]
    assert "after it was routed" in audit[0].reason and len(dead) == 1


def test_the_refusal_of_an_item_placed_elsewhere_or_late_or_answered():
    """``Answered.refusal`` without a broker."""
    from aiokafka.structs import ConsumerRecord

    from kip.workers.single_use import Answered

    names = TopicNames("kip")
    item = _fake_item(names)
    answered = Answered(names, transit_ms=1000)

    def record(partition=0, appended=1_000, topic="kip.work.digits.standard"):
        return ConsumerRecord(topic, partition, 1, appended, 1, None, b"", None, 0, 0, [])
    assert answered.refusal(record(), item) is None
    assert answered.refusal(record(), item).code == "DUPLICATE_REQUEST"
    assert "partition 0" in answered.refusal(record(partition=1), item).message
    assert "partition 0" in answered.refusal(record(topic="kip.work.digits.batch"),
                                             item).message
    assert "after it was routed" in answered.refusal(record(appended=2_001), item).message
    [entry] = answered.records(next(iter(answered.partitions)), "digits", "standard")
    assert entry.topic == "kip.answered.digits.standard" and entry.partition == 0


def _fake_item(names: TopicNames):
    from kip.schemas.messages import InferenceRequest, Route, WorkItem
    from kip.schemas.tensors import Tensor
    request = InferenceRequest(request_id="r-1", tenant="acme", key_id="k", signature="0" * 64,
                               issued_at_ms=1, priority="standard", model="digits",
                               inputs=[Tensor.from_array("pixels", np.zeros((1, 64),
                                                                            np.float32))])
    return WorkItem(request=request, routed_at_ms=1_000, deadline_ms=10**12, work_partition=0,
                    route=Route(alias="digits", model_name="digits", model_version="1",
                                artifact_sha256="a" * 64))


def _appended(names: TopicNames, n: int, routed_at_ms: int, appended_at_ms: int):
    """A (record, item) pair as ``Answered.refusal`` reads them: request ``r<n>``,
    on its stamped partition 0, appended at ``appended_at_ms`` by the broker's clock."""
    from types import SimpleNamespace
    from aiokafka.structs import ConsumerRecord
    from kip.workers.single_use import LOG_APPEND_TIME
    topic = names.work("digits", Priority.STANDARD)
    item = SimpleNamespace(
        work_partition=0, routed_at_ms=routed_at_ms,
        route=SimpleNamespace(model_name="digits"),
        request=SimpleNamespace(tenant="acme", request_id=f"r{n}",
                                priority=Priority.STANDARD))
    record = ConsumerRecord(topic, 0, n, appended_at_ms, LOG_APPEND_TIME, None, b"", None,
                            0, 0, ())
    return record, item


def test_answered_ids_are_kept_for_the_transit_time_and_forgotten_oldest_first():
    from kip.workers.single_use import Answered
    names = TopicNames("unit")
    answered = Answered(names, transit_ms=1000)
    for n in range(5000):   # routed 1 ms apart, appended at once
        assert answered.refusal(*_appended(names, n, n, n)) is None
    # A copy of r4000 within its transit time is refused; the ids older than the
    # partition's clock less transit_ms are forgotten, the rest kept.
    assert answered.refusal(*_appended(names, 4000, 4000, 4999)).code == "DUPLICATE_REQUEST"
    held = answered.partitions[next(iter(answered.partitions))]
    assert min(at for at in held.values()) == 4999 - 1000
    assert len(held) == 1001

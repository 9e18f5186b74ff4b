"""Probes of what a principal may do with a topic, on a secured broker: a write is
refused with Kafka's TOPIC_AUTHORIZATION_FAILED; a read is refused at metadata (without
DESCRIBE) or at the fetch (without READ), and a permitted one returns the seeded record."""

from __future__ import annotations

from aiokafka import TopicPartition
from aiokafka.errors import ClusterAuthorizationFailedError, TopicAuthorizationFailedError

from kip.transport.clients import KafkaConnection

R, W = "read", "write"


async def seed(kafka: KafkaConnection, topics) -> None:
    """One record in every topic, so that a permitted read has something to read."""
    producer = kafka.producer()
    await producer.start()
    try:
        for topic in topics:
            await producer.send_and_wait(topic, b"seed", key=b"seed", partition=0)
    finally:
        await producer.stop()


async def abilities(kafka: KafkaConnection, topics: dict[str, str]) -> dict[str, set]:
    found: dict[str, set] = {}
    for kind, topic in topics.items():
        ops = {op for op, probe in ((R, can_read), (W, can_write))
               if await probe(kafka, topic)}
        if ops:
            found[kind] = ops
    return found


async def can_write(kafka: KafkaConnection, topic: str) -> bool:
    producer = kafka.producer(enable_idempotence=False, request_timeout_ms=5000)
    try:
        await producer.start()
        await producer.send_and_wait(topic, b"probe", key=b"probe", partition=0)
        return True
    except (TopicAuthorizationFailedError, ClusterAuthorizationFailedError):
        return False
    finally:
        await producer.stop()


async def can_read(kafka: KafkaConnection, topic: str) -> bool:
    """Metadata first (refused without DESCRIBE), then a fetch from offset 0 (refused
    without READ); a permitted read returns the seeded record."""
    consumer = kafka.consumer(group_id=None)
    probe = kafka.producer(enable_idempotence=False)
    try:
        await consumer.start()
        await probe.start()
        await probe.partitions_for(topic)
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        batches = await consumer.getmany(tp, timeout_ms=5000)
        return any(r.value == b"seed" for r in batches.get(tp, []))
    except TopicAuthorizationFailedError:
        return False
    finally:
        await probe.stop()
        await consumer.stop()

"""The floors ``kip bench cost`` compares kip with: what each floor's hops really do."""

from __future__ import annotations

import asyncio
import threading

from aiokafka import TopicPartition

from kip.devkit import floors
from kip.transport.clients import KafkaConnection


async def _count_committed(kafka: KafkaConnection, topic: str, expected: int) -> int:
    """Committed records on ``topic`` (one partition), read until ``expected`` arrive
    and a moment longer, so that extra ones are counted too."""
    consumer = kafka.consumer(group_id=None, auto_offset_reset="earliest")
    await consumer.start()
    try:
        consumer.assign([TopicPartition(topic, 0)])
        seen, quiet = 0, 0
        while quiet < 3:
            batch = await consumer.getmany(timeout_ms=500)
            got = sum(len(records) for records in batch.values())
            seen += got
            quiet = quiet + 1 if got == 0 and seen >= expected else 0
        return seen
    finally:
        await consumer.stop()


def test_the_floor_of_kips_shape_writes_its_side_records_and_transforms_off_the_loop(
        broker, prefix):
    kafka = KafkaConnection(bootstrap=broker.bootstrap)
    payloads = [b"one", b"two", b"three"]
    threads: list[int] = []

    def transform(value: bytes) -> bytes:
        threads.append(threading.get_ident())
        return value.upper()

    async def scenario() -> tuple[list, int, int]:
        trips = await floors.kips_shape_round_trip(kafka, payloads, transform, run=prefix)
        sent = floors.WARM_UP_TRIPS + len(payloads)
        # the faust first hop writes two side records a record, the second hop one
        return (trips, await _count_committed(kafka, f"{prefix}.side0", 2 * sent),
                await _count_committed(kafka, f"{prefix}.side1", sent))

    trips, side0, side1 = asyncio.run(scenario())
    assert len(trips) == len(payloads)
    assert all(wall > spent >= 0 for wall, spent in trips)
    assert threads and threading.get_ident() not in threads
    sent = floors.WARM_UP_TRIPS + len(payloads)
    assert (side0, side1) == (2 * sent, sent)

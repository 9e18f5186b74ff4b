"""Reading a topic up to its end, on the real broker."""

from __future__ import annotations

import asyncio
import time

import pytest

from topics.admin import apply
from topics.catalogue import TopicSpec
from topics.reading import records_since

pytestmark = pytest.mark.broker


def test_a_read_to_the_end_of_a_transactional_topic_ends_soon_after_its_last_record(
        broker, prefix):
    """The end is past the last commit marker, which only an empty fetch moves the reader
    over: at aiokafka's default fetch wait that read would end 500 ms or more later."""
    topic = f"{prefix}.written"

    async def go():
        await apply(broker.kafka, [TopicSpec(topic, 1, "any", "test", {})])
        producer = broker.kafka.producer(transactional_id=f"{prefix}-writer")
        await producer.start()
        try:
            async with producer.transaction():
                await producer.send(topic, b"one", key=b"k")
        finally:
            await producer.stop()
        started = time.monotonic()
        read = [r.value async for r in records_since(broker.kafka, topic, 0)]
        return read, time.monotonic() - started

    read, took_s = asyncio.run(go())
    assert read == [b"one"]
    assert took_s < 0.45, f"read to the end in {took_s:.2f} s"

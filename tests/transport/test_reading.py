"""Reading a topic up to its end."""

from __future__ import annotations

import asyncio

import pytest

from kip.transport.admin import apply
from kip.topics.catalogue import TopicSpec
from kip.transport.clients import HOT_PATH_FETCH_MAX_WAIT_MS, KafkaConnection
from kip.transport.reading import reader_to_end, records_since


def test_a_reader_to_the_end_fetches_with_the_short_wait():
    """Its read ends on a fetch past the last commit marker, which brings no record: at
    aiokafka's 500 ms a secured e2e test's reads of its outputs took 7.4 s, not 1.6 s."""
    async def made() -> tuple[int, str | None]:
        consumer = reader_to_end(KafkaConnection(bootstrap="127.0.0.1:9"))
        await consumer.stop()   # never started: nothing to close but itself
        return consumer._fetch_max_wait_ms, consumer._group_id

    wait_ms, group = asyncio.run(made())
    assert wait_ms == HOT_PATH_FETCH_MAX_WAIT_MS < 500 and group is None


@pytest.mark.broker
def test_a_committed_record_is_read_and_the_read_ends(broker, prefix):
    topic = f"{prefix}.written"

    async def go() -> list[bytes]:
        await apply(broker.kafka, [TopicSpec(topic, 1, "any", "test", {})])
        producer = broker.kafka.producer(transactional_id=f"{prefix}-writer")
        await producer.start()
        try:
            async with producer.transaction():
                await producer.send(topic, b"one", key=b"k")
        finally:
            await producer.stop()
        for _ in range(50):   # the commit markers land a moment after the commit returns
            read = [r.value async for r in records_since(broker.kafka, topic, 0)]
            if read:
                return read
            await asyncio.sleep(0.1)
        return []

    assert asyncio.run(asyncio.wait_for(go(), 30)) == [b"one"]

"""Fetch waits on the real broker (transport/fetch_waits.py): a reader whose fetch asks for
every partition waits long at the broker, yet gets a record the moment its transaction
commits; one that leaves a partition out keeps the short wait."""

from __future__ import annotations

import asyncio
import time
from contextlib import asynccontextmanager

import pytest
from aiokafka import TopicPartition

from tests.transport.test_transactions import _create
from kip.transport.clients import HOT_PATH_FETCH_MAX_WAIT_MS
from kip.transport.fetch_waits import IDLE_FETCH_MAX_WAIT_MS, wait_long_when_whole

pytestmark = pytest.mark.broker


@asynccontextmanager
async def _reader(broker, topic: str, idle_ms: int = IDLE_FETCH_MAX_WAIT_MS):
    """A started hot-path reader of the topic's 3 partitions, and the (wait, partitions)
    of each fetch it sends."""
    consumer = broker.kafka.consumer(group_id=None,
                                     fetch_max_wait_ms=HOT_PATH_FETCH_MAX_WAIT_MS)
    await consumer.start()
    fetches: list[tuple[int, int]] = []
    send = consumer._client.send

    async def recording(node_id, request, *args, **kwargs):
        if type(request).__name__ == "FetchRequest":
            fetches.append((request._max_wait_ms, sum(len(p) for _, p in request.topics)))
        return await send(node_id, request, *args, **kwargs)
    consumer._client.send = recording
    try:
        wait_long_when_whole(consumer, idle_ms)
        consumer.assign([TopicPartition(topic, p) for p in range(3)])
        yield consumer, fetches
    finally:
        await consumer.stop()


def test_an_idle_reader_asks_for_every_partition_and_waits_long(broker, prefix):
    async def scenario():
        await _create(broker.bootstrap, {f"{prefix}.t": 3})
        async with _reader(broker, f"{prefix}.t") as (_, fetches):
            await asyncio.sleep(0.3)   # the partitions' leaders and positions found
            fetches.clear()
            await asyncio.sleep(2.0)
        assert fetches and set(fetches) == {(IDLE_FETCH_MAX_WAIT_MS, 3)}
        assert len(fetches) <= 6   # at 50 ms each, ~40 in the same time
    asyncio.run(scenario())


def test_a_record_committed_meanwhile_ends_the_long_wait(broker, prefix):
    """With a 10 s wait in flight, a record in a committed transaction still arrives at
    once: the broker answers a fetch as soon as one of its partitions has a record."""
    async def scenario():
        await _create(broker.bootstrap, {f"{prefix}.t": 3})
        async with _reader(broker, f"{prefix}.t", idle_ms=10_000) as (consumer, fetches):
            await asyncio.sleep(1.0)   # the long fetch is at the broker
            assert fetches[-1] == (10_000, 3)
            producer = broker.kafka.producer(transactional_id=f"{prefix}.tx")
            await producer.start()
            try:
                async with producer.transaction():
                    await producer.send(f"{prefix}.t", b"v", partition=1)
                committed = time.monotonic()
            finally:
                await producer.stop()
            record = await asyncio.wait_for(consumer.getone(), 10)
            waited = time.monotonic() - committed
        assert record.value == b"v"
        assert waited < 2.0, f"the record waited {waited:.1f} s for the fetch in flight"
    asyncio.run(scenario())


def test_a_fetch_that_leaves_a_partition_out_keeps_the_short_wait(broker, prefix):
    async def scenario():
        await _create(broker.bootstrap, {f"{prefix}.t": 3})
        async with _reader(broker, f"{prefix}.t") as (consumer, fetches):
            await asyncio.sleep(0.3)
            consumer.pause(TopicPartition(f"{prefix}.t", 0))
            await asyncio.sleep(0.8)   # the long fetch in flight ends meanwhile
            fetches.clear()
            await asyncio.sleep(1.0)
        assert len(fetches) >= 5 and set(fetches) == {(HOT_PATH_FETCH_MAX_WAIT_MS, 2)}
    asyncio.run(scenario())

"""A lane builds each assigned partition's producer (fencing the partition's previous
owner, reading its floor) when the partition is assigned, not at its first commit."""

from __future__ import annotations

import asyncio

import pytest

from tests.workers.test_background_pull import _worker_settings
from kip.topics.names import TopicNames
from kip.workers.worker import Worker

pytestmark = pytest.mark.broker


@pytest.mark.timeout(120)
def test_every_assigned_partition_has_its_producer_before_any_record(broker, registry,
                                                                     prefix, tmp_path):
    names = TopicNames(prefix)

    async def scenario():
        settings = await _worker_settings(broker, registry, names, tmp_path)
        async with Worker(settings) as worker:
            for lane in worker.lanes:
                assigned = await _assigned(lane.consumer)
                claimed = lane.transactions._producers
                assert assigned and assigned <= set(claimed), lane.name
                for tp in assigned:   # fenced: each holds its id's producer id and epoch
                    assert claimed[tp]._txn_manager.producer_id >= 0
    asyncio.run(scenario())


async def _assigned(consumer, timeout_s: float = 60.0) -> set:
    """The consumer's partitions, once it has some and the listener has run."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not consumer.assignment() and loop.time() < deadline:
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.5)   # the listener runs before fetching starts; let it finish
    return set(consumer.assignment())

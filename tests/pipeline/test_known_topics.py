"""The topic view on the real broker: read before the first round, then again in the
background every ``max_age_s``, so no round waits on a metadata request and an idle
pipeline's view does not age."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from kip.pipeline.known_topics import KnownTopics

pytestmark = pytest.mark.broker


def test_the_view_is_read_again_in_the_background_while_rounds_use_it(broker, prefix):
    async def scenario():
        known = KnownTopics(broker.kafka, max_age_s=0.2)
        try:
            first = await known.current()
            assert f"{prefix}.new" not in first
            await _create_topic(broker, f"{prefix}.new")
            await asyncio.sleep(1.0)   # no round asks meanwhile: read again all the same
            assert f"{prefix}.new" in await known.current()
        finally:
            await known.close()
    asyncio.run(scenario())


def test_callers_before_the_first_read_ends_share_it(broker, prefix):
    """Callers that ask at once before the first read ends: one admin client, one read,
    one background reader, the same view for each."""
    async def scenario():
        known = KnownTopics(broker.kafka)
        try:
            views = await asyncio.gather(*(known.current() for _ in range(3)))
            admin, reading = known._admin, known._reading
            assert views[0] is views[1] is views[2] and views[0]
            assert (await known.current()) is views[0]
            assert known._admin is admin and known._reading is reading
        finally:
            await known.close()
    asyncio.run(scenario())


def test_a_shared_view_reads_on_until_its_last_user_closes_it(broker):
    """The agents of one pipeline process share one view: one agent's close leaves the
    others' view reading; the last close stops it and its admin client."""
    async def scenario():
        known = KnownTopics(broker.kafka, max_age_s=0.1)
        first, second = known.shared(), known.shared()
        assert first is second is known
        await first.current()
        await first.close()
        reading = known._reading
        await asyncio.sleep(0.3)
        assert not reading.done() and known._admin is not None
        await second.close()
        assert reading.done() and known._admin is None
    asyncio.run(scenario())


def test_a_user_after_the_last_close_reads_afresh(broker, prefix):
    """A closed view is not left to age: one that is taken again after its last close
    (an agent started again in the same process) reads the list anew and keeps reading."""
    async def scenario():
        known = KnownTopics(broker.kafka, max_age_s=0.1)
        await known.shared().current()
        await known.close()
        await _create_topic(broker, f"{prefix}.after")
        again = known.shared()
        try:
            assert f"{prefix}.after" in await again.current()
            assert known._reading is not None and not known._reading.done()
        finally:
            await again.close()
    asyncio.run(scenario())


async def _create_topic(broker, name: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, 1, 1)])
    finally:
        await admin.close()


def test_a_topic_described_with_an_error_keeps_the_partitions_read_before():
    from kip.pipeline.known_topics import _counted
    described = [{"topic": "w", "error_code": 5, "partitions": []},      # leader moving
                 {"topic": "new", "error_code": 5, "partitions": []},
                 {"topic": "ok", "error_code": 0, "partitions": [{}, {}, {}]}]
    assert _counted(described, {"w": 12}) == {"w": 12, "ok": 3}

"""The topic view on the real broker: read before the first round, then again in the
background every ``max_age_s``, so no round waits on a metadata request and an idle
pipeline's view does not age."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from pipeline.known_topics import KnownTopics

pytestmark = pytest.mark.broker


def test_the_view_is_read_again_in_the_background_while_rounds_use_it(broker, prefix):
    async def scenario():
        known = KnownTopics(broker.kafka, max_age_s=0.2)
        try:
            first = await known.current()
            assert f"{prefix}.new" not in first
            admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
            await admin.start()
            try:
                await admin.create_topics([NewTopic(f"{prefix}.new", 1, 1)])
            finally:
                await admin.close()
            await asyncio.sleep(1.0)   # no round asks meanwhile: read again all the same
            assert f"{prefix}.new" in await known.current()
        finally:
            await known.close()
    asyncio.run(scenario())

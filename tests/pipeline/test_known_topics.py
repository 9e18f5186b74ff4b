"""The topic view on the real broker: read once before the first round, then read again
in the background, so no round waits on a metadata request."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from pipeline.known_topics import KnownTopics

pytestmark = pytest.mark.broker


def test_a_stale_view_is_served_while_it_is_read_again(broker, prefix):
    async def scenario():
        known = KnownTopics(broker.kafka, max_age_s=0.0)
        try:
            first = await known.current()
            assert f"{prefix}.new" not in first
            admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
            await admin.start()
            try:
                await admin.create_topics([NewTopic(f"{prefix}.new", 1, 1)])
            finally:
                await admin.close()
            assert await known.current() is first   # stale: served as it is, read again
            for _ in range(50):
                await asyncio.sleep(0.1)
                if f"{prefix}.new" in await known.current():
                    break
            assert f"{prefix}.new" in await known.current()
        finally:
            await known.close()
    asyncio.run(scenario())

"""``kip topics apply`` on the real broker: what it created is served when it returns."""

import asyncio

import pytest

from kip.transport.admin import _until_served, apply
from kip.topics.catalogue import catalogue
from kip.topics.names import TopicNames

pytestmark = pytest.mark.broker


def test_what_apply_created_is_served_when_it_returns(broker, prefix):
    specs = catalogue(TopicNames(prefix), ["digits", "minilm"], partitions=3)

    async def go():
        report = await apply(broker.kafka, specs)
        consumer = broker.kafka.consumer()
        await consumer.start()
        try:   # one metadata request, no retry: every partition is there
            await consumer._client.force_metadata_update()
            return report, {n: consumer.partitions_for_topic(n) for n in report.created}
        finally:
            await consumer.stop()

    report, partitions = asyncio.run(go())
    assert len(report.created) == len(specs)
    assert all(partitions[s.name] == set(range(s.partitions)) for s in specs)


def test_a_topic_never_served_names_itself_after_the_timeout(broker, prefix):
    async def go():
        admin = broker.kafka.admin(client_id="kip-test")
        await admin.start()
        try:
            await _until_served(admin, [f"{prefix}.never-created"], timeout_s=0.3)
        finally:
            await admin.close()

    with pytest.raises(TimeoutError, match=r"never-created: check the broker's log"):
        asyncio.run(go())

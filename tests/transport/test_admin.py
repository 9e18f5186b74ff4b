"""``kip topics apply`` on the real broker: what it created is served when it returns; on a
cluster of three it replicates as the cluster can hold and warns of a single copy."""

import asyncio
from dataclasses import replace

import pytest

from kip.transport.admin import (TopicCreationError, _create, _until_served, apply,
                                 cluster_brokers)
from kip.topics.catalogue import Replication, catalogue
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


def test_a_topic_the_listing_missed_is_compared_not_reported_created(broker, prefix):
    """On a cluster the broker that lists topics can lag the controller that made one:
    such a topic is then sent to be created again, and the controller's answer says it
    exists."""
    spec = catalogue(TopicNames(prefix), ["digits"], partitions=1)[0]
    assert asyncio.run(apply(broker.kafka, [spec])).created == [spec.name]

    async def again():
        admin = broker.kafka.admin(client_id="kip-test")
        await admin.start()
        try:
            return await _create(admin, [spec])
        finally:
            await admin.close()

    assert asyncio.run(again()) == {spec.name}


def test_a_topic_the_controller_refuses_names_itself(broker, prefix):
    spec = replace(catalogue(TopicNames(prefix), ["digits"], partitions=1)[0], replicas=3)
    with pytest.raises(TopicCreationError, match=rf"{spec.name}: the controller refused it"):
        asyncio.run(apply(broker.kafka, [spec]))


def test_on_a_cluster_of_three_topics_keep_three_copies_two_in_sync(cluster, prefix):
    replication = Replication.for_cluster(asyncio.run(cluster_brokers(cluster.kafka)))
    specs = catalogue(TopicNames(prefix), ["digits"], partitions=2, replication=replication)

    async def described(names):
        admin = cluster.kafka.admin(client_id="kip-test")
        await admin.start()
        try:
            return await admin.describe_topics(names)
        finally:
            await admin.close()

    first = asyncio.run(apply(cluster.kafka, specs))
    assert len(first.created) == len(specs) and not first.warnings
    topics = asyncio.run(described([s.name for s in specs]))
    assert {len(p["replicas"]) for t in topics for p in t["partitions"]} == {3}
    again = asyncio.run(apply(cluster.kafka, specs))
    assert not again.drift and len(again.unchanged) == len(specs)
    assert all(s.config["min.insync.replicas"] == "2" for s in specs)


def test_a_single_copy_on_a_cluster_is_drift_and_a_warning(cluster, prefix):
    single = catalogue(TopicNames(prefix), ["digits"], partitions=1)[:1]
    asyncio.run(apply(cluster.kafka, single))
    wanted = [replace(single[0], replicas=3, config=single[0].config
                      | {"min.insync.replicas": "2"})]
    report = asyncio.run(apply(cluster.kafka, wanted))
    assert report.drift == [f"{single[0].name}: replication factor 1 (catalogue: 3), "
                            "min.insync.replicas=1 (catalogue: 2)"]
    assert len(report.warnings) == 1
    assert "replication factor 1 on a cluster of 3 brokers" in report.warnings[0]
    assert any(line.startswith("WARNING") for line in report.lines())


def test_replication_follows_the_cluster_unless_set():
    assert Replication.for_cluster(1) == Replication(1, 1)
    assert Replication.for_cluster(2) == Replication(2, 1)
    assert Replication.for_cluster(3) == Replication(3, 2)
    assert Replication.for_cluster(5) == Replication(3, 2)
    assert Replication.for_cluster(5, factor=5) == Replication(5, 2)
    assert Replication.for_cluster(3, factor=1) == Replication(1, 1)
    with pytest.raises(ValueError, match="cannot have more copies than brokers"):
        Replication.for_cluster(1, factor=3)
    with pytest.raises(ValueError, match="between 1 and the factor"):
        Replication.for_cluster(3, min_insync=4)

"""ACLs on the secured broker: applying the plan is idempotent and reports drift, and every
role can do exactly what the plan allows: every other read or write is refused by Kafka's
authorizer."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import TopicPartition
from aiokafka.errors import (ClusterAuthorizationFailedError, KafkaConnectionError,
                             TopicAuthorizationFailedError)
from aiokafka.protocol.admin import CreateAclsRequest

from schemas.messages import PRIORITIES, Priority
from topics.acl_admin import apply as apply_acls
from topics.acl_admin import describe
from topics.acls import plan
from topics.admin import apply
from topics.catalogue import catalogue
from topics.clients import KafkaConnection
from topics.names import TopicNames

pytestmark = pytest.mark.broker
TENANTS = {"acme": PRIORITIES, "bob": [Priority.BATCH]}
MODELS = ["digits"]
ROLES = ["tenant-acme", "pipeline", "worker-digits", "operator", "audit-reader"]
R, W = "read", "write"
# What each role may do with each kind of topic: the table docs/security.md shows.
ALLOWED = {
    "tenant-acme": {"requests": {W}, "reply:acme": {R}},
    "pipeline": {"requests": {R}, "work": {W}, "results": {W}, "reply:acme": {W},
                 "reply:bob": {W}, "audit": {W}, "deadletter": {W}, "control": {R},
                 "telemetry": {R}, "quota-levels": {R, W}},
    "worker-digits": {"work": {R}, "results": {W}, "reply:acme": {W}, "reply:bob": {W},
                      "audit": {W}, "deadletter": {W}, "telemetry": {W}},
    "operator": {"control": {R, W}},
    "audit-reader": {"audit": {R}},
}


def _topics(names: TopicNames) -> dict[str, str]:
    return {"requests": names.requests("standard"), "work": names.work("digits", "standard"),
            "results": names.results, "reply:acme": names.reply_topic("acme"),
            "reply:bob": names.reply_topic("bob"), "audit": names.audit,
            "deadletter": names.deadletter, "control": names.control,
            "telemetry": names.telemetry, "quota-levels": names.quota_levels}


@pytest.fixture
def secured(secure_broker, prefix):
    names = TopicNames(prefix)
    asyncio.run(apply(secure_broker.kafka, catalogue(names, MODELS, 1, list(TENANTS))))
    asyncio.run(apply_acls(secure_broker.kafka, plan(names, MODELS, TENANTS)))
    return secure_broker, names


def test_applying_again_changes_nothing_and_drift_is_reported_then_pruned(secured):
    broker, names = secured
    wanted = plan(names, MODELS, TENANTS)
    again = asyncio.run(apply_acls(broker.kafka, wanted))
    assert again.created == [] and set(again.unchanged) >= wanted

    async def grant_extra() -> None:   # a stale grant: bob may read the audit topic
        admin = broker.kafka.admin()
        await admin.start()
        try:
            await admin._send_request(CreateAclsRequest(2, names.audit, 3, "User:tenant-bob",
                                                        "*", 3, 3))
        finally:
            await admin.close()
    asyncio.run(grant_extra())
    drifted = asyncio.run(apply_acls(broker.kafka, wanted))
    assert [(a.principal, a.name) for a in drifted.drift] == [("User:tenant-bob", names.audit)]
    pruned = asyncio.run(apply_acls(broker.kafka, wanted, prune=True))
    assert len(pruned.removed) == 1 and pruned.drift == []
    assert asyncio.run(_grants_of(broker.kafka, "User:tenant-bob", names.audit)) == set()


async def _grants_of(kafka: KafkaConnection, principal: str, topic: str) -> set:
    admin = kafka.admin()
    await admin.start()
    try:
        return {a for a in await describe(admin) if a.principal == principal
                and a.name == topic}
    finally:
        await admin.close()


def test_every_role_does_exactly_what_the_plan_allows(secured):
    broker, names = secured
    topics = _topics(names)
    asyncio.run(_seed(broker.kafka, topics.values()))
    observed = {role: asyncio.run(_abilities(broker.client(role), topics)) for role in ROLES}
    print("\n" + _matrix(observed, list(topics)))
    assert observed == {role: ALLOWED[role] for role in ROLES}


def test_a_client_without_credentials_cannot_connect(secure_broker):
    async def go() -> None:
        producer = KafkaConnection(bootstrap=secure_broker.bootstrap).producer(
            request_timeout_ms=3000)
        try:
            await producer.start()
        finally:
            await producer.stop()
    with pytest.raises(KafkaConnectionError):
        asyncio.run(go())


def test_a_tenant_connects_with_mtls_and_its_certificate_names_its_principal(secured):
    broker, names = secured
    topics = _topics(names)
    asyncio.run(_seed(broker.kafka, topics.values()))
    mtls = broker.client("tenant-acme", mtls=True)
    assert mtls.security_protocol == "SSL" and mtls.sasl_mechanism is None
    assert asyncio.run(_abilities(mtls, topics)) == ALLOWED["tenant-acme"]


async def _seed(kafka: KafkaConnection, topics) -> None:
    """One record in every topic, so that a permitted read has something to read."""
    producer = kafka.producer()
    await producer.start()
    try:
        for topic in topics:
            await producer.send_and_wait(topic, b"seed", key=b"seed", partition=0)
    finally:
        await producer.stop()


async def _abilities(kafka: KafkaConnection, topics: dict[str, str]) -> dict[str, set]:
    found: dict[str, set] = {}
    for kind, topic in topics.items():
        ops = {op for op, probe in ((R, _can_read), (W, _can_write))
               if await probe(kafka, topic)}
        if ops:
            found[kind] = ops
    return found


async def _can_write(kafka: KafkaConnection, topic: str) -> bool:
    producer = kafka.producer(enable_idempotence=False, request_timeout_ms=5000)
    await producer.start()
    try:
        await producer.send_and_wait(topic, b"probe", key=b"probe", partition=0)
        return True
    except (TopicAuthorizationFailedError, ClusterAuthorizationFailedError):
        return False
    finally:
        await producer.stop()


async def _can_read(kafka: KafkaConnection, topic: str) -> bool:
    """Metadata first (refused without DESCRIBE), then a fetch from offset 0 (refused
    without READ); a permitted read returns the seeded record."""
    consumer = kafka.consumer(group_id=None)
    probe = kafka.producer(enable_idempotence=False)
    await consumer.start()
    await probe.start()
    try:
        await probe.partitions_for(topic)
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        batches = await consumer.getmany(tp, timeout_ms=5000)
        return any(r.value == b"seed" for r in batches.get(tp, []))
    except TopicAuthorizationFailedError:
        return False
    finally:
        await probe.stop()
        await consumer.stop()


def _matrix(observed: dict, kinds: list[str]) -> str:
    rows = ["| role | " + " | ".join(kinds) + " |", "|---|" + "---|" * len(kinds)]
    for role, abilities in observed.items():
        cells = ["+".join(sorted(abilities.get(k, ()))) or "-" for k in kinds]
        rows.append(f"| {role} | " + " | ".join(cells) + " |")
    return "\n".join(rows)

"""ACLs on the secured broker: applying the plan is idempotent and reports drift, and every
role can do exactly what the plan allows: every other read or write is refused by Kafka's
authorizer."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka.errors import KafkaConnectionError
from aiokafka.protocol.admin import CreateAclsRequest

from kip.schemas.messages import PRIORITIES, Priority
from kip.transport.acl_admin import apply as apply_acls
from kip.transport.acl_admin import describe
from kip.topics.acls import plan
from kip.transport.admin import apply
from kip.topics.catalogue import catalogue
from kip.transport.clients import KafkaConnection
from tests.kafka_probes import R, W, abilities, seed
from kip.topics.names import TopicNames

pytestmark = pytest.mark.broker
TENANTS = {"acme": PRIORITIES, "bob": [Priority.BATCH]}
MODELS = ["digits"]
ROLES = ["tenant-acme", "pipeline", "worker-digits", "operator", "audit-reader"]
# What each role may do with each kind of topic: the table docs/security.md shows.
ALLOWED = {
    "tenant-acme": {"requests": {W}, "reply:acme": {R}},
    "pipeline": {"requests": {R}, "work": {W}, "results": {W}, "reply:acme": {W},
                 "reply:bob": {W}, "audit": {W}, "deadletter": {W}, "control": {R},
                 "releases": {R, W},
                 "telemetry": {R}, "quota-levels": {R, W}},
    "worker-digits": {"work": {R}, "results": {W}, "reply:acme": {W}, "reply:bob": {W},
                      "audit": {W}, "deadletter": {W}, "telemetry": {W}, "releases": {R}},
    "operator": {"control": {R, W}, "deadletter": {R}, "deadletter-replays": {R, W},
                 "requests": {W}, "releases": {R, W}},
    "audit-reader": {"audit": {R}, "releases": {R}},
}


def _topics(names: TopicNames) -> dict[str, str]:
    return {"requests": names.requests("standard"), "work": names.work("digits", "standard"),
            "results": names.results, "reply:acme": names.reply_topic("acme"),
            "reply:bob": names.reply_topic("bob"), "audit": names.audit,
            "deadletter": names.deadletter, "control": names.control,
            "telemetry": names.telemetry, "quota-levels": names.quota_levels,
            "deadletter-replays": names.deadletter_replays, "releases": names.releases}


@pytest.fixture
def secured(secure_broker, prefix):
    names = TopicNames(prefix)
    asyncio.run(apply(secure_broker.kafka, catalogue(names, MODELS, 1, list(TENANTS))))
    asyncio.run(apply_acls(secure_broker.kafka, names, plan(names, MODELS, TENANTS)))
    return secure_broker, names


def test_applying_again_changes_nothing_and_drift_is_reported_then_pruned(secured):
    broker, names = secured
    wanted = plan(names, MODELS, TENANTS)
    again = asyncio.run(apply_acls(broker.kafka, names, wanted))
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
    drifted = asyncio.run(apply_acls(broker.kafka, names, wanted))
    assert [(a.principal, a.name) for a in drifted.drift] == [("User:tenant-bob", names.audit)]
    pruned = asyncio.run(apply_acls(broker.kafka, names, wanted, prune=True))
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
    asyncio.run(seed(broker.kafka, topics.values()))
    observed = {role: asyncio.run(abilities(broker.client(role), topics)) for role in ROLES}
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
    asyncio.run(seed(broker.kafka, topics.values()))
    mtls = broker.client("tenant-acme", mtls=True)
    assert mtls.security_protocol == "SSL" and mtls.sasl_mechanism is None
    assert asyncio.run(abilities(mtls, topics)) == ALLOWED["tenant-acme"]


def _matrix(observed: dict, kinds: list[str]) -> str:
    rows = ["| role | " + " | ".join(kinds) + " |", "|---|" + "---|" * len(kinds)]
    for role, found in observed.items():
        cells = ["+".join(sorted(found.get(k, ()))) or "-" for k in kinds]
        rows.append(f"| {role} | " + " | ".join(cells) + " |")
    return "\n".join(rows)

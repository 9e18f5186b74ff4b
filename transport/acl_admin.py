"""``kip acls apply``: make a cluster's ACLs for kip's principals match a plan.

aiokafka's admin client has no ACL calls, so this sends Kafka's CreateAcls, DescribeAcls
and DeleteAcls requests itself (version 1, the baseline Kafka 4 keeps) through
transport/aiokafka_adapter.py, which says why not confluent-kafka's AdminClient. Like ``kip
topics apply`` it creates what is missing and reports what the plan does not have
(drift); it deletes that only when asked (``prune``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from aiokafka.admin import AIOKafkaAdminClient

from kip.topics.acls import (ALLOW, ANY_HOST, Acl, Operation, Pattern, Resource,
                             is_kip_principal)
from kip.transport.aiokafka_adapter import (CreateAclsRequest, DeleteAclsRequest,
                                            DescribeAclsRequest, send_request)
from kip.transport.clients import KafkaConnection
from kip.topics.names import TopicNames

ANY = 1   # Kafka's ANY for resource, pattern, operation and permission filters


@dataclass
class AclReport:
    created: list[Acl] = field(default_factory=list)
    unchanged: list[Acl] = field(default_factory=list)
    drift: list[Acl] = field(default_factory=list)     # granted, but not in the plan
    removed: list[Acl] = field(default_factory=list)

    def lines(self) -> list[str]:
        return ([f"created   {a.line()}" for a in self.created]
                + [f"ok        {a.line()}" for a in self.unchanged]
                + [f"DRIFT     {a.line()}" for a in self.drift]
                + [f"removed   {a.line()}" for a in self.removed])


async def apply(kafka: KafkaConnection, names: TopicNames, wanted: set[Acl],
                prune: bool = False) -> AclReport:
    """Grant what ``wanted`` has and the cluster lacks; report (or with ``prune`` delete)
    the grants of kip's principals on this deployment's names (``names.prefix``) that
    ``wanted`` does not have. Other deployments on the cluster are not touched."""
    admin = kafka.admin(client_id="kip-acls")
    await admin.start()
    try:
        present = {a for a in await describe(admin)
                   if is_kip_principal(a.principal) and names.owns(a.name)}
        report = AclReport(unchanged=sorted(wanted & present),
                           created=sorted(wanted - present), drift=sorted(present - wanted))
        for acl in report.created:
            await send_request(admin, CreateAclsRequest(*_fields(acl)))
        if prune:
            for acl in report.drift:
                await send_request(admin, DeleteAclsRequest(*_fields(acl)))
            report.removed, report.drift = report.drift, []
        return report
    finally:
        await admin.close()


async def describe(admin: AIOKafkaAdminClient) -> set[Acl]:
    """Every ALLOW grant the cluster holds (for any host)."""
    response = await send_request(admin, DescribeAclsRequest(ANY, None, ANY, None, None, ANY,
                                                             ANY))
    found = set()
    for resource_type, name, pattern, grants in response.resources:
        for principal, host, operation, permission in grants:
            if permission == ALLOW and host == ANY_HOST:
                found.add(Acl(principal, Resource(resource_type), name, Pattern(pattern),
                              Operation(operation)))
    return found


def _fields(acl: Acl) -> tuple:
    return (acl.resource, acl.name, acl.pattern, acl.principal, ANY_HOST, acl.operation,
            ALLOW)


"""``kip acls apply`` sets Kafka's client quotas on each tenant's principal: the broker
itself then throttles a producer that floods, before kip reads a byte of it.

A quota is Kafka's, per user principal (``User:tenant-<tenant>``): ``producer_byte_rate``
(bytes a second it may produce) and ``request_percentage`` (the share of one broker
thread's time its requests may take). A principal past either gets its responses
delayed and its connection muted for the throttle time, so its sends back up in its
own client. kip's own quotas (``kip tenants set``) count requests after they arrive;
these bound what arrives.

aiokafka's admin client has no quota calls and its protocol module has only
DescribeClientQuotas, so transport/aiokafka_adapter.py defines AlterClientQuotas (API
key 49, version 0, the baseline Kafka 4 keeps) from Kafka's message schema, and this
sends both through it, as ``transport.acl_admin`` sends the ACL requests. Like ``kip acls apply`` it sets what is
missing or different and reports quotas on kip's tenant principals that the plan does
not have (drift), deleting them only when asked.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from aiokafka.admin import AIOKafkaAdminClient

from kip.transport.aiokafka_adapter import (DescribeClientQuotasRequest, alter_client_quotas,
                                            send_request)
from kip.transport.clients import KafkaConnection

USER = "user"
MATCH_ANY = 2   # DescribeClientQuotas: any entity of the type
Quotas = dict[str, dict[str, float]]   # user principal name -> quota key -> value


@dataclass
class QuotaReport:
    set: dict[str, dict[str, float]] = field(default_factory=dict)
    unchanged: dict[str, dict[str, float]] = field(default_factory=dict)
    drift: dict[str, dict[str, float]] = field(default_factory=dict)
    removed: dict[str, dict[str, float]] = field(default_factory=dict)

    def lines(self) -> list[str]:
        return ([f"quota set  {_line(u, q)}" for u, q in sorted(self.set.items())]
                + [f"quota ok   {_line(u, q)}" for u, q in sorted(self.unchanged.items())]
                + [f"QUOTA DRIFT {_line(u, q)}" for u, q in sorted(self.drift.items())]
                + [f"quota removed {_line(u, q)}" for u, q in sorted(self.removed.items())])


def _line(user: str, quotas: Mapping[str, float]) -> str:
    return f"User:{user:22} " + " ".join(f"{k}={v:g}" for k, v in sorted(quotas.items()))


async def apply_quotas(kafka: KafkaConnection, wanted: Quotas, ours: str = "tenant-",
                       prune: bool = False) -> QuotaReport:
    """Give each user of ``wanted`` its quotas; report (with ``prune``: remove) quotas of
    users whose name starts with ``ours`` that ``wanted`` does not hold."""
    admin = kafka.admin(client_id="kip-quotas")
    await admin.start()
    try:
        present = {u: q for u, q in (await describe_quotas(admin)).items()
                   if u.startswith(ours)}
        report = QuotaReport()
        for user, quotas in wanted.items():
            target = report.unchanged if present.get(user) == quotas else report.set
            target[user] = quotas
        report.drift = {u: q for u, q in present.items() if u not in wanted}
        entries = [_entry(u, q) for u, q in report.set.items()]
        if prune:
            entries += [_entry(u, q, remove=True) for u, q in report.drift.items()]
            report.removed, report.drift = report.drift, {}
        if entries:
            await alter_client_quotas(admin, entries)
        return report
    finally:
        await admin.close()


async def describe_quotas(admin: AIOKafkaAdminClient) -> Quotas:
    """Every user's quotas the cluster holds (users with a name: not defaults)."""
    response = await send_request(admin, DescribeClientQuotasRequest(
        [(USER, MATCH_ANY, None)], False))
    found: Quotas = {}
    for entity, values in response.entries:
        names = dict(entity)
        if set(names) == {USER} and names[USER] is not None:
            found[names[USER]] = {key: value for key, value in values}
    return found


def _entry(user: str, quotas: Mapping[str, float], remove: bool = False) -> tuple:
    return ([(USER, user)], [(key, float(value), remove) for key, value in quotas.items()])

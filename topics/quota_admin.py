"""``kip acls apply`` sets Kafka's client quotas on each tenant's principal: the broker
itself then throttles a producer that floods, before kip reads a byte of it.

A quota is Kafka's, per user principal (``User:tenant-<tenant>``): ``producer_byte_rate``
(bytes a second it may produce) and ``request_percentage`` (the share of one broker
thread's time its requests may take). A principal past either gets its responses
delayed and its connection muted for the throttle time, so its sends back up in its
own client. kip's own quotas (``kip tenants set``) count requests after they arrive;
these bound what arrives.

aiokafka's admin client has no quota calls and its protocol module has only
DescribeClientQuotas, so this module defines AlterClientQuotas (API key 49, version 0,
the baseline Kafka 4 keeps) from Kafka's message schema and sends both itself, as
``topics.acl_admin`` sends the ACL requests. Like ``kip acls apply`` it sets what is
missing or different and reports quotas on kip's tenant principals that the plan does
not have (drift), deleting them only when asked.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TypeAlias

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import for_code
from aiokafka.protocol.admin import DescribeClientQuotasRequest
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import Array, Boolean, Float64, Int16, Int32, Schema, String

from topics.acl_admin import send_request
from topics.clients import KafkaConnection

USER = "user"
MATCH_ANY = 2   # DescribeClientQuotas: any entity of the type
Quotas = dict[str, dict[str, float]]   # user principal name -> quota key -> value


class AlterClientQuotasResponse_v0(Response):
    API_KEY = 49
    API_VERSION = 0
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        ("entries", Array(
            ("error_code", Int16),
            ("error_message", String("utf-8")),
            ("entity", Array(("entity_type", String("utf-8")),
                             ("entity_name", String("utf-8")))))))


class AlterClientQuotasRequest_v0(RequestStruct):
    API_KEY = 49
    API_VERSION = 0
    RESPONSE_TYPE = AlterClientQuotasResponse_v0
    SCHEMA = Schema(
        ("entries", Array(
            ("entity", Array(("entity_type", String("utf-8")),
                             ("entity_name", String("utf-8")))),
            ("ops", Array(("key", String("utf-8")), ("value", Float64),
                          ("remove", Boolean))))),
        ("validate_only", Boolean))


AlterClientQuotasRequestStruct: TypeAlias = AlterClientQuotasRequest_v0


class AlterClientQuotasRequest(Request[AlterClientQuotasRequestStruct]):
    API_KEY = 49

    def __init__(self, entries: list, validate_only: bool = False) -> None:
        self._entries = entries
        self._validate_only = validate_only

    def build(self, request_struct_class: type[AlterClientQuotasRequestStruct]
              ) -> AlterClientQuotasRequestStruct:
        return request_struct_class(self._entries, self._validate_only)


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
            await _alter(admin, entries)
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


async def _alter(admin: AIOKafkaAdminClient, entries: list) -> None:
    response = await admin._send_request(AlterClientQuotasRequest(entries))
    for code, message, entity in response.entries:
        if code:
            raise for_code(code)(f"AlterClientQuotas for {entity}: {message}")

"""Reading the governance topic: ``kip audit tail``, ``explain``, ``export`` and ``verify``.

Every stage writes an ``AuditRecord`` per decision (docs/protocol.md lists the fields);
these read them over a time range, the way an audit consumer would: without a consumer
group, from the offsets of a timestamp, each record decoded and checked against the
schema (a record that does not decode is reported, not skipped silently).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import datetime, timezone

from aiokafka.structs import ConsumerRecord

from kip.audit.chains import ChainCheck, Summary
from kip.schemas import AuditRecord, decode
from kip.schemas.audit_chain import ChainHead, MalformedHead
from kip.schemas.errors import InvalidRequest
from kip.schemas.result_signatures import ResultVerifier
from kip.transport.clients import KafkaConnection
from kip.topics.names import TopicNames
from kip.transport.reading import records_since


@dataclass(frozen=True)
class Filter:
    tenant: str | None = None
    model: str | None = None
    decision: str | None = None
    code: str | None = None

    def __call__(self, record: AuditRecord) -> bool:
        return ((self.tenant is None or record.tenant == self.tenant)
                and (self.model is None or self.model in (record.model, record.model_name))
                and (self.decision is None or record.decision == self.decision)
                and (self.code is None or record.error_code == self.code))


async def records(kafka: KafkaConnection, names: TopicNames, since_ms: int,
                  until_ms: int | None = None, follow: bool = False,
                  on_bad: Callable[[str], None] = lambda _: None
                  ) -> AsyncIterator[AuditRecord]:
    """Audit records written from ``since_ms`` on: up to the topic's end now (or
    ``until_ms``), or on and on with ``follow``. Records come partition by partition as
    fetched; a request's records share a partition (keyed by request id), in order."""
    async for record in kafka_records(kafka, names, since_ms, until_ms, follow):
        try:
            yield decode(AuditRecord, record.value or b"")
        except InvalidRequest as err:
            on_bad(f"{record.topic}[{record.partition}]@{record.offset}: "
                   f"{err.message[:200]}")


def kafka_records(kafka: KafkaConnection, names: TopicNames, since_ms: int,
                  until_ms: int | None = None, follow: bool = False
                  ) -> AsyncIterator[ConsumerRecord]:
    """The audit topic's records as Kafka holds them, each partition in its order."""
    return records_since(kafka, names.audit, since_ms, until_ms, follow, what="audit topic")


async def verify(kafka: KafkaConnection, names: TopicNames, verifier: ResultVerifier,
                 since_ms: int, until_ms: int | None = None) -> Summary:
    """The audit topic's chains checked over a time range (``kip.audit.chains``); up to
    the topic's end, against the heads the stages committed, read first (a transaction
    committed meanwhile only puts records past them). Only heads whose seal verifies
    are used; the others are listed in the summary as set aside."""
    heads, set_aside = {}, []
    if until_ms is None:
        heads, set_aside = trusted_heads(await committed_metadata(kafka, names), verifier)
    check = ChainCheck(verifier, complete=until_ms is None, heads=heads)
    check.summary.heads_set_aside = set_aside
    async for record in kafka_records(kafka, names, since_ms, until_ms):
        check.add(record.partition, record.offset, record.value, record.headers)
    return check.finish()


async def committed_metadata(kafka: KafkaConnection, names: TopicNames
                             ) -> list[tuple[str, str, str]]:
    """``(group, topic[partition], metadata)`` of every offset committed in the consumer
    groups of this deployment that the principal may describe."""
    admin = kafka.admin()
    await admin.start()
    try:
        groups = [g[0] for g in await admin.list_consumer_groups() if names.owns(g[0])]
        found = []
        for group in groups:
            for tp, position in (await admin.list_consumer_group_offsets(group)).items():
                found.append((group, f"{tp.topic}[{tp.partition}]", position.metadata or ""))
        return found
    finally:
        await admin.close()


def trusted_heads(committed: list[tuple[str, str, str]], verifier: ResultVerifier
                  ) -> tuple[dict[str, ChainHead], list[str]]:
    """Each chain's furthest head among ``committed`` whose seal verifies, and a line for
    each piece of metadata that claims to be a head and is set aside: malformed, or not
    authenticated (unsealed, or sealed by no trusted key). Offset metadata is whatever
    the group's members committed, so nothing unauthenticated counts as a head."""
    heads: dict[str, ChainHead] = {}
    set_aside = []
    for group, where, metadata in committed:
        try:
            head = ChainHead.parse(metadata)
        except MalformedHead as err:
            set_aside.append(f"group {group} {where}: malformed ({err})")
            continue
        if head is None or head.seq == 0:
            continue
        message = head.sealed_message()
        if head.seal is None or not verifier.verified(head.seal, message):
            set_aside.append(f"group {group} {where}: the head of chain {head.chain_id[:80]} "
                             "is not authenticated (no seal by a trusted key); not used")
            continue
        known = heads.get(head.chain_id)
        if known is None or head.seq > known.seq:
            heads[head.chain_id] = head
    return heads, set_aside


async def trail(kafka: KafkaConnection, names: TopicNames, request_id: str,
                since_ms: int) -> list[AuditRecord]:
    """Every stage's record for ``request_id``, in the order they were decided."""
    found = [r async for r in records(kafka, names, since_ms) if r.request_id == request_id]
    return sorted(found, key=lambda r: (r.at_ms, r.final))


def explain(trail: list[AuditRecord]) -> list[str]:
    """The trail in words: who asked for what, then one line per stage's decision."""
    if not trail:
        return ["no audit record for this request in the time range read"]
    first = trail[0]
    lines = [f"request {first.request_id}: tenant {first.tenant or '?'} (key "
             f"{first.key_id or '?'}), class {_value(first.priority)}, model "
             f"{first.model or '?'}" + (f", message sha256 {first.request_sha256}"
                                        if first.request_sha256 else "")]
    lines += [_line(r) for r in trail]
    if not any(r.final for r in trail):
        lines.append("no final record yet: the request has not ended")
    return lines


def _line(r: AuditRecord) -> str:
    when = datetime.fromtimestamp(r.at_ms / 1000, timezone.utc).strftime("%H:%M:%S.%f")[:-3]
    what = r.decision + (f" {r.error_code}" if r.error_code else "") + \
        (" (final)" if r.final else "")
    parts = [f"{when} {r.stage:<8} {what}"]
    if r.reason:
        parts.append(r.reason)
    if r.model_name and r.model_version:
        parts.append(f"version {r.model_name}@{r.model_version}, artifact "
                     f"{(r.artifact_sha256 or '?')[:12]}")
    if r.timings is not None:
        t = r.timings
        parts.append(", ".join(f"{name} {value:.1f} ms" for name, value in (
            ("admission", t.admission_ms), ("queue", t.queue_ms),
            ("batch wait", t.batch_wait_ms), ("inference", t.inference_ms),
            ("total", t.total_ms)) if value is not None))
    return " | ".join(parts)


def _value(priority) -> str:
    return getattr(priority, "value", priority) or "?"

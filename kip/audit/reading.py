"""Reading the governance topic: ``kip audit tail``, ``explain`` and ``export``.

Every stage writes an ``AuditRecord`` per decision (docs/protocol.md lists the fields);
these read them over a time range, the way an audit consumer would: without a consumer
group, from the offsets of a timestamp, each record decoded and checked against the
schema (a record that does not decode is reported, not skipped silently).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import datetime, timezone

from schemas import AuditRecord, decode
from schemas.errors import InvalidRequest
from topics.clients import KafkaConnection
from topics.names import TopicNames
from topics.reading import assign_all, reached, seek_to_time


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
    consumer = kafka.consumer(group_id=None)
    await consumer.start()
    try:
        tps = await assign_all(consumer, names.audit, what="audit topic")
        ends = await seek_to_time(consumer, tps, since_ms)
        while follow or not await reached(consumer, ends):
            for batch in (await consumer.getmany(timeout_ms=500)).values():
                for record in batch:
                    if until_ms is not None and record.timestamp > until_ms:
                        continue
                    try:
                        yield decode(AuditRecord, record.value or b"")
                    except InvalidRequest as err:
                        on_bad(f"{record.topic}[{record.partition}]@{record.offset}: "
                               f"{err.message[:200]}")
    finally:
        await consumer.stop()


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

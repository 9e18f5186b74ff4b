"""What a work item ends as: its terminal result, final audit record and, for poison, a
dead letter, as (topic, key, message, traceparent) outputs (pure functions)."""

from __future__ import annotations

from dataclasses import dataclass

from aiokafka.structs import ConsumerRecord

from schemas import codec
from schemas.deadletter import dead_letter, fallback_request_id, hints
from schemas.errors import DeadlineExceeded, Internal, InvalidRequest, KipError
from schemas.messages import (AuditRecord, ErrorInfo, InferenceResult, Status, Timings,
                              WorkItem)
from schemas.tensors import Tensor
from topics.names import TopicNames

Output = tuple[str, bytes, object, str | None]   # topic, key, message, traceparent


@dataclass
class Stamps:
    """Unix-ms instants of one item's trip through the worker."""

    pulled_ms: float
    started_ms: float | None = None
    finished_ms: float | None = None
    batch_size: int | None = None


def terminal(item: WorkItem, stamps: Stamps, now_ms: int, outputs: list[Tensor] | None = None,
             error: KipError | None = None) -> tuple[InferenceResult, AuditRecord]:
    request, route = item.request, item.route
    status = _status(error)
    result = InferenceResult(
        request_id=request.request_id, tenant=request.tenant, priority=request.priority,
        status=status,
        error=error and ErrorInfo(code=error.code, message=error.message,
                                  retry_after_ms=error.retry_after_ms),
        model=request.model, model_name=route.model_name, model_version=route.model_version,
        artifact_sha256=route.artifact_sha256, fallback_from=route.fallback_from,
        outputs=outputs or [],
        timings=_timings(item, stamps, now_ms), batch_size=stamps.batch_size,
        traceparent=request.traceparent, produced_at_ms=now_ms)
    audit = AuditRecord(
        request_id=request.request_id, stage="worker", decision=status.value, final=True,
        tenant=request.tenant, key_id=request.key_id, priority=request.priority,
        model=request.model, model_name=route.model_name, model_version=route.model_version,
        artifact_sha256=route.artifact_sha256, fallback_from=route.fallback_from,
        error_code=error and error.code,
        payload_bytes=0, traceparent=request.traceparent, at_ms=now_ms)
    return result, audit


def _status(error: KipError | None) -> Status:
    if error is None:
        return Status.OK
    return Status.EXPIRED if isinstance(error, DeadlineExceeded) else Status.FAILED


def _timings(item: WorkItem, s: Stamps, now_ms: int) -> Timings:
    started = s.started_ms
    return Timings(
        queue_ms=max(0.0, s.pulled_ms - item.routed_at_ms),
        batch_wait_ms=None if started is None else max(0.0, started - s.pulled_ms),
        inference_ms=None if started is None or s.finished_ms is None
        else s.finished_ms - started,
        total_ms=float(max(0, now_ms - item.request.issued_at_ms)),
        inference_started_at_ms=started)


def terminal_outputs(item: WorkItem, stamps: Stamps, names: TopicNames,
                     outputs: list[Tensor] | None = None, error: KipError | None = None
                     ) -> list[Output]:
    """The result (to the request's reply topic) and the final audit record."""
    result, audit = terminal(item, stamps, codec.now_ms(), outputs, error)
    reply_to = item.request.reply_to or names.results
    key = item.request.request_id.encode()
    trace = item.request.traceparent
    return [(reply_to, key, result, trace), (names.audit, key, audit, trace)]


def poisoned(record: ConsumerRecord, item: WorkItem, stamps: Stamps, names: TopicNames,
             exc: Exception) -> list[Output]:
    """A request whose inference failed on its own: failed result plus dead letter."""
    err = exc if isinstance(exc, KipError) else Internal(f"{type(exc).__name__}: {exc}")
    dead = dead_letter(record.value, record.topic, record.partition, record.offset, err,
                       codec.now_ms())
    return [*terminal_outputs(item, stamps, names, error=err),
            (names.deadletter, record.topic.encode(), dead, None)]


def undecodable(record: ConsumerRecord, err: InvalidRequest, names: TopicNames
                ) -> list[Output]:
    """A work item that does not decode: a failed result under the request id read off
    it (or its coordinates), a final audit record and a dead letter."""
    now = codec.now_ms()
    found = hints(record.value)
    request_id = found.get("request_id") or fallback_request_id(
        record.topic, record.partition, record.offset)
    result = InferenceResult(request_id=request_id, status=Status.FAILED,
                             error={"code": err.code, "message": err.message},
                             timings=Timings(total_ms=0.0), produced_at_ms=now)
    audit = AuditRecord(request_id=request_id, stage="worker", decision="failed",
                        final=True, tenant=found.get("tenant"), error_code=err.code,
                        payload_bytes=len(record.value), at_ms=now)
    dead = dead_letter(record.value, record.topic, record.partition, record.offset, err, now)
    key = request_id.encode()
    return [(names.results, key, result, None), (names.audit, key, audit, None),
            (names.deadletter, record.topic.encode(), dead, None)]

"""Building the terminal result and final audit record of a work item (pure functions)."""

from __future__ import annotations

from dataclasses import dataclass

from schemas.errors import DeadlineExceeded, KipError
from schemas.messages import (AuditRecord, ErrorInfo, InferenceResult, Status, Timings,
                              WorkItem)
from schemas.tensors import Tensor


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
        total_ms=float(max(0, now_ms - item.request.issued_at_ms)))

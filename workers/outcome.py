"""What a work item ends as in a worker: its terminal result, final audit record and, for
poison, a dead letter (pure functions over ``schemas.outcomes`` and ``topics.outputs``)."""

from __future__ import annotations

from dataclasses import dataclass

from aiokafka.structs import ConsumerRecord

from schemas import codec
from schemas.deadletter import dead_letter
from schemas.errors import Internal, KipError
from schemas.messages import AuditRecord, InferenceResult, Status, Timings, WorkItem
from schemas.outcomes import Coordinates, audit_record, error_info, status_of
from schemas.outcomes import undecodable as undecodable_ending
from schemas.tensors import Tensor
from schemas.trusted import built
from topics.names import TopicNames
from topics.outputs import Output, ending

STAGE = "worker"


@dataclass
class Stamps:
    """Unix-ms instants of one item's trip through the worker."""

    pulled_ms: float
    started_ms: float | None = None
    finished_ms: float | None = None
    batch_size: int | None = None


def terminal(item: WorkItem, stamps: Stamps, now_ms: int, outputs: list[Tensor] | None = None,
             error: KipError | None = None, trusted: bool = True
             ) -> tuple[InferenceResult, AuditRecord]:
    """Result and final audit record. A result names the request digest only for a
    ``trusted`` (stamped) item: any other answers no request a client sent. Both are
    ``built`` (schemas/trusted.py): every field comes from the decoded work item, the
    worker's clocks, or outputs the session checked."""
    request, route = item.request, item.route
    status = status_of(error, Status.FAILED)
    result = built(InferenceResult, dict(
        request_id=request.request_id,
        request_sha256=item.request_sha256 if trusted else None,
        tenant=request.tenant, priority=request.priority,
        status=status, error=error and error_info(error),
        model=request.model, model_name=route.model_name, model_version=route.model_version,
        artifact_sha256=route.artifact_sha256, fallback_from=route.fallback_from,
        outputs=outputs or [],
        timings=_timings(item, stamps, now_ms), batch_size=stamps.batch_size,
        traceparent=request.traceparent, produced_at_ms=now_ms))
    audit = audit_record(request, stage=STAGE, decision=status.value, final=True,
                         at_ms=now_ms, payload_bytes=0, route=route,
                         code=error and error.code, reason=error and error.message,
                         request_sha256=result.request_sha256, timings=result.timings)
    return result, audit


def _timings(item: WorkItem, s: Stamps, now_ms: int) -> Timings:
    started = s.started_ms
    return built(Timings, dict(
        admission_ms=float(max(0, item.routed_at_ms - item.request.issued_at_ms)),
        queue_ms=max(0.0, s.pulled_ms - item.routed_at_ms),
        batch_wait_ms=None if started is None else max(0.0, started - s.pulled_ms),
        inference_ms=None if started is None or s.finished_ms is None
        else s.finished_ms - started,
        total_ms=float(max(0, now_ms - item.request.issued_at_ms)),
        inference_started_at_ms=started))


def terminal_outputs(item: WorkItem, stamps: Stamps, names: TopicNames,
                     outputs: list[Tensor] | None = None, error: KipError | None = None
                     ) -> list[Output]:
    """The result (to the request's reply topic) and the final audit record."""
    result, audit = terminal(item, stamps, codec.now_ms(), outputs, error)
    return ending(names, reply_topic(item, names), result, audit)


def poisoned(record: ConsumerRecord, item: WorkItem, stamps: Stamps, names: TopicNames,
             exc: Exception, trusted: bool = True) -> list[Output]:
    """A work item that failed a check, or whose inference failed on its own: a failed
    result, the final audit record and a dead letter."""
    err = exc if isinstance(exc, KipError) else Internal(f"{type(exc).__name__}: {exc}")
    now = codec.now_ms()
    result, audit = terminal(item, stamps, now, error=err, trusted=trusted)
    dead = dead_letter(record.value or b"", record.topic, record.partition, record.offset,
                       err, now)
    return ending(names, reply_topic(item, names), result, audit, dead)


def destinations(item: WorkItem, names: TopicNames) -> list[tuple[str, bytes]]:
    """Topic and key of each record ``terminal_outputs`` makes of ``item``: its result
    and its final audit record (known before inference: a lane begins its transaction
    with their partitions, workers/lane.py)."""
    key = item.request.request_id.encode()
    return [(reply_topic(item, names), key), (names.audit, key)]


def reply_topic(item: WorkItem, names: TopicNames) -> str:
    """Where the pipeline said the result goes, if that is a reply topic; else the
    shared results topic (kip writes results nowhere else)."""
    return item.reply_to if names.is_reply_topic(item.reply_to) else names.results


def undecodable(record: ConsumerRecord, err: KipError, names: TopicNames) -> list[Output]:
    """A work item that does not decode: a failed result under the request id read off
    it (or its coordinates) on the default reply topic, a final audit record and a dead
    letter."""
    origin = Coordinates(record.topic, record.partition, record.offset)
    end = undecodable_ending(record.value or b"", origin, err, stage=STAGE, status=Status.FAILED,
                             now_ms=codec.now_ms())
    return ending(names, names.results, end.result, end.audit, end.deadletter)


def ran_inference(outputs: list[Output]) -> bool:
    """Whether the result among ``outputs`` says its inference ran (a loop, not ``any``
    over a generator: it runs for every request)."""
    for output in outputs:
        if isinstance(output.message, InferenceResult):
            return output.message.timings.inference_ms is not None
    return False

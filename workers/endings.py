"""What a work item ends as in a worker: its terminal result, final audit record and, for
poison, a dead letter (pure functions over ``schemas.endings`` and ``transport.outputs``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from aiokafka.structs import ConsumerRecord

from kip.schemas import codec
from kip.schemas.deadletter import dead_letter
from kip.schemas.errors import Internal, KipError
from kip.schemas.messages import (SCHEMA_VERSION, AuditRecord, ErrorInfo, InferenceResult,
                                  Status, Timings, WorkItem)
from kip.schemas.endings import Coordinates, audit_fields, error_info, status_of
from kip.schemas.endings import undecodable_ending
from kip.schemas.tensors import Tensor
from kip.schemas.pydantic_adapter import built
from kip.topics.names import TopicNames
from kip.transport.outputs import Document, Output, ending

STAGE = "worker"


@dataclass
class Stamps:
    """Unix-ms instants of one item's trip through the worker."""

    pulled_ms: float
    started_ms: float | None = None
    finished_ms: float | None = None
    batch_size: int | None = None


def terminal(item: WorkItem, stamps: Stamps, now_ms: int, outputs: list[Tensor] | None = None,
             error: KipError | None = None) -> tuple[InferenceResult, AuditRecord]:
    """Result and final audit record of a stamped item. Both are ``built``
    (schemas/pydantic_adapter.py): every field comes from the decoded work item, the worker's
    clocks, or outputs the session checked."""
    status = status_of(error, Status.FAILED)
    timings = _timings(item, stamps, now_ms)
    digest = item.request_sha256
    result = built(InferenceResult, _result_fields(
        item, status, stamps, now_ms, outputs or [], timings, digest,
        error=error and error_info(error)))
    audit = built(AuditRecord, _audit_fields(item, status, now_ms, timings, digest, error))
    return result, audit


def _result_fields(item: WorkItem, status: Status, stamps: Stamps, now_ms: int,
                   outputs: list, timings: Timings | dict, digest: str | None,
                   error: ErrorInfo | None = None) -> dict:
    """Every field of a worker's result, in the model's order (absent ones None), as
    ``terminal`` builds the model of them and ``served`` writes their document."""
    request, route = item.request, item.route
    return {
        "schema_version": SCHEMA_VERSION, "request_id": request.request_id,
        "request_sha256": digest, "tenant": request.tenant, "priority": request.priority,
        "status": status, "error": error, "model": request.model,
        "model_name": route.model_name, "model_version": route.model_version,
        "artifact_sha256": route.artifact_sha256, "fallback_from": route.fallback_from,
        "outputs": outputs, "timings": timings, "batch_size": stamps.batch_size,
        "traceparent": request.traceparent, "produced_at_ms": now_ms}


def _audit_fields(item: WorkItem, status: Status, now_ms: int, timings: Timings | dict,
                  digest: str | None, error: KipError | None = None) -> dict:
    """Every field of a worker's final audit record, as ``_result_fields`` of its result."""
    return audit_fields(item.request, stage=STAGE, decision=status.value, final=True,
                        at_ms=now_ms, payload_bytes=0, route=item.route,
                        code=error and error.code, reason=error and error.message,
                        request_sha256=digest, timings=timings)


def _timings(item: WorkItem, s: Stamps, now_ms: int) -> Timings:
    return built(Timings, _timing_fields(item, s, now_ms))


def _timing_fields(item: WorkItem, s: Stamps, now_ms: int) -> dict:
    """The fields of the timings, floats all (as their model makes them; ``served``
    writes them without the model)."""
    started = None if s.started_ms is None else float(s.started_ms)
    return dict(
        admission_ms=float(max(0, item.routed_at_ms - item.request.issued_at_ms)),
        queue_ms=float(max(0.0, s.pulled_ms - item.routed_at_ms)),
        batch_wait_ms=None if started is None else max(0.0, started - s.pulled_ms),
        inference_ms=None if started is None or s.finished_ms is None
        else s.finished_ms - started,
        total_ms=float(max(0, now_ms - item.request.issued_at_ms)),
        inference_started_at_ms=started)


def served(item: WorkItem, stamps: Stamps, names: TopicNames, outputs: list[dict],
           now_ms: int) -> list[Document]:
    """What ``terminal_outputs`` writes for a (stamped) work item its inference served,
    with ``outputs`` as their documents (``ModelSession.execute_documents``): the result
    and the final audit record as the documents of their fields, not models
    (transport/outputs.py ``Document``). The hot path of every worker: the same fields as
    ``terminal``'s, from the same builders (tests/workers/test_endings.py checks the
    bytes)."""
    timings = _present(_timing_fields(item, stamps, now_ms))
    digest = item.request_sha256
    result = _result_fields(item, Status.OK, stamps, now_ms, outputs, timings, digest)
    audit = _audit_fields(item, Status.OK, now_ms, timings, digest)
    trace = item.request.traceparent
    return [Document(reply_topic(item, names), InferenceResult, _present(result), trace),
            Document(names.audit, AuditRecord, _present(audit), trace)]


def _present(fields: dict) -> dict:
    """``fields`` without the absent (None) ones, as ``encode`` leaves them out."""
    return {k: v for k, v in fields.items() if v is not None}


def terminal_outputs(item: WorkItem, stamps: Stamps, names: TopicNames,
                     outputs: list[Tensor] | None = None, error: KipError | None = None
                     ) -> list[Output]:
    """The result (to the request's reply topic) and the final audit record."""
    result, audit = terminal(item, stamps, codec.now_ms(), outputs, error)
    return ending(names, reply_topic(item, names), result, audit)


def poisoned(record: ConsumerRecord, item: WorkItem, stamps: Stamps, names: TopicNames,
             exc: Exception) -> list[Output]:
    """A stamped work item that failed a check, or whose inference failed on its own: a
    failed result on its reply topic, the final audit record and a dead letter. (An item
    whose stamp does not verify is no request's: ``undecodable_item``.)"""
    err = exc if isinstance(exc, KipError) else Internal(f"{type(exc).__name__}: {exc}")
    now = codec.now_ms()
    result, audit = terminal(item, stamps, now, error=err)
    dead = dead_letter(record.value or b"", record.topic, record.partition, record.offset,
                       err, now)
    return ending(names, reply_topic(item, names), result, audit, dead)


def refused_copy(record: ConsumerRecord, item: WorkItem, names: TopicNames,
                 err: KipError) -> list[Output]:
    """A copy of a work item that was answered already (or could have been:
    workers/single_use.py): its request has its one ending, so no result and no final
    audit record; a dead letter, and an audit record that says it was refused."""
    now = codec.now_ms()
    audit = built(AuditRecord, audit_fields(
        item.request, stage=STAGE, decision="refused", final=False, at_ms=now,
        payload_bytes=len(record.value or b""), route=item.route, code=err.code,
        reason=err.message, request_sha256=item.request_sha256))
    dead = dead_letter(record.value or b"", record.topic, record.partition, record.offset,
                       err, now)
    trace = item.request.traceparent
    return [Output(names.audit, audit, trace), Output(names.deadletter, dead, trace)]


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


def undecodable_item(record: ConsumerRecord, err: KipError, names: TopicNames) -> list[Output]:
    """A work item that does not decode, or whose stamp does not verify: nothing says
    whose it is, so a failed result under the id of its coordinates on the shared
    results topic (it ends no request it names), a final audit record and a dead
    letter."""
    origin = Coordinates(record.topic, record.partition, record.offset)
    end = undecodable_ending(record.value or b"", origin, err, stage=STAGE, status=Status.FAILED,
                             now_ms=codec.now_ms())
    return ending(names, names.results, end.result, end.audit, end.deadletter)


class Ended(NamedTuple):
    """What a worker's metrics and health window read of one request's ending: its
    result's class, status, error code, version and milliseconds."""

    priority: str | None
    status: str
    error_code: str | None
    model_version: str | None
    total_ms: float
    queue_ms: float | None
    batch_wait_ms: float | None
    inference_ms: float | None

    @classmethod
    def of_result(cls, r: InferenceResult) -> Ended:
        t = r.timings
        return cls(r.priority, r.status, r.error and r.error.code, r.model_version,
                   t.total_ms, t.queue_ms, t.batch_wait_ms, t.inference_ms)

    @classmethod
    def of_fields(cls, r: dict) -> Ended:
        """Of a result given as the document of its fields (``served``)."""
        t, error = r["timings"], r.get("error")
        return cls(r.get("priority"), r["status"], error and error["code"],
                   r.get("model_version"), t["total_ms"], t.get("queue_ms"),
                   t.get("batch_wait_ms"), t.get("inference_ms"))


def ended(outputs: list[Output | Document]) -> Ended | None:
    """The ending of the request whose outputs these are (a loop, not ``any`` over a
    generator: it runs for every request)."""
    for output in outputs:
        if isinstance(output, Document):
            if output.kind is InferenceResult:
                return Ended.of_fields(output.fields)
        elif isinstance(output.message, InferenceResult):
            return Ended.of_result(output.message)
    return None


def ran_inference(ending: Ended | None) -> bool:
    """Whether a request's ending (``ended``) says its inference ran."""
    return ending is not None and ending.inference_ms is not None

"""How a request ends, in both stages. kip uses these words with these meanings only:

- **ending**: what one request ends as, exactly once: its *result* and its *final audit
  record*, and for input kip could not use, a *dead letter* too.
- **result**: the request's terminal ``InferenceResult``, on its reply topic: a status
  (``ok``, ``rejected``, ``expired`` or ``failed``) and, unless ``ok``, an error
  with a stable code (schemas/errors.py).
- **final audit record**: the governance record that closes the request's trail
  (``AuditRecord.final``); the pipeline writes a non-final one when it forwards a
  request to a worker.
- **dead letter**: the input itself, kept for the operator (``kip deadletter``).
- **refusal**: an ending the pipeline decides without inference (pipeline/refusals.py).
- **to answer**: to write a request's ending; a worker's *answered* ids are those it
  has written an ending for (workers/single_use.py).
- **output**: one record a stage writes in its transaction (``transport.outputs.Output``):
  an ending is two or three outputs; a forwarded request's are a work item and an audit
  record.
- **undecodable**: input that is not the message it should be; its ending goes under an
  id made of its coordinates (``undecodable.<topic>.<partition>.<offset>``).

This module holds the builders both stages share, pure functions over the wire
messages; where each part goes is ``transport.outputs``.
"""

from __future__ import annotations

from dataclasses import dataclass

from kip.schemas.deadletter import dead_letter, fallback_request_id, hints
from kip.schemas.errors import Cancelled, DeadlineExceeded, KipError
from kip.schemas.messages import (SCHEMA_VERSION, AuditRecord, DeadLetterRecord, ErrorInfo,
                                  InferenceRequest, InferenceResult, Route, Status, Timings)
from kip.schemas.pydantic_adapter import built

Stage = str   # "pipeline" or "worker" (AuditRecord.stage)


@dataclass(frozen=True)
class Coordinates:
    """Where a consumed record came from."""

    topic: str
    partition: int
    offset: int


@dataclass(frozen=True)
class Ending:
    """An undecodable message's ending, and the reply topic read off its payload."""

    result: InferenceResult
    audit: AuditRecord
    deadletter: DeadLetterRecord
    reply_to: str | None   # read off the payload: the caller decides whether to trust it


def error_info(err: KipError) -> ErrorInfo:
    return ErrorInfo(code=err.code, message=err.message, retry_after_ms=err.retry_after_ms)


def status_of(err: KipError | None, otherwise: Status) -> Status:
    """OK without an error; EXPIRED for a passed deadline; CANCELLED for a cancel; else
    ``otherwise`` (REJECTED in the pipeline, FAILED in a worker)."""
    if err is None:
        return Status.OK
    if isinstance(err, Cancelled):
        return Status.CANCELLED
    return Status.EXPIRED if isinstance(err, DeadlineExceeded) else otherwise


def audit_record(request: InferenceRequest, **arguments) -> AuditRecord:
    """The audit record of one decision about a decoded request (the arguments of
    ``audit_fields``): ``built`` (schemas/pydantic_adapter.py), as every field comes from the
    request, its route (both validated) or the stage itself."""
    return built(AuditRecord, audit_fields(request, **arguments))


def audit_fields(request: InferenceRequest, *, stage: Stage, decision: str, final: bool,
                 at_ms: int, payload_bytes: int, route: Route | None = None,
                 code: str | None = None, reason: str | None = None,
                 request_sha256: str | None = None, timings: Timings | dict | None = None
                 ) -> dict:
    """Every field of ``audit_record``'s record, in the model's order (absent ones None):
    what a worker writes as a document without building the model (workers/endings.py
    ``served``), ``timings`` then given as the document of its fields."""
    return {
        "schema_version": SCHEMA_VERSION, "request_id": request.request_id, "stage": stage,
        "decision": decision, "final": final, "tenant": request.tenant,
        "key_id": request.key_id, "priority": request.priority, "model": request.model,
        "model_name": route and route.model_name,
        "model_version": route and route.model_version,
        "artifact_sha256": route and route.artifact_sha256,
        "fallback_from": route and route.fallback_from,
        "route_revision": route and route.revision, "error_code": code,
        "reason": reason and reason[:500], "request_sha256": request_sha256,
        "timings": timings, "payload_bytes": payload_bytes,
        "traceparent": request.traceparent, "at_ms": at_ms}


def undecodable_ending(payload: bytes, origin: Coordinates, err: KipError, *, stage: Stage,
                status: Status, now_ms: int, answers: str | None = None,
                request_id: str | None = None, tenant: str | None = None) -> Ending:
    """Result, final audit record and dead letter for a message that does not decode.

    The result goes out under ``request_id``, where the caller knows who sent the
    message (the pipeline, by its envelope), else under
    ``undecodable.<topic>.<partition>.<offset>``, which a producer can compute from its
    own send metadata: an id merely read off the payload is nobody's to claim.
    ``answers``: the request digest the result names (the pipeline's: the message's
    sha256; a worker's: none). The dead letter keeps the ids read off the payload, for
    the operator.
    """
    found = hints(payload)
    request_id = request_id or fallback_request_id(origin.topic, origin.partition,
                                                   origin.offset)
    result = InferenceResult(request_id=request_id, request_sha256=answers, status=status,
                             tenant=tenant, error=error_info(err),
                             timings=Timings(total_ms=0.0), produced_at_ms=now_ms)
    audit = AuditRecord(request_id=request_id, stage=stage, decision=status.value,
                        final=True, tenant=tenant, error_code=err.code,
                        reason=err.message[:500], request_sha256=answers,
                        payload_bytes=len(payload), at_ms=now_ms)
    dead = dead_letter(payload, origin.topic, origin.partition, origin.offset, err, now_ms)
    return Ending(result, audit, dead, found.get("reply_to"))

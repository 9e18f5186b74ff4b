"""The pipeline's decision for one request message: forward it to a worker or end it.

``decide`` is a pure function of the message bytes, where they came from, and a
``Context`` (access config, router, topic names, the clock): no I/O, so every path is
unit-tested without Kafka. ``pipeline.app`` is the thin faust adapter around it.

Order: decode+validate -> reply_to and class checks -> authenticate -> authorize ->
deadline -> route -> check inputs against the model. The first failure ends the request.
"""

from __future__ import annotations

from dataclasses import dataclass

from kip.registry import Manifest
from pipeline.access import DEFAULT_REPLAY_WINDOW_MS, AccessConfig, authenticate, authorize
from pipeline.routing import Router
from schemas.codec import decode
from schemas.deadletter import dead_letter, fallback_request_id, hints
from schemas.errors import DeadlineExceeded, InvalidRequest, KipError
from schemas.messages import (AuditRecord, DeadLetterRecord, ErrorInfo, InferenceRequest,
                              InferenceResult, Priority, Route, Status, Timings, WorkItem)
from topics.names import TopicNames


@dataclass(frozen=True)
class Origin:
    topic: str
    partition: int
    offset: int


@dataclass(frozen=True)
class Context:
    access: AccessConfig
    router: Router
    names: TopicNames
    now_ms: int
    replay_window_ms: int = DEFAULT_REPLAY_WINDOW_MS
    reply_topics: frozenset[str] = frozenset()   # existing <prefix>.results.<suffix> topics


@dataclass(frozen=True)
class Forward:
    topic: str
    work: WorkItem
    audit: AuditRecord


@dataclass(frozen=True)
class Reject:
    reply_to: str
    result: InferenceResult
    audit: AuditRecord
    deadletter: DeadLetterRecord | None = None


Decision = Forward | Reject


def decide(payload: bytes, origin: Origin, ctx: Context) -> Decision:
    try:
        request = decode(InferenceRequest, payload)
    except InvalidRequest as err:
        return undecodable(payload, origin, err, ctx)
    try:
        route, manifest = admit(request, origin, ctx)
    except KipError as err:
        return reject(request, err, ctx, len(payload))
    return forward(request, route, ctx, len(payload))


def admit(request: InferenceRequest, origin: Origin, ctx: Context) -> tuple[Route, Manifest]:
    """Every check a decoded request must pass; raises the first ``KipError``."""
    check_reply_to(request.reply_to, ctx)
    if origin.topic != ctx.names.requests(request.priority):
        raise InvalidRequest(f"a {request.priority.value} request arrived on {origin.topic}; "
                             f"publish it to {ctx.names.requests(request.priority)}")
    authenticate(request, ctx.access, ctx.now_ms, ctx.replay_window_ms)
    authorize(request, ctx.access)
    if request.deadline_ms is not None and request.deadline_ms <= ctx.now_ms:
        raise DeadlineExceeded(f"the deadline passed {ctx.now_ms - request.deadline_ms} ms "
                               "before admission")
    route, manifest = ctx.router.route(request.model)
    manifest.check_inputs(request.inputs)
    return route, manifest


def check_reply_to(reply_to: str | None, ctx: Context) -> None:
    """``reply_to`` must be the results topic or an existing ``<results>.<suffix>`` topic:
    kip never writes where it was not meant to, and never waits on a missing topic."""
    results = ctx.names.results
    if reply_to is None or reply_to == results:
        return
    if not reply_to.startswith(results + "."):
        raise InvalidRequest(f"reply_to must be {results} or {results}.<suffix>")
    if reply_to not in ctx.reply_topics:
        raise InvalidRequest(f"reply_to topic {reply_to} does not exist; create it before "
                             "sending requests that name it")


def forward(request: InferenceRequest, route: Route, ctx: Context, size: int) -> Forward:
    work = WorkItem(request=request, route=route, routed_at_ms=ctx.now_ms)
    audit = _audit(request, ctx, size, decision="routed", final=False, route=route)
    return Forward(ctx.names.work(route.model_name, request.priority), work, audit)


def reject(request: InferenceRequest, err: KipError, ctx: Context, size: int) -> Reject:
    status = Status.EXPIRED if isinstance(err, DeadlineExceeded) else Status.REJECTED
    result = InferenceResult(
        request_id=request.request_id, tenant=request.tenant, priority=request.priority,
        status=status, error=_error(err), model=request.model,
        timings=Timings(total_ms=float(max(0, ctx.now_ms - request.issued_at_ms))),
        traceparent=request.traceparent, produced_at_ms=ctx.now_ms)
    audit = _audit(request, ctx, size, decision=status.value, final=True, code=err.code)
    reply_to = request.reply_to if _reply_to_ok(request.reply_to, ctx) else ctx.names.results
    return Reject(reply_to, result, audit)


def undecodable(payload: bytes, origin: Origin, err: KipError, ctx: Context) -> Reject:
    """A message that is not a valid request: result + final audit + dead letter."""
    found = hints(payload)
    request_id = found.get("request_id") or fallback_request_id(
        origin.topic, origin.partition, origin.offset)
    result = InferenceResult(request_id=request_id, status=Status.REJECTED, error=_error(err),
                             timings=Timings(total_ms=0.0), produced_at_ms=ctx.now_ms)
    audit = AuditRecord(request_id=request_id, stage="pipeline", decision="rejected",
                        final=True, tenant=found.get("tenant"), error_code=err.code,
                        payload_bytes=len(payload), at_ms=ctx.now_ms)
    dead = dead_letter(payload, origin.topic, origin.partition, origin.offset, err, ctx.now_ms)
    reply_to = found.get("reply_to")
    reply_to = reply_to if _reply_to_ok(reply_to, ctx) else ctx.names.results
    return Reject(reply_to, result, audit, dead)


def _reply_to_ok(reply_to: str | None, ctx: Context) -> bool:
    try:
        check_reply_to(reply_to, ctx)
    except InvalidRequest:
        return False
    return reply_to is not None


def _error(err: KipError) -> ErrorInfo:
    return ErrorInfo(code=err.code, message=err.message, retry_after_ms=err.retry_after_ms)


def _audit(request: InferenceRequest, ctx: Context, size: int, *, decision: str, final: bool,
           route: Route | None = None, code: str | None = None) -> AuditRecord:
    return AuditRecord(
        request_id=request.request_id, stage="pipeline", decision=decision, final=final,
        tenant=request.tenant, key_id=request.key_id, priority=Priority(request.priority),
        model=request.model, model_name=route and route.model_name,
        model_version=route and route.model_version,
        artifact_sha256=route and route.artifact_sha256, error_code=code,
        payload_bytes=size, traceparent=request.traceparent, at_ms=ctx.now_ms)

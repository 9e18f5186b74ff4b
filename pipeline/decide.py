"""The pipeline's decision for one request message: forward it to a worker or end it.

``decide`` is a pure function of the message bytes, where they came from, and a
``Context`` (access config, router, topic names, the clock): no I/O, so every path is
unit-tested without Kafka. ``pipeline.app`` is the thin faust adapter around it.

Order: a record left unread by its compressed batch's bound (topics/inflation.py) ->
size (before parsing) -> decode+validate -> reply_to, class and key checks ->
authenticate -> reply_to owned by the tenant -> not a replay -> authorize -> deadline ->
route -> inputs and limits against the model -> capacity (overload: fallback or reject)
-> quota. The first failure ends the request.

Every result names the sha256 of the message it answers (``request_sha256``), except a
duplicate's: the first copy's result is the answer, and a client must not take the
rejection of a replayed copy for it. A forwarded work item is stamped
(schemas/stamps.py) so that workers run only what the pipeline admitted.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property, lru_cache

from pipeline.access import (DEFAULT_REPLAY_WINDOW_MS, AccessConfig, authenticate, authorize,
                             may_use)
from pipeline.admission import (AdmissionPolicy, check_deadline, check_payload_size,
                                check_request_limits, check_wait, effective_deadline)
from aiokafka import TopicPartition

from pipeline.capacity import CapacityView
from pipeline.quota import Ledger
from pipeline.replays import SeenRequests
from pipeline.routing import Router
from schemas.codec import MODEL_HEADER, REQUEST_ID_HEADER, decode, type_headers
from schemas.deadletter import fallback_request_id, valid_id, valid_model
from schemas.errors import (DuplicateRequest, Forbidden, InvalidRequest, KipError,
                            ModelNotFound, ModelUnavailable, ModelUnverified, Overloaded,
                            PayloadTooLarge, Unauthenticated)
from schemas.messages import (AuditRecord, DeadLetterRecord, InferenceRequest,
                              InferenceResult, Priority, Route, Status, Timings, WorkItem)
from schemas.outcomes import Coordinates, audit_record, error_info, status_of
from schemas.outcomes import undecodable as undecodable_ending
from schemas.result_signatures import request_sha256
from schemas.stamps import StampKeys
from schemas.work_items import encode_work_item
from topics.names import TopicNames
from topics.inflation import UNREAD_HEADER
from topics.outputs import Encoded, Output, ending

STAGE = "pipeline"


@dataclass(frozen=True)
class Origin(Coordinates):
    """Where a message came from: its coordinates, Kafka key and headers."""

    key: bytes | None = None
    headers: tuple[tuple[str, bytes], ...] = ()

    def header(self, name: str) -> str | None:
        for k, v in self.headers:
            if k == name:
                return v.decode("utf-8", "replace") if v is not None else None
        return None

    @cached_property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


@dataclass(frozen=True)
class Context:
    """Everything a decision reads. ``ledger``, ``capacity`` and ``seen`` are the only
    mutable parts: quota spent, requests forwarded and ids admitted by this round's
    earlier decisions."""

    access: AccessConfig
    router: Router
    names: TopicNames
    now_ms: int
    replay_window_ms: int = DEFAULT_REPLAY_WINDOW_MS
    topics: frozenset[str] | None = None   # topics that exist; None: not checked
    policy: AdmissionPolicy = field(default_factory=AdmissionPolicy)
    ledger: Ledger = field(default_factory=Ledger)
    capacity: CapacityView = field(default_factory=CapacityView)
    fallbacks: Mapping[str, str] = field(default_factory=dict)   # model -> fallback alias
    stamp_keys: StampKeys = field(default_factory=StampKeys.generate)
    seen: SeenRequests = field(default_factory=lambda: SeenRequests(DEFAULT_REPLAY_WINDOW_MS))


@dataclass(frozen=True)
class Forward:
    topic: str
    work: bytes   # the stamped work item, encoded (schemas/work_items.py)
    audit: AuditRecord

    @property
    def work_item(self) -> WorkItem:
        """The work item as a worker decodes it."""
        return decode(WorkItem, self.work)

    def outputs(self, names: TopicNames) -> list[Output | Encoded]:
        trace = self.audit.traceparent
        # keyed by its request id, as key_of keys work items (topics/outputs.py)
        work = Encoded(self.topic, self.audit.request_id.encode(), self.work,
                       type_headers(WorkItem, trace))
        return [work, Output(names.audit, self.audit, trace)]


@dataclass(frozen=True)
class Reject:
    reply_to: str
    result: InferenceResult
    audit: AuditRecord
    deadletter: DeadLetterRecord | None = None

    def outputs(self, names: TopicNames) -> list[Output]:
        return ending(names, self.reply_to, self.result, self.audit, self.deadletter)


Decision = Forward | Reject


def decide(payload: bytes, origin: Origin, ctx: Context) -> Decision:
    unread = origin.header(UNREAD_HEADER)
    if unread is not None:
        return unparsed(origin, unread_error(unread, origin, ctx), ctx, None, 0)
    try:
        check_payload_size(len(payload), _class_of(origin.topic, ctx), ctx.policy,
                           _model_limit(origin, ctx))
    except PayloadTooLarge as err:
        return oversized(payload, origin, err, ctx)
    try:
        request = decode(InferenceRequest, payload)
    except InvalidRequest as err:
        return undecodable(payload, origin, err, ctx)
    message = Message(request, origin, payload, request_sha256(payload))
    try:
        route, deadline_ms = admit(message, ctx)
    except KipError as err:
        return reject(message, err, ctx)
    return forward(message, route, deadline_ms, ctx)


@dataclass(frozen=True)
class Message:
    """A decoded request with what is known of the message that carried it."""

    request: InferenceRequest
    origin: Origin
    payload: bytes
    sha256: str   # of the message bytes: what the result names

    @property
    def size(self) -> int:
        return len(self.payload)


def admit(message: Message, ctx: Context) -> tuple[Route, int]:
    """Every check a decoded request must pass; raises the first ``KipError``."""
    request, origin, size = message.request, message.origin, message.size
    check_reply_to(request.reply_to, ctx)
    if origin.topic != ctx.names.requests(request.priority):
        raise InvalidRequest(f"a {request.priority.value} request arrived on {origin.topic}; "
                             f"publish it to {ctx.names.requests(request.priority)}")
    if origin.key != request.tenant.encode():
        raise InvalidRequest("a request's Kafka key must be its tenant (docs/protocol.md)")
    authenticate(request, ctx.access, ctx.now_ms, ctx.replay_window_ms)
    if request.reply_to and not ctx.names.owned_reply_topic(request.reply_to, request.tenant):
        raise Forbidden(f"reply_to {request.reply_to} is not a reply topic of tenant "
                        f"{request.tenant}: use {ctx.names.reply_topic(request.tenant)}[.<suffix>]")
    ctx.seen.check(origin.tp, request)
    authorize(request, ctx.access)
    deadline_ms = effective_deadline(request, ctx.policy)
    check_deadline(deadline_ms, ctx.now_ms)
    route, manifest = ctx.router.route(request.model, request.request_id, request.tenant)
    manifest.check_inputs(request.inputs)
    check_request_limits(request, manifest, size, ctx.policy)
    check_served(route.model_name, request.priority, ctx)
    check_loadable(route, ctx)
    route = within_capacity(request, route, deadline_ms, ctx)
    ctx.ledger.take(request.tenant, route.model_name, size, ctx.now_ms)
    return route, deadline_ms


def within_capacity(request: InferenceRequest, route: Route, deadline_ms: int,
                    ctx: Context) -> Route:
    """``route`` if its model can serve in time, else its fallback, else ``Overloaded``."""
    estimate = ctx.capacity.estimate_wait_ms(route.model_name, request.priority, ctx.now_ms)
    try:
        check_wait(estimate, request.priority, deadline_ms, ctx.now_ms, ctx.policy)
        return route
    except Overloaded as overloaded:
        alternative = ctx.fallbacks.get(route.model_name)
        if alternative is None:
            raise
        try:
            fallback, manifest = ctx.router.route(alternative, request.request_id,
                                                  request.tenant)
            manifest.check_inputs(request.inputs)
            check_served(fallback.model_name, request.priority, ctx)
        except KipError:
            raise overloaded from None   # an unusable fallback changes nothing for the caller
        if not may_use(ctx.access, request.tenant, fallback.model_name):
            raise Overloaded(f"{overloaded.message}; its fallback {fallback.model_name} is "
                             f"not a model tenant '{request.tenant}' may use",
                             retry_after_ms=overloaded.retry_after_ms) from None
        estimate = ctx.capacity.estimate_wait_ms(fallback.model_name, request.priority,
                                                 ctx.now_ms)
        check_wait(estimate, request.priority, deadline_ms, ctx.now_ms, ctx.policy)
        return fallback.model_copy(update={"fallback_from": route.model_name})


def check_loadable(route: Route, ctx: Context) -> None:
    """A version every worker of its model refused to load is not sent to them: the
    request ends with the workers' code (MODEL_UNAVAILABLE or MODEL_UNVERIFIED)."""
    why = ctx.capacity.refusal(route.model_name, route.model_version, ctx.now_ms)
    if why is not None:
        code, _, message = why.partition(": ")
        error = ModelUnverified if code == ModelUnverified.code else ModelUnavailable
        raise error(f"no worker of {route.model_name} can load it: {message}")


def check_served(model: str, priority: Priority, ctx: Context) -> None:
    """A model without its work topic cannot be served (and must not stall the pipeline)."""
    topic = ctx.names.work(model, priority)
    if ctx.topics is not None and topic not in ctx.topics:
        raise ModelNotFound(f"model {model} has no work topic {topic}: "
                            f"run `kip topics apply --models {model}` and start a worker")


def _class_of(topic: str, ctx: Context) -> Priority:
    return _request_classes(ctx.names).get(topic, Priority.BATCH)   # BATCH: the most
    # generous limit; the topic check rejects it later


@lru_cache(maxsize=16)
def _request_classes(names: TopicNames) -> dict[str, Priority]:
    """Request topic -> its class (built once: this runs for every message)."""
    return {names.requests(priority): priority for priority in Priority}


def _model_limit(origin: Origin, ctx: Context) -> int | None:
    """The per-model payload limit, when the producer named the model in a header."""
    alias = origin.header(MODEL_HEADER)
    if alias is None:
        return None
    try:
        return ctx.router.route(alias)[1].max_payload_bytes
    except KipError:
        return None


def check_reply_to(reply_to: str | None, ctx: Context) -> None:
    """``reply_to`` must be the results topic or an existing ``<results>.<suffix>`` topic:
    kip never writes where it was not meant to, and never waits on a missing topic."""
    results = ctx.names.results
    if reply_to is None or reply_to == results:
        return
    if not reply_to.startswith(results + "."):
        raise InvalidRequest(f"reply_to must be {results} or {results}.<suffix>")
    if ctx.topics is not None and reply_to not in ctx.topics:
        raise InvalidRequest(f"reply_to topic {reply_to} does not exist; create it before "
                             "sending requests that name it")


def forward(message: Message, route: Route, deadline_ms: int, ctx: Context) -> Forward:
    request = message.request
    work = encode_work_item(message.payload, request, route, routed_at_ms=ctx.now_ms,
                            deadline_ms=deadline_ms, request_sha256=message.sha256,
                            reply_to=reply_topic_for(request.reply_to, request.tenant, ctx),
                            keys=ctx.stamp_keys)
    decision = "degraded" if route.fallback_from else "routed"
    audit = audit_record(request, stage=STAGE, decision=decision, final=False,
                         at_ms=ctx.now_ms, payload_bytes=message.size, route=route,
                         reason=route_reason(request, route), request_sha256=message.sha256)
    ctx.capacity.forwarded(route.model_name, request.priority)
    ctx.seen.admit(message.origin.tp, request)
    return Forward(ctx.names.work(route.model_name, request.priority), work, audit)


def route_reason(request: InferenceRequest, route: Route) -> str:
    served = f"{route.model_name}@{route.model_version}"
    if route.fallback_from:
        return (f"{route.fallback_from} could not serve in time (its estimated wait "
                f"exceeded the budget): degraded to its fallback {served}")
    return f"{request.model} routed to {served}"


def reject(message: Message, err: KipError, ctx: Context) -> Reject:
    """A decoded request's rejection. A duplicate's names no request digest: the first
    copy's result answers the request."""
    request = message.request
    status = status_of(err, Status.REJECTED)
    digest = None if isinstance(err, DuplicateRequest) else message.sha256
    result = InferenceResult(
        request_id=request.request_id, request_sha256=digest, tenant=request.tenant,
        priority=request.priority,
        status=status, error=error_info(err), model=request.model,
        timings=Timings(total_ms=float(max(0, ctx.now_ms - request.issued_at_ms))),
        traceparent=request.traceparent, produced_at_ms=ctx.now_ms)
    audit = audit_record(request, stage=STAGE, decision=status.value, final=True,
                         at_ms=ctx.now_ms, payload_bytes=message.size, code=err.code,
                         reason=err.message, request_sha256=message.sha256)
    return Reject(reply_topic_for(_reply_to(request, err, ctx), request.tenant, ctx),
                  result, audit)


def _reply_to(request: InferenceRequest, err: KipError, ctx: Context) -> str | None:
    """The ``reply_to`` a rejection may use: one the tenant owns; or, for a message
    refused before it was authenticated, whatever it asked within the results namespace
    (its sender must learn why; its result names its own digest, so it answers no one
    else's request)."""
    asked = request.reply_to
    if asked is None or ctx.names.owned_reply_topic(asked, request.tenant):
        return asked
    return asked if isinstance(err, (InvalidRequest, Unauthenticated)) else None


def unread_error(why: str, origin: Origin, ctx: Context) -> KipError:
    """Why a record came unread out of its compressed batch (topics/inflation.py)."""
    kind, _, seen = why.partition(" ")
    limit = ctx.policy.of(_class_of(origin.topic, ctx)).max_payload_bytes
    if kind == "too-large":
        return PayloadTooLarge(f"the message inflates to {seen} bytes; the "
                               f"{_class_of(origin.topic, ctx)} class allows {limit}: "
                               "refused without being inflated past that")
    if kind == "budget":
        return PayloadTooLarge("its compressed batch inflates past what one fetch may "
                               "hold; send fewer or smaller requests per batch")
    if kind == "codec":
        return InvalidRequest(f"compression codec {seen[:16]} is not accepted: send "
                              "requests uncompressed or gzip-compressed")
    return InvalidRequest("its compressed batch does not inflate")


def oversized(payload: bytes, origin: Origin, err: KipError, ctx: Context) -> Reject:
    """Rejected unparsed: identity comes from the Kafka key and headers only."""
    return unparsed(origin, err, ctx, request_sha256(payload), len(payload))


def unparsed(origin: Origin, err: KipError, ctx: Context, digest: str | None,
             size: int) -> Reject:
    """The rejection of a message that was not parsed: its id from its header, its
    tenant from its key. ``digest``: the message's sha256, where its bytes were all seen
    (not for one refused unread out of its compressed batch)."""
    request_id = origin.header(REQUEST_ID_HEADER)
    if request_id is None or not valid_id(request_id):
        request_id = fallback_request_id(origin.topic, origin.partition, origin.offset)
    tenant = _tenant_of_key(origin)
    priority = _class_of(origin.topic, ctx)
    model = origin.header(MODEL_HEADER)
    result = InferenceResult(request_id=request_id, request_sha256=digest,
                             tenant=tenant, priority=priority,
                             status=Status.REJECTED, error=error_info(err),
                             timings=Timings(total_ms=0.0), produced_at_ms=ctx.now_ms)
    audit = AuditRecord(request_id=request_id, stage=STAGE, decision="rejected",
                        final=True, tenant=tenant, priority=priority,
                        model=model if model and valid_model(model) else None,
                        error_code=err.code, reason=err.message[:500],
                        request_sha256=digest, payload_bytes=size, at_ms=ctx.now_ms)
    return Reject(reply_topic_for(None, tenant, ctx), result, audit)


def undecodable(payload: bytes, origin: Origin, err: KipError, ctx: Context) -> Reject:
    """A message that is not a valid request: result + final audit + dead letter, the
    result on the reply topic it names if that one is allowed."""
    end = undecodable_ending(payload, origin, err, stage=STAGE, status=Status.REJECTED,
                             now_ms=ctx.now_ms, answers=request_sha256(payload))
    tenant = end.audit.tenant or _tenant_of_key(origin)
    return Reject(reply_topic_for(end.reply_to, tenant, ctx), end.result, end.audit,
                  end.deadletter)


def _tenant_of_key(origin: Origin) -> str | None:
    """The tenant a request message is keyed by (the protocol's key), if well formed."""
    tenant = origin.key.decode("utf-8", "replace") if origin.key else None
    return tenant if tenant and valid_id(tenant) else None


def reply_topic_for(reply_to: str | None, tenant: str | None, ctx: Context) -> str:
    """Where a result goes: the ``reply_to`` a request names, if allowed; else its
    tenant's own reply topic (``<results>.<tenant>``), where that exists; else the
    shared results topic."""
    if _reply_to_ok(reply_to, ctx):
        return reply_to
    own = ctx.names.reply_topic(tenant) if tenant else None
    if own is not None and (ctx.topics is None or own in ctx.topics):
        return own
    return ctx.names.results


def _reply_to_ok(reply_to: str | None, ctx: Context) -> bool:
    try:
        check_reply_to(reply_to, ctx)
    except InvalidRequest:
        return False
    return reply_to is not None

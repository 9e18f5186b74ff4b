"""The pipeline's decision for one request message: forward it to a worker or end it.

``decide`` is a pure function of the message bytes, where they came from, and a
``Context`` (access config, router, topic names, the clock): no I/O, so every path is
unit-tested without Kafka. ``pipeline.app`` is the thin faust adapter around it.

Order, cheapest first (pipeline/intake.py says why): the message's sha256 and its
envelope (who sent it) -> a message no tenant provably sent, or one its compressed
batch left unread (transport/inflation.py), is answered within its key's allowance or shed
-> not a replay -> the tenant's quota -> its request partition -> size ->
decode+validate -> the body names its envelope's tenant, key and id -> reply_to and
class checks -> authenticate the body -> reply_to owned by the tenant -> authorize ->
deadline ->
route -> inputs and limits against the model -> capacity (no live worker or overload:
fallback or reject)
-> the tenant's quota on that model. The first failure ends the request
(pipeline/refusals.py says where its ending goes).

Every result names the sha256 of the message it answers (``request_sha256``), except a
duplicate's: the first copy's result is the answer, and a client must not take the
rejection of a replayed copy for it. A forwarded work item is stamped
(schemas/stamps.py) so that workers run only what the pipeline admitted.
"""

from __future__ import annotations

from kip.pipeline.access import authenticate, authorize, may_use
from kip.pipeline.cancels import decide_cancel, is_cancel
from kip.pipeline.capacity import NO_WORKER_RETRY_MS, SILENT_GRACE_MS, STALE_AFTER_MS
from kip.pipeline.admission import (check_deadline, check_payload_size, check_request_limits,
                                    check_wait, effective_deadline)
from kip.pipeline.decisions import (STAGE, Context, Decision, Forward, Message, Origin,
                                    check_reply_to, class_of, reply_topic_for)
from kip.pipeline.intake import placement, sent_by
from kip.pipeline.refusals import refuse_undecodable, reject, unparsed, unsigned
from kip.schemas.codec import MODEL_HEADER, REQUEST_ID_HEADER, decode
from kip.schemas.envelopes import Sender
from kip.schemas.errors import (DuplicateRequest, Forbidden, InvalidRequest, KipError,
                                ModelNotFound, ModelUnavailable, ModelUnverified, Overloaded)
from kip.schemas.messages import InferenceRequest, Priority, Route
from kip.schemas.endings import audit_record
from kip.schemas.result_signatures import request_sha256
from kip.schemas.work_items import encode_work_item
from kip.transport.inflation import UNREAD_HEADER


def decide(payload: bytes, origin: Origin, ctx: Context) -> Decision:
    digest, sender = ctx.envelopes.take((origin.topic, origin.partition, origin.offset)) \
        or _envelope(payload, origin, ctx)
    unread = origin.header(UNREAD_HEADER)
    if sender is None or unread is not None:
        return unsigned(payload, origin, digest, unread, ctx)
    try:
        screen(sender, len(payload), origin, ctx)
    except KipError as err:   # a duplicate's result names no digest: the first answers
        answers = None if isinstance(err, DuplicateRequest) else digest
        return unparsed(origin, err, ctx, answers, len(payload), sender)
    if is_cancel(origin):   # a cancel, screened as a request is: pipeline/cancels.py
        return decide_cancel(payload, origin, ctx, digest, sender)
    try:
        request = decode(InferenceRequest, payload)
    except InvalidRequest as err:
        return refuse_undecodable(payload, origin, err, ctx, digest, sender)
    if (request.tenant, request.key_id, request.request_id) != \
            (sender.tenant, sender.key_id, sender.request_id):
        err = InvalidRequest("the request's tenant, key_id and request_id must be the ones "
                             "its kip-envelope was made for (its key and kip-request-id)")
        return unparsed(origin, err, ctx, digest, len(payload), sender)
    message = Message(request, origin, payload, digest, sender)
    try:
        route, deadline_ms = admit(message, ctx)
    except KipError as err:
        return reject(message, err, ctx)
    return forward(message, route, deadline_ms, ctx)


def _envelope(payload: bytes, origin: Origin, ctx: Context) -> tuple[str, Sender | None]:
    """The message's digest and its sender by its envelope (None: it does not check),
    where the drain's screen did not verify it already."""
    digest = request_sha256(payload)
    return digest, sent_by(origin.headers, origin.topic, origin.key, digest,
                           _only(origin, REQUEST_ID_HEADER), ctx.access)


def _only(origin: Origin, name: str) -> str | None:
    """The value of header ``name``, where the message carries it once (twice, it could
    be read as either)."""
    values = [v for k, v in origin.headers if k == name]
    return values[0].decode("utf-8", "replace") if len(values) == 1 and values[0] else None


def screen(sender: Sender, size: int, origin: Origin, ctx: Context) -> None:
    """The checks of a sender's message before it is parsed: not a replay, its tenant's
    quota, its request partition, its size; raises the first ``KipError``."""
    ctx.seen.check(origin.tp, sender.tenant, sender.request_id)
    ctx.ledger.take(sender.tenant, None, size, ctx.now_ms)
    partitions = ctx.partitions.get(origin.topic) if ctx.partitions is not None else None
    if partitions:
        wanted = placement(sender.tenant, partitions, ctx.access)
        if origin.partition != wanted:
            raise InvalidRequest(f"tenant {sender.tenant}'s requests go to partition "
                                 f"{wanted} of {origin.topic}, not {origin.partition} "
                                 "(docs/protocol.md)")
    check_payload_size(size, class_of(origin.topic, ctx), ctx.policy,
                       _model_limit(origin, ctx))


def admit(message: Message, ctx: Context) -> tuple[Route, int]:
    """Every check a decoded request must pass; raises the first ``KipError``."""
    request, origin, size = message.request, message.origin, message.size
    check_reply_to(request.reply_to, ctx)
    if origin.topic != ctx.names.requests(request.priority):
        raise InvalidRequest(f"a {request.priority.value} request arrived on {origin.topic}; "
                             f"publish it to {ctx.names.requests(request.priority)}")
    authenticate(request, ctx.access, ctx.now_ms, ctx.replay_window_ms)
    if request.reply_to and not ctx.names.owned_reply_topic(request.reply_to, request.tenant):
        raise Forbidden(f"reply_to {request.reply_to} is not a reply topic of tenant "
                        f"{request.tenant}: use {ctx.names.reply_topic(request.tenant)}[.<suffix>]")
    authorize(request, ctx.access)
    deadline_ms = effective_deadline(request, ctx.policy)
    check_deadline(deadline_ms, ctx.now_ms)
    route, manifest = ctx.router.route(request.model, request.request_id, request.tenant)
    manifest.check_inputs(request.inputs)
    check_request_limits(request, manifest, size, ctx.policy)
    check_served(route.model_name, request.priority, ctx)
    check_loadable(route, ctx)
    route = within_capacity(request, route, deadline_ms, ctx)
    ctx.ledger.take_model(request.tenant, route.model_name, size, ctx.now_ms)
    return route, deadline_ms


def within_capacity(request: InferenceRequest, route: Route, deadline_ms: int,
                    ctx: Context) -> Route:
    """``route`` if its model can serve in time, else its fallback, else the refusal:
    ``ModelUnavailable`` where no worker of the model is live, else ``Overloaded``."""
    try:
        check_capacity(route.model_name, request.priority, deadline_ms, ctx)
        return route
    except (Overloaded, ModelUnavailable) as refused:
        alternative = ctx.fallbacks.get(route.model_name)
        if alternative is None:
            raise
        try:
            fallback, manifest = ctx.router.route(alternative, request.request_id,
                                                  request.tenant)
            manifest.check_inputs(request.inputs)
            check_served(fallback.model_name, request.priority, ctx)
        except KipError:
            raise refused from None   # an unusable fallback changes nothing for the caller
        if not may_use(ctx.access, request.tenant, fallback.model_name):
            raise type(refused)(f"{refused.message}; its fallback {fallback.model_name} is "
                                f"not a model tenant '{request.tenant}' may use",
                                retry_after_ms=refused.retry_after_ms) from None
        check_capacity(fallback.model_name, request.priority, deadline_ms, ctx)
        return fallback.model_copy(update={"fallback_from": route.model_name})


def check_capacity(model: str, priority: Priority, deadline_ms: int, ctx: Context) -> None:
    """Fail closed: with no live worker (none has reported telemetry lately,
    pipeline/capacity.py) a request would wait in a topic nobody reads until its
    deadline, so it ends ``MODEL_UNAVAILABLE`` now, retriable; the model's first worker to
    report reopens it. Otherwise the estimated wait must fit."""
    if not ctx.capacity.serving(model, ctx.now_ms):
        raise ModelUnavailable(
            f"no live worker of {model}: none has reported in the last "
            f"{STALE_AFTER_MS // 1000} s ({SILENT_GRACE_MS // 1000} s while no worker of any "
            "model reports)", retry_after_ms=NO_WORKER_RETRY_MS)
    estimate = ctx.capacity.estimate_wait_ms(model, priority, ctx.now_ms)
    check_wait(estimate, priority, deadline_ms, ctx.now_ms, ctx.policy)


def check_loadable(route: Route, ctx: Context) -> None:
    """A version every worker of its model refused to load is not sent to them: the
    request ends with the workers' code (MODEL_UNAVAILABLE or MODEL_UNVERIFIED)."""
    why = ctx.capacity.refusal(route.model_name, route.model_version, ctx.now_ms)
    if why is not None:
        code, _, message = why.partition(": ")
        error = ModelUnverified if code == ModelUnverified.code else ModelUnavailable
        raise error(f"no worker of {route.model_name} can load it: {message}")


def check_served(model: str, priority: Priority, ctx: Context) -> None:
    """A model without its work topic cannot be served (and must not stall the pipeline);
    one whose partitions the pipeline cannot place a work item on is not served yet."""
    topic = ctx.names.work(model, priority)
    if ctx.topics is not None and topic not in ctx.topics:
        raise ModelNotFound(f"model {model} has no work topic {topic}: "
                            f"run `kip topics apply --models {model}` and start a worker")
    if ctx.partitions is not None and not ctx.partitions.get(topic):
        raise ModelUnavailable(f"the partitions of {topic} are not known yet (the cluster's "
                               "metadata)", retry_after_ms=NO_WORKER_RETRY_MS)


def _model_limit(origin: Origin, ctx: Context) -> int | None:
    """The per-model payload limit, when the producer named the model in a header."""
    alias = origin.header(MODEL_HEADER)
    if alias is None:
        return None
    try:
        return ctx.router.route(alias)[1].max_payload_bytes
    except KipError:
        return None


def forward(message: Message, route: Route, deadline_ms: int, ctx: Context) -> Forward:
    request = message.request
    topic = ctx.names.work(route.model_name, request.priority)
    count = ctx.partitions.get(topic) if ctx.partitions is not None else None
    partition = ctx.placement.partition(topic, count, ctx.now_ms) if count else None
    work = encode_work_item(message.payload, request, route, routed_at_ms=ctx.now_ms,
                            deadline_ms=deadline_ms, request_sha256=message.sha256,
                            reply_to=reply_topic_for(request.reply_to, request.tenant, ctx),
                            work_partition=partition, keys=ctx.stamp_keys)
    decision = "degraded" if route.fallback_from else "routed"
    audit = audit_record(request, stage=STAGE, decision=decision, final=False,
                         at_ms=ctx.now_ms, payload_bytes=message.size, route=route,
                         reason=route_reason(request, route), request_sha256=message.sha256)
    ctx.capacity.forwarded(route.model_name, request.priority)
    ctx.seen.admit(message.origin.tp, request)
    return Forward(topic, work, audit, partition)


def route_reason(request: InferenceRequest, route: Route) -> str:
    served = f"{route.model_name}@{route.model_version}"
    if route.fallback_from:
        return (f"{route.fallback_from} could not serve in time (its estimated wait "
                f"exceeded the budget): degraded to its fallback {served}")
    return f"{request.model} routed to {served}"

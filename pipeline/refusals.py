"""How the pipeline ends a request message it does not forward: a result, the final audit
record and, for input it could not use, a dead letter; or, for a message no tenant
provably sent past its key's allowance, nothing of its own (``Shed``).

Where an ending goes and under which id depends on what is known of its sender:

- a message whose envelope checks (pipeline/intake.py) is its sender's: it is answered
  on the sender's reply topic, under the request id the envelope authenticated, and
  recorded under the sender's tenant;
- any other is no tenant's: it is answered on the shared results topic, under the id of
  its coordinates (``undecodable.<topic>.<partition>.<offset>``), with no tenant. What
  it claims (a key, an id, a ``reply_to``) is never used to reach, or to write under
  the name of, the tenant it claims to be.
"""

from __future__ import annotations

from kip.schemas.codec import MODEL_HEADER
from kip.schemas.deadletter import fallback_request_id, valid_model
from kip.schemas.envelopes import ENVELOPE_HEADER, Sender
from kip.schemas.errors import (DuplicateRequest, InvalidRequest, KipError, PayloadTooLarge,
                                Unauthenticated)
from kip.schemas.messages import AuditRecord, InferenceResult, Status, Timings
from kip.schemas.endings import audit_record, error_info, status_of
from kip.schemas.endings import undecodable_ending

from kip.pipeline.access import AccessConfig
from kip.pipeline.decisions import (STAGE, Context, Message, Origin, Reject, Shed, class_of,
                                    reply_topic_for)
from kip.pipeline.intake import allowance_key


def unsigned(payload: bytes, origin: Origin, digest: str, unread: str | None,
             ctx: Context) -> Reject | Shed:
    """A message without a valid envelope: answered within its key's allowance, with why
    (``unread``: why its compressed batch left it unread), else shed."""
    key = allowance_key(origin.key, ctx.access)
    if not ctx.allowance.take(key, ctx.policy.unsigned_per_s, ctx.policy.unsigned_burst,
                              ctx.now_ms, at=(origin.topic, origin.partition, origin.offset)):
        return Shed(key)
    if unread is not None:
        return unparsed(origin, unread_error(unread, origin, ctx), ctx, None, 0)
    err = Unauthenticated(envelope_problem(origin, ctx.access))
    return unparsed(origin, err, ctx, digest, len(payload))


def envelope_problem(origin: Origin, access: AccessConfig) -> str:
    """Why a message's envelope does not check, in words for its sender."""
    found = [v for k, v in origin.headers if k == ENVELOPE_HEADER]
    if len(found) != 1:
        return (f"{len(found) or 'no'} {ENVELOPE_HEADER} headers: a request carries one, "
                "its sender's HMAC over the message (docs/protocol.md)")
    key_id = (found[0] or b"").decode("ascii", "replace").rpartition(":")[0]
    tenant = (origin.key or b"").decode("utf-8", "replace")
    if access.secret_of(key_id, tenant) is None:
        return (f"the {ENVELOPE_HEADER} names key id '{key_id[:128]}', which is not an API "
                f"key of the tenant the record's key names ('{tenant[:128]}')")
    return (f"the {ENVELOPE_HEADER} does not match the message (its topic, key, "
            "kip-request-id header and value, docs/protocol.md)")


def unread_error(why: str, origin: Origin, ctx: Context) -> KipError:
    """Why a record came unread out of its compressed batch (transport/inflation.py)."""
    kind, _, seen = why.partition(" ")
    priority = class_of(origin.topic, ctx)
    if kind == "too-large":
        return PayloadTooLarge(f"the message inflates to {seen[:20]} bytes; the {priority} "
                               f"class allows {ctx.policy.of(priority).max_payload_bytes}: "
                               "refused without being inflated past that")
    if kind == "budget":
        return PayloadTooLarge("its compressed batch inflates past what one fetch may "
                               "hold; send fewer or smaller requests per batch")
    if kind == "codec":
        return InvalidRequest(f"compression codec {seen[:16]} is not accepted: send "
                              "requests uncompressed or gzip-compressed")
    return InvalidRequest("its compressed batch does not inflate")


def unparsed(origin: Origin, err: KipError, ctx: Context, digest: str | None, size: int,
             sender: Sender | None = None) -> Reject:
    """The rejection of a message that was not parsed. ``digest``: the message's sha256,
    where its bytes were all seen (not for one refused unread out of its compressed
    batch)."""
    request_id, tenant = _identity(origin, sender)
    priority = class_of(origin.topic, ctx)
    model = origin.header(MODEL_HEADER) if sender is not None else None
    result = InferenceResult(request_id=request_id, request_sha256=digest,
                             tenant=tenant, priority=priority,
                             status=Status.REJECTED, error=error_info(err),
                             timings=Timings(total_ms=0.0), produced_at_ms=ctx.now_ms)
    audit = AuditRecord(request_id=request_id, stage=STAGE, decision="rejected",
                        final=True, tenant=tenant, key_id=sender and sender.key_id,
                        priority=priority,
                        model=model if model and valid_model(model) else None,
                        error_code=err.code, reason=err.message[:500],
                        request_sha256=digest, payload_bytes=size, at_ms=ctx.now_ms)
    return Reject(reply_topic_for(None, tenant, ctx), result, audit)


def refuse_undecodable(payload: bytes, origin: Origin, err: KipError, ctx: Context, digest: str,
                sender: Sender | None = None) -> Reject:
    """A message that is not a valid request: result, final audit record and dead letter
    (which keeps the envelope, so that a replay of it is the sender's message again)."""
    request_id, tenant = _identity(origin, sender)
    end = undecodable_ending(payload, origin, err, stage=STAGE, status=Status.REJECTED,
                             now_ms=ctx.now_ms, answers=digest, request_id=request_id,
                             tenant=tenant)
    dead = end.deadletter
    if sender is not None:
        dead = dead.model_copy(update={"request_id": sender.request_id,
                                       "tenant": sender.tenant,
                                       "envelope": origin.header(ENVELOPE_HEADER)})
    return Reject(reply_topic_for(end.reply_to, tenant, ctx), end.result, end.audit, dead)


def _identity(origin: Origin, sender: Sender | None) -> tuple[str, str | None]:
    """The id and tenant a message's ending goes under: its sender's, or its
    coordinates' and none."""
    if sender is not None:
        return sender.request_id, sender.tenant
    return fallback_request_id(origin.topic, origin.partition, origin.offset), None


def reject(message: Message, err: KipError, ctx: Context) -> Reject:
    """A decoded request's rejection, on its sender's reply topic. A duplicate's names no
    request digest: the first copy's result answers the request."""
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
    return Reject(reply_topic_for(request.reply_to, message.sender.tenant, ctx), result, audit)

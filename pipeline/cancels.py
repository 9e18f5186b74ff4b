"""A cancel message (``CancelRequest``): checked as a request is, then passed on to the
workers on ``kip.cancels``; acknowledged under its own id (its ``cancel_id``).

It arrives on a request topic with the headers a request has (``kip-type:
cancel-request``), and passes the same screen first (envelope, replay, quota, request
partition, size: pipeline/decide.py). Then: it decodes; its tenant, key and id are its
envelope's; its ``reply_to`` is a reply topic of its tenant; its signature holds within
the replay window; and the request it names is its own tenant's (``FORBIDDEN``
otherwise: only the tenant that sent a request may cancel it).

Accepted, it ends with a ``CancelNotice`` on the cancels topic (workers skip the request
if they have not run it: workers/cancels.py), an ``ok`` acknowledgement, and a final
audit record that names who cancelled what. Refused, it ends as any rejected message:
a ``rejected`` acknowledgement with the code and an audit record. The request itself
keeps exactly one ending either way: ``cancelled`` from a worker, or its own result.
"""

from __future__ import annotations

from kip.pipeline.access import authenticate_cancel
from kip.pipeline.decisions import STAGE, Cancel, Context, Origin, Reject, check_reply_to
from kip.pipeline.decisions import reply_topic_for
from kip.pipeline.refusals import refuse_undecodable, unparsed
from kip.schemas.codec import TYPE_HEADER, decode
from kip.schemas.endings import error_info
from kip.schemas.envelopes import Sender
from kip.schemas.stamps import stamped_notice
from kip.schemas.errors import Forbidden, InvalidRequest, KipError
from kip.schemas.messages import (AuditRecord, CancelNotice, CancelRequest, InferenceResult,
                                  Status, Timings)

CANCEL_TYPE = b"cancel-request"


def is_cancel(origin: Origin) -> bool:
    return any(k == TYPE_HEADER and v == CANCEL_TYPE for k, v in origin.headers)


def decide_cancel(payload: bytes, origin: Origin, ctx: Context, digest: str,
                  sender: Sender) -> Cancel | Reject:
    try:
        cancel = decode(CancelRequest, payload)
    except InvalidRequest as err:
        return refuse_undecodable(payload, origin, err, ctx, digest, sender)
    if (cancel.tenant, cancel.key_id, cancel.cancel_id) != \
            (sender.tenant, sender.key_id, sender.request_id):
        err = InvalidRequest("the cancel's tenant, key_id and cancel_id must be the ones "
                             "its kip-envelope was made for (its key and kip-request-id)")
        return unparsed(origin, err, ctx, digest, len(payload), sender)
    try:
        check_cancel(cancel, ctx)
    except KipError as err:
        return _refused(cancel, err, digest, len(payload), ctx)
    ctx.seen.admit_id(origin.tp, cancel.tenant, cancel.cancel_id, cancel.issued_at_ms)
    return _accepted(cancel, digest, len(payload), ctx)


def check_cancel(cancel: CancelRequest, ctx: Context) -> None:
    """Every check a decoded cancel must pass; raises the first ``KipError``."""
    check_reply_to(cancel.reply_to, ctx)
    if cancel.reply_to and not ctx.names.owned_reply_topic(cancel.reply_to, cancel.tenant):
        raise Forbidden(f"reply_to {cancel.reply_to} is not a reply topic of tenant "
                        f"{cancel.tenant}")
    authenticate_cancel(cancel, ctx.access, ctx.now_ms, ctx.replay_window_ms)
    if cancel.request_tenant != cancel.tenant:
        raise Forbidden(f"tenant {cancel.tenant} may not cancel a request of tenant "
                        f"{cancel.request_tenant}: only the tenant that sent a request may "
                        "cancel it")


def _accepted(cancel: CancelRequest, digest: str, size: int, ctx: Context) -> Cancel:
    notice = stamped_notice(CancelNotice(
        tenant=cancel.tenant, request_id=cancel.request_id, cancel_id=cancel.cancel_id,
        key_id=cancel.key_id, at_ms=ctx.now_ms), ctx.stamp_keys)
    reason = (f"tenant {cancel.tenant} (key {cancel.key_id}) cancels its request "
              f"{cancel.request_id}: it ends cancelled unless it has run")
    return Cancel(notice, reply_topic_for(cancel.reply_to, cancel.tenant, ctx),
                  _acknowledgement(cancel, digest, ctx, None),
                  _audit(cancel, "cancel", None, reason, digest, size, ctx))


def _refused(cancel: CancelRequest, err: KipError, digest: str, size: int,
             ctx: Context) -> Reject:
    return Reject(reply_topic_for(cancel.reply_to, cancel.tenant, ctx),
                  _acknowledgement(cancel, digest, ctx, err),
                  _audit(cancel, Status.REJECTED.value, err.code,
                         f"cancel of request {cancel.request_id} of tenant "
                         f"{cancel.request_tenant}: {err.message}", digest, size, ctx))


def _acknowledgement(cancel: CancelRequest, digest: str, ctx: Context,
                     err: KipError | None) -> InferenceResult:
    return InferenceResult(
        request_id=cancel.cancel_id, request_sha256=digest, tenant=cancel.tenant,
        status=Status.OK if err is None else Status.REJECTED,
        error=None if err is None else error_info(err),
        timings=Timings(total_ms=float(max(0, ctx.now_ms - cancel.issued_at_ms))),
        traceparent=cancel.traceparent, produced_at_ms=ctx.now_ms)


def _audit(cancel: CancelRequest, decision: str, code: str | None, reason: str, digest: str,
           size: int, ctx: Context) -> AuditRecord:
    return AuditRecord(request_id=cancel.cancel_id, stage=STAGE, decision=decision,
                       final=True, tenant=cancel.tenant, key_id=cancel.key_id,
                       error_code=code, reason=reason[:500], request_sha256=digest,
                       payload_bytes=size, traceparent=cancel.traceparent, at_ms=ctx.now_ms)

"""What ``KipClient`` builds before it sends, and when a rejected request is worth
sending again: tensors from a caller's inputs, a request's trace context, a cancel."""

from __future__ import annotations

import os
from collections.abc import Mapping

import numpy as np

from kip.runtime import tracing
from kip.schemas.codec import now_ms
from kip.schemas.errors import error_for_code
from kip.schemas.messages import CancelRequest, InferenceResult, Status
from kip.schemas.signing import sign_cancel
from kip.schemas.tensors import Tensor
from kip.topics.names import TopicNames

Inputs = list[Tensor] | Mapping[str, np.ndarray | list[str]]


def to_tensors(inputs: Inputs) -> list[Tensor]:
    if isinstance(inputs, list):
        return inputs
    out = []
    for name, value in inputs.items():
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            out.append(Tensor.text(name, value))
        else:
            out.append(Tensor.from_array(name, np.asarray(value)))
    return out


def send_trace(names: TopicNames, fields: dict) -> str:
    """A request's ``traceparent``: its ``send`` span's where tracing is on
    (runtime/tracing.py), else a new trace's, which the stages' spans then join."""
    if not tracing.ENABLED:
        return new_traceparent()
    topic = names.requests(fields["priority"])
    sent = tracing.record(f"send {topic}", fields["issued_at_ms"], now_ms(),
                          tracing.messaging("send", topic) | {
                              "kip.model": fields["model"], "kip.priority": fields["priority"],
                              "kip.request_id": fields["request_id"]}, kind="producer")
    return sent or new_traceparent()


def new_traceparent() -> str:
    return f"00-{os.urandom(16).hex()}-{os.urandom(8).hex()}-01"


def retry_wait_s(result: InferenceResult) -> float | None:
    """Seconds to wait before sending a rejected request again; None: do not."""
    error = result.error
    if (result.status != Status.REJECTED or error is None or error.retry_after_ms is None
            or not error_for_code(error.code).retriable):
        return None
    return max(error.retry_after_ms, 10) / 1000


def cancel_message(secret: bytes, tenant: str, key_id: str, request_id: str,
                   request_tenant: str, reply_to: str | None) -> CancelRequest:
    """A signed cancel of ``request_tenant``'s request ``request_id`` (schemas/signing.py)."""
    fields = dict(cancel_id=os.urandom(16).hex(), tenant=tenant, key_id=key_id,
                  issued_at_ms=now_ms(), request_id=request_id, request_tenant=request_tenant,
                  reply_to=reply_to)
    return CancelRequest(**fields, signature=sign_cancel(secret, **fields),
                         traceparent=new_traceparent())

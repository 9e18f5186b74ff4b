"""JSON encoding of kip messages, and the Kafka headers that go with them.

``encode`` has pydantic-core write a message's JSON straight from the model. Dumping the
model to a dict and handing that to orjson gives the same bytes, but costs more where
the encoded messages stay alive a while, as a round's do until its transaction commits.
"""

from __future__ import annotations

import time
from typing import TypeVar

from pydantic import ValidationError

from kip.schemas.errors import InvalidRequest
from kip.schemas.pydantic_adapter import to_json
from kip.schemas.messages import (AuditRecord, CancelNotice, CancelRequest, DeadLetterRecord,
                                  InferenceRequest, InferenceResult, Message, WorkerTelemetry,
                                  WorkItem)

M = TypeVar("M", bound=Message)

MESSAGE_TYPES: dict[type[Message], str] = {
    InferenceRequest: "inference-request",
    WorkItem: "work-item",
    InferenceResult: "inference-result",
    AuditRecord: "audit-record",
    DeadLetterRecord: "dead-letter",
    WorkerTelemetry: "worker-telemetry",
    CancelRequest: "cancel-request",
    CancelNotice: "cancel-notice",
}
TYPE_HEADER = "kip-type"
VERSION_HEADER = "kip-schema-version"
TRACE_HEADER = "traceparent"
# A message type's type and schema-version headers, built once: every record carries them.
_TYPE_HEADERS = {cls: ((TYPE_HEADER, name.encode()), (VERSION_HEADER, str(
    cls.model_fields["schema_version"].default).encode())) for cls, name in MESSAGE_TYPES.items()}
# Set by producers so the pipeline can answer an oversized request without parsing it.
REQUEST_ID_HEADER = "kip-request-id"
MODEL_HEADER = "kip-model"


def encode(message: Message) -> bytes:
    """The message as compact JSON bytes (absent optional fields left out)."""
    return to_json(message)


def decode(cls: type[M], payload: bytes) -> M:
    """Parse and validate ``payload``; any problem is an ``InvalidRequest``."""
    try:
        return cls.model_validate_json(payload)
    except ValidationError as exc:
        raise InvalidRequest(describe(exc)) from None


def headers(message: Message, traceparent: str | None = None) -> list[tuple[str, bytes]]:
    """Kafka headers naming the message type, schema version and trace context."""
    out = type_headers(type(message), traceparent)
    if isinstance(message, InferenceRequest):
        out += [(REQUEST_ID_HEADER, message.request_id.encode()),
                (MODEL_HEADER, message.model.encode())]
    elif isinstance(message, CancelRequest):
        out.append((REQUEST_ID_HEADER, message.cancel_id.encode()))
    return out


def type_headers(cls: type[Message], traceparent: str | None = None
                 ) -> list[tuple[str, bytes]]:
    """The headers every message of ``cls`` carries: its type, its schema version and,
    when there is one, the trace context."""
    out = list(_TYPE_HEADERS[cls])
    if traceparent:
        out.append((TRACE_HEADER, traceparent.encode()))
    return out


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def describe(exc: ValidationError) -> str:
    """A short description of the first few validation errors, naming each bad field by
    its place and never by its value (payloads, secrets)."""
    parts = []
    for err in exc.errors(include_input=False, include_url=False)[:3]:
        loc = ".".join(str(p) for p in err["loc"]) or "message"
        parts.append(f"{loc}: {err['msg']}")
    more = exc.error_count() - len(parts)
    return "; ".join(parts) + (f" (+{more} more)" if more > 0 else "")

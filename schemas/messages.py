"""The messages that travel on kip's topics (schema version 1).

Every message is a frozen pydantic model that forbids unknown fields and carries
``schema_version``; ``schemas.codec`` turns them into orjson bytes and Kafka headers.
Times are integer Unix milliseconds (``*_ms``); durations are float milliseconds.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from kip.schemas.tensors import Tensor

SCHEMA_VERSION = 1
ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:\-]{0,127}$"   # request ids, tenants, key ids
_ID = ID_PATTERN
MODEL_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:\-]{0,127}(@[0-9a-f]{1,64})?$"
_MODEL = MODEL_PATTERN
_TRACEPARENT = r"^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$"
_TOPIC = r"^[A-Za-z0-9._\-]{1,249}$"
_SHA256 = r"^[0-9a-f]{64}$"
MAX_MS = 2**53 - 1   # the largest integer every JSON reader holds exactly (year 287396)


# Request classes, highest first: the one place that defines their order. (A comment,
# not a docstring: a docstring would become part of the published JSON Schemas.)
class Priority(StrEnum):
    INTERACTIVE = "interactive"
    STANDARD = "standard"
    BATCH = "batch"

    @property
    def rank(self) -> int:
        """0 for the highest class: workers serve lower ranks first."""
        return PRIORITIES.index(self)

    def and_above(self) -> tuple[Priority, ...]:
        """This class and every class served before it (what a request of it waits behind)."""
        return PRIORITIES[:self.rank + 1]

    def below(self) -> tuple[Priority, ...]:
        """Every class served after this one."""
        return PRIORITIES[self.rank + 1:]


PRIORITIES: tuple[Priority, ...] = tuple(Priority)
_PRIORITY_OF_VALUE = {p.value: p for p in PRIORITIES}


def priority_of(value: Priority | str) -> Priority:
    """``Priority(value)`` without the enum call's cost (it runs several times for every
    message): a member or its value; anything else raises ``ValueError`` as the call does."""
    found = _PRIORITY_OF_VALUE.get(value)
    return found if found is not None else Priority(value)


class Status(StrEnum):
    OK = "ok"
    REJECTED = "rejected"
    EXPIRED = "expired"
    FAILED = "failed"
    CANCELLED = "cancelled"   # its tenant cancelled it before it ran


class Message(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


class InferenceRequest(Message):
    """What a producer publishes to ``kip.requests.<priority>`` (key: tenant)."""

    schema_version: Literal[1] = SCHEMA_VERSION
    request_id: str = Field(pattern=_ID)
    tenant: str = Field(pattern=_ID)
    key_id: str = Field(pattern=_ID)
    signature: str = Field(pattern=r"^[0-9a-f]{64}$", description="hex HMAC-SHA256")
    issued_at_ms: int = Field(ge=0, le=MAX_MS)
    priority: Priority
    model: str = Field(pattern=_MODEL, description="model alias, or name@version to pin")
    deadline_ms: int | None = Field(default=None, ge=0, le=MAX_MS,
                                    description="absolute Unix ms")
    reply_to: str | None = Field(default=None, pattern=_TOPIC)
    traceparent: str | None = Field(default=None, pattern=_TRACEPARENT)
    inputs: list[Tensor] = Field(min_length=1, max_length=64)

    @field_validator("inputs")
    @classmethod
    def _names_unique(cls, inputs: list[Tensor]) -> list[Tensor]:
        """Each input named once: a request that names a tensor twice could be read as
        either one (by kip's two stages, or by kip and its producer)."""
        if len({t.name for t in inputs}) != len(inputs):
            raise ValueError("input names must be unique")
        return inputs


class Route(Message):
    """Where the pipeline sent a request: an immutable model version."""

    alias: str
    model_name: str
    model_version: str
    artifact_sha256: str = Field(pattern=_SHA256)
    fallback_from: str | None = Field(None, description="the overloaded model it replaced")
    revision: int | None = Field(None, description=(
        "the release revision that chose this version (absent: the registry's alias)"))


class WorkStamp(Message):
    """The pipeline's proof that it admitted a work item (schemas/stamps.py)."""

    key_id: str = Field(pattern=_ID)
    mac: str = Field(pattern=_SHA256, description="hex HMAC-SHA256")


class CancelRequest(Message):
    """What a producer publishes to cancel a request it sent and no longer needs: to the
    request topic of that request's class, keyed by tenant, with an envelope and a
    signature as a request has (docs/protocol.md, "Cancelling a request"). Only the
    request's own tenant may cancel it (``request_tenant`` must be the sender's)."""

    schema_version: Literal[1] = SCHEMA_VERSION
    cancel_id: str = Field(pattern=_ID, description="this message's own id (its "
                           "kip-request-id): its acknowledgement answers it")
    tenant: str = Field(pattern=_ID)
    key_id: str = Field(pattern=_ID)
    signature: str = Field(pattern=r"^[0-9a-f]{64}$", description="hex HMAC-SHA256")
    issued_at_ms: int = Field(ge=0, le=MAX_MS)
    request_id: str = Field(pattern=_ID, description="the request to cancel")
    request_tenant: str = Field(pattern=_ID, description="the tenant that sent it")
    reply_to: str | None = Field(default=None, pattern=_TOPIC)
    traceparent: str | None = Field(default=None, pattern=_TRACEPARENT)


class CancelNotice(Message):
    """An accepted cancel, as the pipeline writes it to ``kip.cancels`` (key:
    ``tenant/request_id``) for every worker to follow."""

    schema_version: Literal[1] = SCHEMA_VERSION
    tenant: str = Field(pattern=_ID)
    request_id: str = Field(pattern=_ID)
    cancel_id: str = Field(pattern=_ID)
    key_id: str = Field(pattern=_ID, description="the key that signed the cancel: who")
    at_ms: int = Field(ge=0, le=MAX_MS)
    stamp: WorkStamp | None = Field(default=None, description="the pipeline's, as a work "
                                    "item's (schemas/stamps.py)")


class WorkItem(Message):
    """What the pipeline publishes to ``kip.work.<model>.<priority>`` (key: request id)."""

    schema_version: Literal[1] = SCHEMA_VERSION
    request: InferenceRequest
    route: Route
    routed_at_ms: int
    deadline_ms: int = Field(description="the request's deadline, or its class default")
    reply_to: str | None = Field(default=None, pattern=_TOPIC, description=(
        "where the result goes, as the pipeline resolved it: the request's reply_to, or "
        "its tenant's own reply topic, or the shared results topic"))
    request_sha256: str | None = Field(default=None, pattern=_SHA256, description=(
        "sha256 of the request message as the producer sent it"))
    work_partition: int | None = Field(default=None, ge=0, le=2**31 - 1, description=(
        "the partition of the work topic the pipeline wrote it to: a worker runs it from "
        "there alone"))
    stamp: WorkStamp | None = None


class ErrorInfo(Message):
    code: str
    message: str
    retry_after_ms: int | None = None


class Timings(Message):
    """Milliseconds spent in each stage; ``total_ms`` runs from ``issued_at_ms``.
    ``inference_started_at_ms`` (Unix ms) lets a reader check that no inference started
    after the request's deadline."""

    admission_ms: float | None = Field(default=None, description=(
        "issued to routed: the trip to the pipeline and its decision"))
    queue_ms: float | None = None
    batch_wait_ms: float | None = None
    inference_ms: float | None = None
    total_ms: float
    inference_started_at_ms: float | None = None


class InferenceResult(Message):
    """The one terminal result of a request (key: request id), on its reply topic."""

    schema_version: Literal[1] = SCHEMA_VERSION
    request_id: str
    request_sha256: str | None = Field(default=None, description=(
        "sha256 of the request message this result answers; absent when it answers none "
        "(a duplicate, or a message kip could not trust)"))
    tenant: str | None = None
    priority: Priority | None = None
    status: Status
    error: ErrorInfo | None = None
    model: str | None = None
    model_name: str | None = None
    model_version: str | None = None
    artifact_sha256: str | None = None
    fallback_from: str | None = None
    outputs: list[Tensor] = Field(default_factory=list)
    timings: Timings
    batch_size: int | None = None
    traceparent: str | None = None
    produced_at_ms: int


class AuditRecord(Message):
    """One governance record per decision; the record with ``final`` ends the request."""

    schema_version: Literal[1] = SCHEMA_VERSION
    request_id: str
    stage: Literal["pipeline", "worker"]
    decision: str = Field(description="routed, or the terminal status")
    final: bool
    tenant: str | None = None
    key_id: str | None = None
    priority: Priority | None = None
    model: str | None = None
    model_name: str | None = None
    model_version: str | None = None
    artifact_sha256: str | None = None
    fallback_from: str | None = None
    route_revision: int | None = Field(default=None, description=(
        "the release revision that routed the request (``kip rollout``)"))
    error_code: str | None = None
    reason: str | None = Field(default=None, description=(
        "why, in words: the rule that decided (a rejection's or failure's message: the "
        "quota, the capacity estimate against the budget, the check that failed; the "
        "route or the fallback a request was sent to)"))
    request_sha256: str | None = Field(default=None, pattern=_SHA256, description=(
        "sha256 of the request message as the producer sent it (never its payload)"))
    timings: Timings | None = Field(default=None, description=(
        "on a worker's final record: milliseconds per stage, as in the result"))
    payload_bytes: int
    traceparent: str | None = None
    at_ms: int


class DeadLetterRecord(Message):
    """A message kip could not use, with where it came from and why."""

    schema_version: Literal[1] = SCHEMA_VERSION
    origin_topic: str
    origin_partition: int
    origin_offset: int
    error_code: str
    reason: str
    request_id: str | None = None
    payload_b64: str | None = Field(default=None, description=(
        "the original bytes, base64, cut at 64 KiB: only where the operator keeps payloads"))
    payload_sha256: str | None = Field(default=None, pattern=_SHA256)
    payload_bytes: int
    at_ms: int
    tenant: str | None = Field(default=None, pattern=_ID, description=(
        "who sent the message, where its envelope checked"))
    envelope: str | None = Field(default=None, max_length=256, description=(
        "the message's kip-envelope header, where it checked: a replay sends it again"))


# Bounds of believable telemetry: a value past them is a bug or a lie, and is dropped
# (one worker process serving a million requests a second is neither).
MAX_REQUESTS_PER_S = 1e6
MAX_BACKLOG = 10**9


class VersionHealth(Message):
    """How one model version's inferences went over a worker's health window."""

    requests: int = Field(ge=0, le=MAX_BACKLOG, description="that ran inference or failed it")
    failed: int = Field(ge=0, le=MAX_BACKLOG, description="ended INFERENCE_FAILED")
    p99_inference_ms: float | None = Field(None, ge=0, le=MAX_MS)


class WorkerTelemetry(Message):
    """What a worker reports on ``kip.telemetry`` every second (key: worker id)."""

    schema_version: Literal[1] = SCHEMA_VERSION
    worker_id: str
    model: str
    versions: list[str]
    provider: str
    requests_per_s: float = Field(ge=0, le=MAX_REQUESTS_PER_S,
                                  description="measured while busy, EWMA; 0 = unknown")
    backlog: dict[Priority, Annotated[int, Field(ge=0, le=MAX_BACKLOG)]] = Field(
        description="requests waiting per class")
    memory_rss_bytes: int = Field(ge=0)
    health: dict[str, VersionHealth] = Field(default_factory=dict, max_length=64, description=(
        "per version (its version id) run in the last health window: for the release "
        "health gate (pipeline/health.py)"))
    refused: dict[str, Annotated[str, Field(max_length=500)]] = Field(
        default_factory=dict, max_length=64, description=(
            "versions this worker will not load (over its memory budget), with why"))
    at_ms: int = Field(ge=0, le=MAX_MS)


def output_array(result: InferenceResult, name: str):
    """The named output of a result as a numpy array (KeyError if absent)."""
    for tensor in result.outputs:
        if tensor.name == name:
            return tensor.array
    raise KeyError(f"result {result.request_id} has no output '{name}'")

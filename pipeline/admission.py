"""Admission: payload limits, deadlines and overload, per priority class and model.

Pure functions over a request, its model's manifest, an ``AdmissionPolicy`` and the
clock. The size check runs on the raw message length, before the body is parsed.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from kip.models.manifest import Manifest
from kip.schemas.errors import DeadlineExceeded, InvalidRequest, Overloaded, PayloadTooLarge
from kip.schemas.messages import InferenceRequest, Priority, priority_of
from kip.topics.catalogue import MAX_MESSAGE_BYTES

MiB = 1024 * 1024
# An admitted request travels on as a work item: the request plus its route. The limit
# leaves room for that envelope, or the work item could not be written and the request
# would be stuck rather than refused.
MAX_REQUEST_BYTES = MAX_MESSAGE_BYTES - 64 * 1024


class ClassPolicy(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    max_payload_bytes: int = Field(gt=0, le=MAX_REQUEST_BYTES,
                                   description="largest request message")
    default_deadline_ms: int = Field(gt=0, description="deadline when a request sets none")
    wait_budget_ms: int = Field(gt=0, description="longest estimated wait admission accepts")


DEFAULT_CLASSES = {
    Priority.INTERACTIVE: ClassPolicy(max_payload_bytes=1 * MiB, default_deadline_ms=2_000,
                                      wait_budget_ms=500),
    Priority.STANDARD: ClassPolicy(max_payload_bytes=4 * MiB, default_deadline_ms=30_000,
                                   wait_budget_ms=5_000),
    Priority.BATCH: ClassPolicy(max_payload_bytes=MAX_REQUEST_BYTES, default_deadline_ms=600_000,
                                wait_budget_ms=120_000),
}


class AdmissionPolicy(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    classes: dict[Priority, ClassPolicy] = Field(default_factory=lambda: dict(DEFAULT_CLASSES))
    max_tensor_elements: int = Field(4_000_000, gt=0, description="per tensor in a request")
    unsigned_per_s: float = Field(
        10.0, gt=0, description="messages a second, per Kafka key, that fail their "
        "envelope and are still answered (on the shared results topic, enough for a "
        "sender to learn why); the rest are shed (pipeline/intake.py)")
    unsigned_burst: float = Field(20.0, gt=0, description="the burst of unsigned_per_s")
    deadline_headroom: float = Field(
        0.4, gt=0, le=1, description="admit only if the estimated wait fits in this share "
        "of the time left to the deadline: the rest absorbs estimate error and inference "
        "(a larger share lets admitted requests expire in the queue under overload)")

    def of(self, priority: Priority | str) -> ClassPolicy:
        return self.classes[priority_of(priority)]


def check_payload_size(size: int, priority: Priority | str, policy: AdmissionPolicy,
                       model_limit: int | None = None) -> None:
    """Raise ``PayloadTooLarge`` for a message over its class (or known model) limit."""
    limit = policy.of(priority).max_payload_bytes
    by_model = model_limit is not None and model_limit < limit
    if by_model:
        limit = model_limit
    if size > limit:
        what = "model" if by_model else f"{priority_of(priority)} class"
        raise PayloadTooLarge(f"the message is {size} bytes; the {what} allows {limit}")


def check_request_limits(request: InferenceRequest, manifest: Manifest, size: int,
                         policy: AdmissionPolicy) -> None:
    """Per-model payload limit and elements per tensor (rows per request are the
    manifest's own check: ``Manifest.check_inputs``)."""
    check_payload_size(size, request.priority, policy, manifest.max_payload_bytes)
    for tensor in request.inputs:
        if tensor.element_count > policy.max_tensor_elements:
            raise InvalidRequest(f"tensor '{tensor.name}' has {tensor.element_count} "
                                 f"elements; the limit is {policy.max_tensor_elements}")


def effective_deadline(request: InferenceRequest, policy: AdmissionPolicy) -> int:
    if request.deadline_ms is not None:
        return request.deadline_ms
    return request.issued_at_ms + policy.of(request.priority).default_deadline_ms


def check_deadline(deadline_ms: int, now_ms: int) -> None:
    if deadline_ms <= now_ms:
        raise DeadlineExceeded(f"the deadline passed {now_ms - deadline_ms} ms before "
                               "admission")


def check_wait(estimate_ms: float | None, priority: Priority | str, deadline_ms: int,
               now_ms: int, policy: AdmissionPolicy) -> None:
    """Raise ``Overloaded`` when the estimated wait exceeds the class budget or the time
    the request has left; ``retry_after_ms`` is when the estimate says it would fit."""
    if estimate_ms is None:
        return
    budget = policy.of(priority).wait_budget_ms
    allowed = min(budget, int((deadline_ms - now_ms) * policy.deadline_headroom))
    if estimate_ms > allowed:
        raise Overloaded(f"estimated wait {estimate_ms:.0f} ms exceeds the "
                         f"{'class budget' if allowed == budget else 'time to the deadline'}"
                         f" of {allowed} ms", retry_after_ms=int(estimate_ms - budget) + 1
                         if estimate_ms > budget else int(estimate_ms))

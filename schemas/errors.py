"""The typed error hierarchy and its stable wire codes.

Every error that can end a request has a subclass here with a ``code`` that never
changes once published (producers in other languages branch on it), a ``retriable``
flag, and where relevant a ``retry_after_ms``. Results carry the code and message,
never a stack trace. ``error_for_code`` maps a code read off the wire back to its class.
"""

from __future__ import annotations

from typing import ClassVar


class KipError(Exception):
    """Root of every error kip puts on the wire."""

    code: ClassVar[str] = "INTERNAL"
    retriable: ClassVar[bool] = False

    def __init__(self, message: str, *, retry_after_ms: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after_ms = retry_after_ms


class InvalidRequest(KipError):
    """The message could not be decoded or does not satisfy the schema or the model."""

    code = "INVALID_REQUEST"


class Unauthenticated(KipError):
    """Bad signature, unknown key id, or issued_at outside the replay window."""

    code = "UNAUTHENTICATED"


class Forbidden(KipError):
    """The tenant is known but may not use this model or priority class."""

    code = "FORBIDDEN"


class DuplicateRequest(KipError):
    """The tenant's request id was already admitted within the replay window: the first
    message's result is its answer, and the copy is neither run nor charged."""

    code = "DUPLICATE_REQUEST"


class ModelNotFound(KipError):
    """The alias resolves to no model version in the registry."""

    code = "MODEL_NOT_FOUND"


class ModelUnverified(KipError):
    """The model version does not verify: unsigned where signatures are required, signed
    by no trusted key, or its files do not match its manifest. It is never run."""

    code = "MODEL_UNVERIFIED"
    REASONS = ("unsigned", "untrusted", "digest")   # a metrics label: a closed set

    def __init__(self, message: str, *, reason: str = "digest") -> None:
        super().__init__(message)
        self.reason = reason if reason in self.REASONS else "digest"


class ModelUnavailable(KipError):
    """This version cannot be had now: no worker of the model is live, its memory
    estimate does not fit the workers' memory budget, or it is not staged on this host
    and the model store cannot be read. The request was not run; ``retry_after_ms``,
    where set, says when a retry may find a worker."""

    code = "MODEL_UNAVAILABLE"
    retriable = True


class DeadlineExceeded(KipError):
    """The request's deadline passed before it could be served."""

    code = "DEADLINE_EXCEEDED"


class PayloadTooLarge(KipError):
    """The message is larger than its class or model allows; it was not parsed."""

    code = "PAYLOAD_TOO_LARGE"


class QuotaExceeded(KipError):
    """The tenant spent its request or byte budget; ``retry_after_ms`` says when to retry."""

    code = "QUOTA_EXCEEDED"
    retriable = True


class Overloaded(KipError):
    """The model's estimated wait exceeds the class budget or the request's deadline."""

    code = "OVERLOADED"
    retriable = True


class Cancelled(KipError):
    """Its tenant cancelled the request before it ran: it was not run."""

    code = "CANCELLED"


class InferenceFailed(KipError):
    """The model ran but failed or returned something unusable (NaN, wrong row count)."""

    code = "INFERENCE_FAILED"


class Internal(KipError):
    """A kip defect or an unexpected environment failure."""

    code = "INTERNAL"
    retriable = True


_BY_CODE: dict[str, type[KipError]] = {
    cls.code: cls
    for cls in (InvalidRequest, Unauthenticated, Forbidden, DuplicateRequest, ModelNotFound,
                ModelUnverified, ModelUnavailable, DeadlineExceeded, PayloadTooLarge, QuotaExceeded, Overloaded, InferenceFailed,
                Internal, Cancelled)
}

ERROR_CODES: tuple[str, ...] = tuple(sorted(_BY_CODE))


def error_for_code(code: str) -> type[KipError]:
    """Return the error class for a wire code (``Internal`` for an unknown one)."""
    return _BY_CODE.get(code, Internal)

"""What travels on kip's topics: messages, tensors, error codes and their encoding."""

from kip.schemas.codec import decode, encode, headers, now_ms
from kip.schemas.errors import (DeadlineExceeded, Forbidden, InferenceFailed, Internal,
                                InvalidRequest, KipError, ModelNotFound, Unauthenticated,
                                error_for_code)
from kip.schemas.messages import (AuditRecord, DeadLetterRecord, ErrorInfo, InferenceRequest,
                                  InferenceResult, Priority, Route, Status, Timings, WorkItem)
from kip.schemas.tensors import Tensor

__all__ = [
    "AuditRecord", "DeadLetterRecord", "DeadlineExceeded", "ErrorInfo", "Forbidden",
    "InferenceFailed", "InferenceRequest", "InferenceResult", "Internal", "InvalidRequest",
    "KipError", "ModelNotFound", "Priority", "Route", "Status", "Tensor", "Timings",
    "Unauthenticated", "WorkItem", "decode", "encode", "error_for_code", "headers", "now_ms",
]

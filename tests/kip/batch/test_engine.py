"""Which endings a batch job waits out and sends again, without spending its retries."""

import pytest

from kip.batch.engine import Chunk, Outcome, back_pressure_ms
from kip.schemas.messages import ErrorInfo, InferenceResult, Status, Timings

CHUNK = Chunk(index=0, first_row=0, rows=1, inputs=None)


def _outcome(code: str, retry_after_ms: int | None, status=Status.REJECTED) -> Outcome:
    result = InferenceResult(request_id="j.0.0", status=status,
                             error=ErrorInfo(code=code, message="m",
                                             retry_after_ms=retry_after_ms),
                             timings=Timings(total_ms=0.0), produced_at_ms=1)
    return Outcome(CHUNK, status.value, code, "m", result)


@pytest.mark.parametrize("code, retry_after, status, wait", [
    ("OVERLOADED", 300, Status.REJECTED, 300),
    ("QUOTA_EXCEEDED", None, Status.REJECTED, 200),          # no hint: the backoff
    ("MODEL_UNAVAILABLE", 1000, Status.REJECTED, 1000),      # no live worker: wait
    ("MODEL_UNAVAILABLE", None, Status.FAILED, None),        # over the memory budget
    ("INVALID_REQUEST", None, Status.REJECTED, None),
])
def test_back_pressure_waits_and_anything_else_does_not(code, retry_after, status, wait):
    assert back_pressure_ms(_outcome(code, retry_after, status), 200) == wait

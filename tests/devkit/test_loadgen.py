"""The load generator's check that no inference started after its request's deadline."""

from concurrent.futures import Future

from kip.devkit.loadgen import ClassStats, _collect
from kip.schemas.messages import InferenceResult, Status, Timings

DEADLINE_MS = 1_000_000


def _result(started_at_ms: float | None) -> Future:
    fut = Future()   # what _collect reads of it is the same as an asyncio future
    fut.set_result(InferenceResult(
        request_id="r1", status=Status.OK, produced_at_ms=DEADLINE_MS + 50,
        timings=Timings(total_ms=10.0, inference_ms=5.0, inference_started_at_ms=started_at_ms)))
    return fut


def test_an_inference_started_before_the_deadline_is_in_time():
    stats = ClassStats()
    _collect(stats, DEADLINE_MS, _result(DEADLINE_MS - 1))
    assert stats.late_inferences == 0 and len(stats.results) == 1


def test_an_inference_started_at_or_after_the_deadline_is_late():
    stats = ClassStats()
    _collect(stats, DEADLINE_MS, _result(DEADLINE_MS))
    assert stats.late_inferences == 1


def test_an_ok_result_that_does_not_say_when_inference_started_counts_as_late():
    stats = ClassStats()
    _collect(stats, DEADLINE_MS, _result(None))
    assert stats.late_inferences == 1

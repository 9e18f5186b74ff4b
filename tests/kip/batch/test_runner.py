"""How a resumed job treats what an earlier run sent (``resume_plan``)."""

from kip.batch.runner import resume_plan
from kip.schemas.messages import InferenceResult, Timings


def _sent(request_id: str, delivered: bool) -> dict:
    return {"id": request_id, "sha256": request_id.encode().hex(), "at_ms": 1,
            "delivered": delivered}


def _result(request_id: str, status: str) -> InferenceResult:
    return InferenceResult(request_id=request_id, status=status,
                           timings=Timings(total_ms=1.0), produced_at_ms=1)


def test_a_resumed_job_keeps_answers_waits_for_what_kafka_took_and_reuses_no_id():
    sent = {3: [_sent("j.3.0", True)],                          # taken, unanswered
            4: [_sent("j.4.0", False)],                         # journaled, killed before
            5: [_sent("j.5.0", True), _sent("j.5.1", True)],    # answered ok
            6: [_sent("j.6.0", True)]}                          # answered, not ok
    found = {"j.5.1": _result("j.5.1", "ok"), "j.6.0": _result("j.6.0", "rejected")}
    earlier, awaiting, attempts = resume_plan(sent, found)
    assert list(earlier) == [5] and earlier[5].request_id == "j.5.1"
    assert awaiting == {3: ("j.3.0", "j.3.0".encode().hex())}
    # Every journaled id counts, delivered or not: the pipeline refuses an id it has
    # admitted, and a request killed between its send and the broker's ack may be there.
    assert attempts == {3: 1, 4: 1, 5: 2, 6: 1}

from schemas import DeadlineExceeded, InferenceFailed, Status
from schemas.messages import Route, WorkItem
from tests.pipeline.conftest import NOW_MS, signer
from workers.outcome import Stamps, terminal

import numpy as np


def _item() -> WorkItem:
    request = signer().request("digits", {"pixels": np.zeros((1, 64), np.float32)},
                               issued_at_ms=NOW_MS)
    route = Route(alias="digits", model_name="digits", model_version="v1",
                  artifact_sha256="a" * 64)
    return WorkItem(request=request, route=route, routed_at_ms=NOW_MS + 5,
                    deadline_ms=NOW_MS + 1000)


def test_ok_result_has_timings_and_the_model_identity():
    stamps = Stamps(pulled_ms=NOW_MS + 15, started_ms=NOW_MS + 20, finished_ms=NOW_MS + 23,
                    batch_size=4)
    result, audit = terminal(_item(), stamps, NOW_MS + 30)
    assert result.status == Status.OK and result.batch_size == 4
    t = result.timings
    assert (t.queue_ms, t.batch_wait_ms, t.inference_ms, t.total_ms) == (10, 5, 3, 30)
    assert result.artifact_sha256 == "a" * 64 and audit.final and audit.decision == "ok"


def test_errors_map_to_expired_and_failed():
    expired, _ = terminal(_item(), Stamps(NOW_MS), NOW_MS, error=DeadlineExceeded("late"))
    failed, audit = terminal(_item(), Stamps(NOW_MS), NOW_MS, error=InferenceFailed("nan"))
    assert expired.status == Status.EXPIRED and expired.error.code == "DEADLINE_EXCEEDED"
    assert failed.status == Status.FAILED and audit.error_code == "INFERENCE_FAILED"

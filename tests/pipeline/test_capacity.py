import orjson
import pytest
from pydantic import ValidationError

from kip.pipeline.capacity import CapacityView
from kip.pipeline.control import apply_telemetry
from kip.schemas.messages import Priority, WorkerTelemetry

I, S, B = Priority.INTERACTIVE, Priority.STANDARD, Priority.BATCH


def _t(worker: str, rate: float, backlog: dict, at_ms: int = 1000) -> WorkerTelemetry:
    return WorkerTelemetry(worker_id=worker, model="m", versions=["v"], provider="cpu",
                           requests_per_s=rate, backlog=backlog, memory_rss_bytes=1,
                           at_ms=at_ms)


def test_no_telemetry_means_no_estimate():
    assert CapacityView().estimate_wait_ms("m", I, 0) is None


def test_a_class_waits_behind_itself_and_higher_classes_across_workers():
    view = CapacityView()
    view.update("w1", _t("w1", 100, {I: 10, S: 40, B: 1000}))
    view.update("w2", _t("w2", 100, {I: 10, S: 0, B: 1000}))
    assert view.estimate_wait_ms("m", I, 1000) == 100        # 20 ahead at 200/s
    assert view.estimate_wait_ms("m", S, 1000) == 300
    assert view.estimate_wait_ms("m", B, 1000) == 10300


def test_forwarded_requests_count_until_the_next_report():
    view = CapacityView()
    view.update("w1", _t("w1", 100, {}))
    for _ in range(50):
        view.forwarded("m", I)
    assert view.estimate_wait_ms("m", I, 1000) == 500
    view.update("w1", _t("w1", 100, {I: 5}))
    assert view.estimate_wait_ms("m", I, 1000) == 50


def test_stale_and_departed_workers_are_ignored():
    view = CapacityView()
    view.update("w1", _t("w1", 100, {I: 10}, at_ms=0))
    assert view.estimate_wait_ms("m", I, 20_000) is None
    view.update("w1", None)
    assert view.workers == {}


def test_telemetry_from_the_future_or_gone_quiet_counts_for_nothing():
    view = CapacityView()
    ten_years = 10 * 365 * 86_400_000
    assert not view.update("w1", _t("w1", 1, {I: 10**6}, at_ms=1000 + ten_years), now_ms=1000)
    view.update("w2", _t("w2", 1, {I: 10**6}, at_ms=1000 + ten_years))   # unchecked: kept,
    assert view.estimate_wait_ms("m", I, 1000) is None                   # but not believed
    view.update("w3", _t("w3", 100, {I: 10}, at_ms=1000), now_ms=1000)
    assert view.estimate_wait_ms("m", I, 1000 + 4_000) == 100
    assert view.estimate_wait_ms("m", I, 1000 + 6_000) is None   # silent for 6 s


def test_the_telemetry_follower_refuses_future_and_absurd_records():
    view = CapacityView()
    apply = apply_telemetry(view, clock=lambda: 1000)
    with pytest.raises(ValueError, match="ahead of this clock"):
        apply(b"w", _t("w", 1, {}, at_ms=10**12).model_dump_json().encode())
    absurd = _t("w", 1, {}).model_dump(mode="json") | {"requests_per_s": 1e18}
    with pytest.raises(ValidationError):
        apply(b"w", orjson.dumps(absurd))
    with pytest.raises(ValidationError):
        apply(b"w", orjson.dumps(_t("w", 1, {}).model_dump(mode="json")
                                 | {"backlog": {"interactive": 10**12}}))
    assert view.workers == {}


def test_a_silent_worker_goes_stale_unless_every_worker_is_silent():
    """One worker unheard for 5 s while others report is gone; every worker unheard at
    once is the telemetry path failing (a broker failover), and they count as live for
    the grace before the models fail closed."""
    from kip.pipeline.capacity import SILENT_GRACE_MS, STALE_AFTER_MS
    view = CapacityView()
    view.update("w1", _t("w1", 100, {}, at_ms=1000))
    other = _t("w2", 100, {}, at_ms=1000 + STALE_AFTER_MS).model_copy(update={"model": "n"})
    view.update("w2", other)
    assert view.serving("m", 1000 + STALE_AFTER_MS) == []          # n still reports
    quiet = CapacityView()
    quiet.update("w1", _t("w1", 100, {}, at_ms=1000))
    assert len(quiet.serving("m", 1000 + STALE_AFTER_MS + 1)) == 1    # all silent: grace
    assert quiet.serving("m", 1000 + SILENT_GRACE_MS) == []

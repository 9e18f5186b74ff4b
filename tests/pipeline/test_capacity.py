from pipeline.capacity import CapacityView
from schemas.messages import Priority, WorkerTelemetry

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

"""kip's dashboard and alert rules against a real Prometheus scraping a running kip under
load: every panel's query returns data, and KipNoLiveWorker fires within its ``for``
window once the digits workers stop (deploy/monitoring/grafana, deploy/monitoring/prometheus)."""

import asyncio
import time

import numpy as np
import pytest

from kip.devkit.broker import free_port_run
from kip.devkit.prometheus import (PrometheusServer, PrometheusUnavailable, binary,
                                   dashboard_queries)
from kip.schemas import Status
from tests.e2e.conftest import client_for

PIPELINE, DIGITS = 0, 2   # the stack's services: the pipeline, minilm's worker, digits'
NO_LIVE_WORKER_FOR_S = 30   # KipNoLiveWorker's `for`
GPU_ROW = "GPU"


@pytest.fixture
def prometheus(plain_stack, tmp_path):
    """Prometheus scraping the stack's services, ``kip scaling`` and ``kip audit verify
    --every``, each started here on a port of its own."""
    try:
        binary()
    except PrometheusUnavailable as err:
        pytest.skip(str(err))
    s = plain_stack
    scaling_port = free_port_run(2)
    audit_port = scaling_port + 1
    extra = [s.spawn(["scaling"], scaling_port, log=lambda *_: None),
             s.spawn(["audit", "verify", "--every", "2", "--since", "10m"], audit_port,
                     log=lambda *_: None)]
    ports = [s.metrics_port(i) for i in range(len(s.procs))] + [scaling_port, audit_port]
    server = PrometheusServer(tmp_path / "prometheus", [f"127.0.0.1:{p}" for p in ports])
    try:
        yield server.start()
    finally:
        server.stop()
        for proc in extra:
            proc.terminate()
            proc.wait(20)


def test_every_panel_has_data_under_load_and_no_live_worker_fires(plain_stack, prometheus):
    s = plain_stack
    asyncio.run(_load(s, seconds=12))
    queries = [q for q in dashboard_queries() if q[0] != GPU_ROW or _on_gpu(prometheus)]
    empty = _until_every_query_has_data(prometheus, queries, timeout_s=60)
    assert not empty, "panels without data:\n" + "\n".join(f"  {r} / {t}: {e}"
                                                           for r, t, e in empty)
    assert [float(v["value"][1]) for v in prometheus.query("kip_audit_chain_problems")] == [0]
    s.stop_service(DIGITS)
    stopped = time.monotonic()
    try:
        fired_after_s = _until_firing(prometheus, "KipNoLiveWorker", "digits",
                                      timeout_s=NO_LIVE_WORKER_FOR_S + 30) - stopped
    finally:
        s.start_service(DIGITS)
    print(f"\n{len(queries)} dashboard queries with data; KipNoLiveWorker fired "
          f"{fired_after_s:.1f} s after the digits worker stopped (for: "
          f"{NO_LIVE_WORKER_FOR_S} s)")
    assert NO_LIVE_WORKER_FOR_S <= fired_after_s
    assert not prometheus.firing("KipAuditChainBroken")
    asyncio.run(_one_ok(s))


def _on_gpu(prometheus: PrometheusServer) -> bool:
    """Whether a scraped worker runs on CUDA: elsewhere no GPU series exist."""
    return bool(prometheus.query('kip_models_loaded{provider="CUDAExecutionProvider"} > 0'))


async def _load(s, seconds: float) -> None:
    """Both models, every class, and a few requests kip must refuse (a model that does
    not exist), for ``seconds``."""
    pixels = {"pixels": np.random.default_rng(0).random((4, 64), dtype=np.float32)}
    give_up = time.monotonic() + seconds
    async with client_for(s) as kip:
        while time.monotonic() < give_up:
            futures = [await kip.submit(kip.request("digits", pixels, priority=p))
                       for p in ("interactive", "standard", "batch") for _ in range(5)]
            futures += [await kip.submit(kip.request("minilm", {"text": ["a panel"]},
                                                     priority="standard")),
                        await kip.submit(kip.request("no-such-model", pixels))]
            results = await asyncio.wait_for(asyncio.gather(*futures), 60)
            assert sum(r.status == Status.OK for r in results) >= len(results) - 2
            await asyncio.sleep(0.1)


def _until_every_query_has_data(prometheus, queries, timeout_s: float) -> list:
    waiting = list(queries)
    give_up = time.monotonic() + timeout_s
    while waiting and time.monotonic() < give_up:
        waiting = [q for q in waiting if not prometheus.query(q[2])]
        time.sleep(1)
    return waiting


def _until_firing(prometheus, alert: str, model: str, timeout_s: float) -> float:
    give_up = time.monotonic() + timeout_s
    while time.monotonic() < give_up:
        if any(a["labels"].get("model") == model for a in prometheus.firing(alert)):
            return time.monotonic()
        time.sleep(0.5)
    raise TimeoutError(f"{alert} for {model} did not fire within {timeout_s} s")


async def _one_ok(s) -> None:
    async with client_for(s) as kip:
        result = await kip.infer("digits", {"pixels": np.zeros((1, 64), np.float32)},
                                 timeout_s=60, retry_s=60)
        assert result.status == Status.OK, result

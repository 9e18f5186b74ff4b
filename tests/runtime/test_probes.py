"""/healthz and /readyz beside /metrics, served over real HTTP from the server's thread."""

import time

import orjson

from kip.devkit.broker import free_port
from kip.devkit.http_probe import probe as _get
from kip.runtime.probes import LIVE_WITHIN_S, Probes, serve


def test_health_follows_the_beat_and_readiness_every_condition():
    probes, port = Probes(), free_port()
    server = serve(port, probes=probes)
    try:
        assert _get(port, "/healthz")[0] == 503   # no beat yet
        probes.beat()
        assert _get(port, "/healthz")[0] == 200
        probes.beat(at=time.monotonic() - LIVE_WITHIN_S - 1)   # a loop that hangs
        status, body = _get(port, "/healthz")
        assert status == 503 and "last beat" in orjson.loads(body)["loop"]
        probes.beat()
        probes.expect("broker", "model")
        status, body = _get(port, "/readyz")
        assert status == 503
        assert orjson.loads(body)["conditions"]["model"] == {"ok": False,
                                                            "detail": "not yet known"}
        probes.set("broker", True, "telemetry written")
        probes.set("model", True, "digits@v loaded")
        status, body = _get(port, "/readyz")
        assert status == 200 and orjson.loads(body)["ok"] is True
        probes.set("broker", False, "no metadata")
        assert _get(port, "/readyz")[0] == 503
        status, body = _get(port, "/metrics")
        assert status == 200 and b"# HELP" in body
    finally:
        server.shutdown()
        server.server_close()


def test_a_process_with_no_conditions_is_not_ready():
    probes = Probes()
    probes.beat()
    assert probes.ready()[0] is False

"""``/healthz`` and ``/readyz`` beside ``/metrics``, on every process's metrics port.

``/healthz`` says the process's event loop runs: a task on that loop (``keep_beating``)
beats every second, while the HTTP server answers from a thread of its own, so a loop
that hangs (a blocking call, a deadlock) stops beating and the probe fails after
``LIVE_WITHIN_S`` although the thread still answers.

``/readyz`` says the process can do its work now: every condition it registered holds
(for a worker: broker reachable, groups joined, its model loaded and warmed up; for a
pipeline: broker reachable, its views caught up, its agent running). The body names each
condition with its state, so an operator reading a failing probe sees why.
"""

from __future__ import annotations

import asyncio
import threading
import time
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import orjson
from prometheus_client import make_wsgi_app

LIVE_WITHIN_S = 10.0
BEAT_EVERY_S = 1.0


class Probes:
    """What the two endpoints report; set from the event loop, read from the server's
    thread (each update replaces one dict entry or one float, single steps under the
    GIL)."""

    def __init__(self) -> None:
        self._beat: float | None = None
        self._conditions: dict[str, tuple[bool, str]] = {}

    def beat(self, at: float | None = None) -> None:
        """A beat now (or at monotonic time ``at``)."""
        self._beat = time.monotonic() if at is None else at

    def expect(self, *names: str) -> None:
        """Conditions the process is not ready without, each pending until ``set``."""
        for name in names:
            self._conditions.setdefault(name, (False, "not yet known"))

    def set(self, name: str, ok: bool, detail: str = "") -> None:
        self._conditions[name] = (ok, detail)

    def live(self) -> tuple[bool, dict]:
        if self._beat is None:
            return False, {"loop": "has not beaten yet"}
        age = time.monotonic() - self._beat
        return age < LIVE_WITHIN_S, {"loop": f"last beat {age:.1f} s ago"}

    def ready(self) -> tuple[bool, dict]:
        conditions = dict(self._conditions)
        report = {name: {"ok": ok, "detail": detail}
                  for name, (ok, detail) in sorted(conditions.items())}
        live, _ = self.live()
        return live and bool(conditions) and all(ok for ok, _ in conditions.values()), report

    def reset(self) -> None:
        self._beat = None
        self._conditions.clear()


PROBES = Probes()


async def keep_beating() -> None:
    """Beat until cancelled: run as a task of the loop whose liveness ``/healthz`` shows."""
    while True:
        PROBES.beat()
        await asyncio.sleep(BEAT_EVERY_S)


def _answer(start_response, ok: bool, body: dict) -> list[bytes]:
    data = orjson.dumps({"ok": ok} | body)
    start_response("200 OK" if ok else "503 Service Unavailable",
                   [("Content-Type", "application/json"), ("Content-Length", str(len(data)))])
    return [data]


def application(probes: Probes = PROBES):
    """The WSGI application of a metrics port: the probes, else prometheus-client's."""
    metrics = make_wsgi_app()

    def app(environ, start_response):
        path = environ.get("PATH_INFO", "")
        if path == "/healthz":
            return _answer(start_response, *probes.live())
        if path == "/readyz":
            ok, conditions = probes.ready()
            return _answer(start_response, ok, {"conditions": conditions})
        return metrics(environ, start_response)
    return app


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, *args) -> None:   # probes come every few seconds
        pass


def serve(port: int, host: str = "127.0.0.1", probes: Probes = PROBES) -> WSGIServer | None:
    """Serve ``/metrics``, ``/healthz`` and ``/readyz`` on ``host``:``port`` from a daemon
    thread (port 0: do nothing)."""
    if not port:
        return None
    server = make_server(host, port, application(probes), _ThreadingServer, _QuietHandler)
    threading.Thread(target=server.serve_forever, name="kip-metrics", daemon=True).start()
    return server

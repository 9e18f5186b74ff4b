"""What a worker tells the pipeline about its capacity, on the compacted telemetry topic."""

from __future__ import annotations

import os
import resource
import socket
import time

from kip.schemas.messages import Priority, WorkerTelemetry
from kip.workers.health import HEALTH


def worker_id(model: str) -> str:
    return f"{model}.{socket.gethostname()}.{os.getpid()}"


class Throughput:
    """The rate a worker serves a backlog, in requests per second, smoothed (EWMA).

    Measured from the end of one well-filled batch (at least half of ``max_batch``) to
    the end of the next, so fetches, commits and the CPU other processes take all
    count; busy time alone would overstate it, and admission would let in requests that
    then expire in the queue. Only requests that ran inference count: expired ones leave
    the queue fast, and counting them would raise the estimate as expiry rises. A lone
    request's rate is mostly fixed cost, so until two well-filled batches in a row the
    rate stays as it was (``0``: unknown).
    """

    def __init__(self, alpha: float = 0.2) -> None:
        self.alpha = alpha
        self.requests_per_s = 0.0
        self._saturated_since: dict[str, float] = {}   # per lane

    def batch_done(self, lane: str, records: int, inferred: int, max_batch: int) -> None:
        """Account one finished batch of ``lane``; an idle lane passes ``records=0``."""
        finished = time.monotonic()
        if records < max(1, max_batch // 2):
            self._saturated_since.pop(lane, None)
            return
        since = self._saturated_since.get(lane)
        if since is not None:
            self.record(inferred, finished - since)
        self._saturated_since[lane] = finished

    def record(self, requests: int, busy_s: float) -> None:
        if requests <= 0 or busy_s <= 0:
            return
        sample = requests / busy_s
        if self.requests_per_s == 0:
            self.requests_per_s = sample
        else:
            self.requests_per_s += self.alpha * (sample - self.requests_per_s)


def rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def report(wid: str, model: str, versions: list[str], provider: str, throughput: Throughput,
           backlog: dict[Priority, int], now_ms: int, refused: dict | None = None
           ) -> WorkerTelemetry:
    """``refused``: ``name@version`` -> (the error a version was refused with, when)."""
    return WorkerTelemetry(worker_id=wid, model=model, versions=versions, provider=provider,
                           requests_per_s=throughput.requests_per_s, backlog=backlog,
                           memory_rss_bytes=rss_bytes(), health=HEALTH.snapshot(),
                           refused={key.partition("@")[2]: f"{err.code}: {err.message}"[:500]
                                    for key, (err, _) in list((refused or {}).items())[:64]},
                           at_ms=now_ms)

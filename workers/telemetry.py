"""What a worker tells the pipeline about its capacity, on the compacted telemetry topic."""

from __future__ import annotations

import os
import resource
import socket

from schemas.messages import Priority, WorkerTelemetry


def worker_id(model: str) -> str:
    return f"{model}.{socket.gethostname()}.{os.getpid()}"


class Throughput:
    """Requests per second while busy, smoothed (EWMA) over recent batches."""

    def __init__(self, alpha: float = 0.2) -> None:
        self.alpha = alpha
        self.requests_per_s = 0.0

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
           backlog: dict[Priority, int], now_ms: int) -> WorkerTelemetry:
    return WorkerTelemetry(worker_id=wid, model=model, versions=versions, provider=provider,
                           requests_per_s=throughput.requests_per_s, backlog=backlog,
                           memory_rss_bytes=rss_bytes(), at_ms=now_ms)

"""What a worker tells the pipeline about its capacity, on the compacted telemetry topic."""

from __future__ import annotations

import asyncio
import logging
import os
import resource
import socket
import time

from aiokafka.errors import KafkaError

from kip.runtime import metrics
from kip.runtime.probes import PROBES
from kip.schemas.codec import encode, headers
from kip.schemas.messages import Priority, WorkerTelemetry
from kip.transport.clients import KafkaConnection
from kip.workers.health import HEALTH

log = logging.getLogger("kip.worker")


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


class TelemetryPublisher:
    """Writes a worker's reports, keyed by its id. A report that cannot be written
    (broker unreachable, the grant to write telemetry revoked) leaves the worker serving
    what it pulls, but not ready: the pipelines, hearing nothing, stop sending it work
    within ``STALE_AFTER_MS`` (pipeline/capacity.py); the operator sees why on /readyz and
    in ``kip_telemetry_failures_total``. The producer that failed is replaced: an
    idempotent producer whose batch failed refuses every later one (out of sequence)."""

    def __init__(self, kafka: KafkaConnection, topic: str, worker_id: str,
                 timeout_s: float) -> None:
        self.kafka, self.topic, self.key = kafka, topic, worker_id.encode()
        self.timeout_s = timeout_s
        self.producer = None

    async def start(self) -> None:
        self.producer = self.kafka.producer(client_id="kip-worker-telemetry")
        await self.producer.start()

    async def publish(self, message: WorkerTelemetry) -> None:
        try:
            await asyncio.wait_for(self.producer.send_and_wait(
                self.topic, encode(message), key=self.key, headers=headers(message)),
                self.timeout_s)
        except (KafkaError, TimeoutError) as err:
            metrics.TELEMETRY_FAILURES.inc()
            PROBES.set("broker", False, f"telemetry not written: {err!r}"[:300])
            log.warning("telemetry not written: %r", err)
            await self._replace()
        else:
            PROBES.set("broker", True, "telemetry written")

    async def leave(self) -> None:
        """A tombstone: the pipelines drop this worker from their view at once (where it
        cannot be written, they drop it when its reports go stale)."""
        try:
            await asyncio.wait_for(self.producer.send_and_wait(self.topic, None, key=self.key),
                                   self.timeout_s)
        except (KafkaError, TimeoutError) as err:
            log.warning("leaving the capacity view: %r", err)

    async def _replace(self) -> None:
        old = self.producer
        try:
            await old.stop()
        except KafkaError:
            pass
        try:
            await self.start()
        except KafkaError as err:   # the next report tries again with this one
            log.warning("a new telemetry producer did not start: %r", err)

    async def stop(self) -> None:
        if self.producer is not None:
            await self.producer.stop()

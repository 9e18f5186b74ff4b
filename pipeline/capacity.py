"""Estimated wait per model and class, from worker telemetry plus what was sent since.

Workers report their measured throughput and their backlog per class about once a
second. Between reports the pipeline adds the requests it has forwarded itself, so a
burst is seen at once rather than a second late. A request of class C waits behind the
backlog of C and of every higher class (workers serve higher classes first).
"""

from __future__ import annotations

from collections import defaultdict

from schemas.messages import Priority, WorkerTelemetry

STALE_AFTER_MS = 10_000


class CapacityView:
    def __init__(self) -> None:
        self.workers: dict[str, WorkerTelemetry] = {}
        self._sent: dict[str, dict[Priority, int]] = defaultdict(lambda: defaultdict(int))

    def update(self, worker_id: str, telemetry: WorkerTelemetry | None) -> None:
        """Apply one telemetry record (``None``: the worker left)."""
        if telemetry is None:
            self.workers.pop(worker_id, None)
            return
        self.workers[worker_id] = telemetry
        self._sent.pop(telemetry.model, None)   # its backlog now includes what we sent

    def forwarded(self, model: str, priority: Priority) -> None:
        self._sent[model][priority] += 1

    def estimate_wait_ms(self, model: str, priority: Priority, now_ms: int) -> float | None:
        """Milliseconds a new request would wait; ``None`` when nothing is known yet."""
        live = [t for t in self.workers.values()
                if t.model == model and now_ms - t.at_ms < STALE_AFTER_MS]
        rate = sum(t.requests_per_s for t in live)
        if not live or rate <= 0:
            return None
        classes = Priority(priority).and_above()
        ahead = sum(t.backlog.get(c, 0) for t in live for c in classes)
        ahead += sum(self._sent[model][c] for c in classes)
        return ahead / rate * 1000

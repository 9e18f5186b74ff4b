"""Estimated wait per model and class, from worker telemetry plus what was sent since.

Workers report their measured throughput and their backlog per class about once a
second. Between reports the pipeline adds the requests it has forwarded itself, so a
burst is seen at once rather than a second late. A request of class C waits behind the
backlog of C and of every higher class (workers serve higher classes first).

Telemetry is believed only within bounds: values past the schema's limits never decode
(the follower counts and skips them), a record dated more than ``FUTURE_SKEW_MS`` ahead
of this clock or already stale is ignored, and a worker unheard for ``STALE_AFTER_MS``
counts for nothing: its model, with no live worker left, fails closed
(pipeline/decide.py). Where no worker of any model has been heard for that long, the
telemetry path itself is the likelier casualty (the topic's leader moving in a broker
failover stops every report at once), and workers count as live for
``SILENT_GRACE_MS`` after their last report instead: a failover does not turn every model
away, while all workers dying at once is still seen within the grace.
"""

from __future__ import annotations

from collections import defaultdict

from kip.schemas.messages import Priority, WorkerTelemetry, priority_of

STALE_AFTER_MS = 5_000    # workers report every second
NO_WORKER_RETRY_MS = 1_000   # a retry's wait where no worker is live: one report's time
SILENT_GRACE_MS = 20_000   # while no worker at all is heard: a broker failover's length
FUTURE_SKEW_MS = 2_000    # clock difference tolerated between a worker and the pipeline


class CapacityView:
    def __init__(self) -> None:
        self.workers: dict[str, WorkerTelemetry] = {}
        self._sent: dict[str, dict[Priority, int]] = defaultdict(lambda: defaultdict(int))
        self._serving: dict[tuple[str, int], list[WorkerTelemetry]] = {}

    def update(self, worker_id: str, telemetry: WorkerTelemetry | None,
               now_ms: int | None = None) -> bool:
        """Apply one telemetry record (``None``: the worker left); with ``now_ms``, one
        dated outside the live window is ignored. Returns whether it was applied."""
        self._serving.clear()
        if telemetry is None:
            self.workers.pop(worker_id, None)
            return True
        if now_ms is not None and not live(telemetry, now_ms):
            return False
        self.workers[worker_id] = telemetry
        self._sent.pop(telemetry.model, None)   # its backlog now includes what we sent
        return True

    def refusal(self, model: str, version: str, now_ms: int) -> str | None:
        """Why ``model@version`` cannot run, where every live worker of the model has
        refused to load it (over its memory budget); None otherwise."""
        serving = self.serving(model, now_ms)
        if serving and all(version in t.refused for t in serving):
            return serving[0].refused[version]
        return None

    def serving(self, model: str, now_ms: int) -> list[WorkerTelemetry]:
        """The live workers of ``model`` at ``now_ms`` (kept until the next telemetry or
        another time: a round decides all its requests at one ``now_ms``)."""
        key = (model, now_ms)
        found = self._serving.get(key)
        if found is None:
            if len(self._serving) > 256:
                self._serving.clear()
            stale_ms = STALE_AFTER_MS if self.heard(now_ms) else SILENT_GRACE_MS
            found = self._serving[key] = [t for t in self.workers.values()
                                          if t.model == model and live(t, now_ms, stale_ms)]
        return found

    def heard(self, now_ms: int) -> bool:
        """Whether any worker of any model reported within ``STALE_AFTER_MS``."""
        newest = max((t.at_ms for t in list(self.workers.values())), default=None)
        return newest is not None and now_ms - newest < STALE_AFTER_MS

    def forwarded(self, model: str, priority: Priority) -> None:
        self._sent[model][priority] += 1

    def estimate_wait_ms(self, model: str, priority: Priority, now_ms: int) -> float | None:
        """Milliseconds a new request would wait; ``None`` when nothing is known yet."""
        serving = self.serving(model, now_ms)
        rate = sum(t.requests_per_s for t in serving)
        if not serving or rate <= 0:
            return None
        classes = priority_of(priority).and_above()
        ahead = sum(t.backlog.get(c, 0) for t in serving for c in classes)
        ahead += sum(self._sent[model][c] for c in classes)
        return ahead / rate * 1000


def live(telemetry: WorkerTelemetry, now_ms: int, stale_ms: int = STALE_AFTER_MS) -> bool:
    return -FUTURE_SKEW_MS <= now_ms - telemetry.at_ms < stale_ms

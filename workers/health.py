"""How each model version's inferences went, over a sliding window: what the release
health gate compares (pipeline/health.py), reported with the worker's telemetry.

Counted are the requests a version ran or failed to run: ok, and INFERENCE_FAILED (the
model's fault). Rejections before inference (stamps, inputs, deadlines) say nothing
about a version and are left out.
"""

from __future__ import annotations

import time
from collections import deque
from operator import itemgetter

import numpy as np

from schemas.messages import InferenceResult, Status, VersionHealth

COUNTED = {Status.OK, Status.FAILED}


class HealthWindow:
    """Per version, the inferences of the last ``window_s``, kept so that a report
    (every telemetry interval) costs little more than the percentile: counts are
    running sums, and the inference times sit apart for numpy to read. A window can
    hold ~50,000 results at the worker's single-row rate, and rebuilding them per
    report took ~4% of the worker's event loop (docs/benchmarks.md)."""

    def __init__(self, window_s: float = 30.0) -> None:
        self.window_s = window_s
        self._versions: dict[str, _VersionWindow] = {}

    def observe(self, result: InferenceResult, now_s: float | None = None) -> None:
        failed = result.error is not None and result.error.code == "INFERENCE_FAILED"
        if result.model_version is None or (result.status not in COUNTED) or \
                (result.status == Status.FAILED and not failed):
            return
        window = self._versions.get(result.model_version)
        if window is None:
            window = self._versions[result.model_version] = _VersionWindow()
        window.add(time.monotonic() if now_s is None else now_s, failed,
                   result.timings.inference_ms)

    def snapshot(self, now_s: float | None = None) -> dict[str, VersionHealth]:
        since = (time.monotonic() if now_s is None else now_s) - self.window_s
        for version, window in list(self._versions.items()):
            window.drop_before(since)
            if not window.seen:
                del self._versions[version]
        return {version: window.health() for version, window in self._versions.items()}


class _VersionWindow:
    def __init__(self) -> None:
        self.seen: deque[tuple[float, bool]] = deque()     # (at, failed)
        self.failed = 0
        self.times: deque[tuple[float, float]] = deque()   # (at, ms) of those that ran

    def add(self, at: float, failed: bool, inference_ms: float | None) -> None:
        self.seen.append((at, failed))
        self.failed += failed
        if not failed and inference_ms is not None:
            self.times.append((at, inference_ms))

    def drop_before(self, since: float) -> None:
        while self.seen and self.seen[0][0] < since:
            self.failed -= self.seen.popleft()[1]
        while self.times and self.times[0][0] < since:
            self.times.popleft()

    def health(self) -> VersionHealth:
        times = np.fromiter(map(itemgetter(1), self.times), float, len(self.times))
        return VersionHealth(requests=len(self.seen), failed=self.failed,
                             p99_inference_ms=float(np.percentile(times, 99))
                             if len(times) else None)


HEALTH = HealthWindow()   # one worker a process, like its metrics

"""How each model version's inferences went, over a sliding window: what the release
health gate compares (pipeline/health.py), reported with the worker's telemetry.

Counted are the requests a version ran or failed to run: ok, and INFERENCE_FAILED (the
model's fault). Rejections before inference (stamps, inputs, deadlines) say nothing
about a version and are left out.
"""

from __future__ import annotations

import time
from collections import deque

import numpy as np

from schemas.messages import InferenceResult, Status, VersionHealth

COUNTED = {Status.OK, Status.FAILED}


class HealthWindow:
    def __init__(self, window_s: float = 30.0) -> None:
        self.window_s = window_s
        self._seen: deque[tuple[float, str, bool, float | None]] = deque()

    def observe(self, result: InferenceResult, now_s: float | None = None) -> None:
        failed = result.error is not None and result.error.code == "INFERENCE_FAILED"
        if result.model_version is None or (result.status not in COUNTED) or \
                (result.status == Status.FAILED and not failed):
            return
        self._seen.append((time.monotonic() if now_s is None else now_s,
                           result.model_version, failed, result.timings.inference_ms))

    def snapshot(self, now_s: float | None = None) -> dict[str, VersionHealth]:
        now_s = time.monotonic() if now_s is None else now_s
        while self._seen and self._seen[0][0] < now_s - self.window_s:
            self._seen.popleft()
        by_version: dict[str, list] = {}
        for _, version, failed, inference_ms in self._seen:
            by_version.setdefault(version, []).append((failed, inference_ms))
        return {version: _health(rows) for version, rows in by_version.items()}


def _health(rows: list[tuple[bool, float | None]]) -> VersionHealth:
    times = [ms for failed, ms in rows if not failed and ms is not None]
    return VersionHealth(requests=len(rows), failed=sum(f for f, _ in rows),
                         p99_inference_ms=float(np.percentile(times, 99)) if times else None)


HEALTH = HealthWindow()   # one worker a process, like its metrics

"""How each model version's inferences went, over a sliding window: what the release
health gate compares (pipeline/health.py), reported with the worker's telemetry.

Counted are the requests a version ran or failed to run: ok, and INFERENCE_FAILED (the
model's fault). Rejections before inference (stamps, inputs, deadlines) say nothing
about a version and are left out.
"""

from __future__ import annotations

import time
from array import array
from bisect import bisect_left

import numpy as np

from kip.schemas.messages import Status, VersionHealth
from kip.workers.endings import Ended

COUNTED = {Status.OK, Status.FAILED}


class HealthWindow:
    """Per version, the inferences of the last ``window_s``, kept so that a report
    (every telemetry interval) costs little more than the percentile: counts are
    running sums, and the inference times sit in a flat array that numpy reads in
    place. A window holds tens of thousands of results at a worker's single-row rate."""

    def __init__(self, window_s: float = 30.0) -> None:
        self.window_s = window_s
        self._versions: dict[str, _VersionWindow] = {}

    def observe(self, ending: Ended, now_s: float | None = None) -> None:
        failed = ending.error_code == "INFERENCE_FAILED"
        if ending.model_version is None or (ending.status not in COUNTED) or \
                (ending.status == Status.FAILED and not failed):
            return
        window = self._versions.get(ending.model_version)
        if window is None:
            window = self._versions[ending.model_version] = _VersionWindow()
        window.add(time.monotonic() if now_s is None else now_s, failed, ending.inference_ms)

    def snapshot(self, now_s: float | None = None) -> dict[str, VersionHealth]:
        since = (time.monotonic() if now_s is None else now_s) - self.window_s
        for version, window in list(self._versions.items()):
            window.drop_before(since)
            if not window.seen:
                del self._versions[version]
        return {version: window.health() for version, window in self._versions.items()}


class _VersionWindow:
    def __init__(self) -> None:
        self.seen = _Series("b")    # each request counted: 1 if it failed
        self.failed = 0
        self.times = _Series("d")   # the inference ms of those that ran

    def add(self, at: float, failed: bool, inference_ms: float | None) -> None:
        self.seen.append(at, failed)
        self.failed += failed
        if not failed and inference_ms is not None:
            self.times.append(at, inference_ms)

    def drop_before(self, since: float) -> None:
        self.failed -= self.seen.drop_before(since)
        self.times.drop_before(since)

    def health(self) -> VersionHealth:
        times = self.times.values_kept()
        p99 = float(np.percentile(times, 99)) if len(times) else None
        del times   # the arrays cannot grow while numpy holds their buffer
        return VersionHealth(requests=len(self.seen), failed=self.failed,
                             p99_inference_ms=p99)


class _Series:
    """Values stamped with a time, appended oldest first and dropped oldest first, in
    flat arrays that numpy reads without a copy; ``start`` is the oldest kept. The
    dropped prefix is cut off once it is half of the arrays. Tuples in deques, turned
    into an array per report, cost the event loop a measurable share at the single-row
    rate."""

    def __init__(self, typecode: str) -> None:
        self.at = array("d")
        self.values = array(typecode)
        self.start = 0

    def __len__(self) -> int:
        return len(self.at) - self.start

    def append(self, at: float, value: float) -> None:
        self.at.append(at)
        self.values.append(value)

    def drop_before(self, since: float) -> float:
        """Drop the values stamped before ``since``; return their sum."""
        cut = bisect_left(self.at, since, self.start)
        dropped = sum(self.values[self.start:cut])
        self.start = cut
        if cut > COMPACT_AFTER and 2 * cut > len(self.at):
            del self.at[:cut]
            del self.values[:cut]
            self.start = 0
        return dropped

    def values_kept(self) -> np.ndarray:
        return np.frombuffer(self.values, dtype=np.dtype(self.values.typecode))[self.start:]


COMPACT_AFTER = 4096


HEALTH = HealthWindow()   # one worker a process, like its metrics

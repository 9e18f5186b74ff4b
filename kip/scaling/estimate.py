"""How many workers a model wants, from its lag and arrivals and a worker's capacity.

For each model, over its classes C (interactive, standard, batch):

- ``lag_records[C]``: per partition of the work topic, its end offset (read_committed)
  less the worker group's committed offset, less one: the commit marker the pipeline's
  transaction left after its last record, on which a caught-up group's offset stops.
  Where several of the pipeline's transactions wait, their other markers count as
  records: an overestimate of one per transaction, which carries many requests.
- ``lag_seconds[C]``: how long ago the oldest waiting record was written, the worst
  partition's. Each poll samples the end offsets; the time the end passed the group's
  offset (plus one, past a marker it may stop on) is interpolated between samples, as
  kafka-lag-exporter does: no record is read (the scaler may describe topics, never
  read requests), and it keeps rising while no worker runs.
- ``arrivals[C]``: records written per second (the end offsets' rise over the window).

Then, with ``per_worker`` the requests per second one worker of the model serves (its
live workers' measured mean; the configured figure before any worker has reported)::

    demand  = sum over C of (arrivals[C] + lag_records[C] / drain_s)
    desired = ceil(demand / (per_worker * utilization))

capped at the largest partition count of the model's work topics (a worker past it
holds no partition in any group: it would only add rebalances), and at least 1 while
anything is waiting or arriving. ``drain_s`` is how soon a backlog should be gone;
``utilization`` (< 1) leaves headroom so a burst does not wait for a scale-out.
Without a measured or configured ``per_worker``, demand asks for one worker more than
are live, until one reports.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True)
class Sizing:
    drain_s: float = 30.0
    utilization: float = 0.8
    per_worker_default: float = 0.0   # requests/s of one worker before any reports


class EndHistory:
    """One partition's end offsets over time, to date an offset (``written_at``)."""

    def __init__(self, keep: int = 600) -> None:
        self.times: deque[float] = deque(maxlen=keep)
        self.ends: deque[int] = deque(maxlen=keep)

    def add(self, at: float, end: int) -> None:
        if self.ends and end < self.ends[-1]:
            self.times.clear()   # the topic was recreated: its past is not this one's
            self.ends.clear()
        self.times.append(at)
        self.ends.append(end)

    def written_at(self, offset: int) -> float | None:
        """About when the record at ``offset`` was written: the time the end first
        passed it, interpolated; the oldest sample's time where it is older than all;
        None where it is not written yet."""
        if not self.ends or offset >= self.ends[-1]:
            return None
        i = bisect_left(list(self.ends), offset + 1)   # first sample with end > offset
        if i == 0:
            return self.times[0]
        t0, e0, t1, e1 = self.times[i - 1], self.ends[i - 1], self.times[i], self.ends[i]
        return t0 + (t1 - t0) * (offset + 1 - e0) / (e1 - e0)

    def rate(self, window_s: float) -> float:
        """Records written per second over the last ``window_s``."""
        if len(self.ends) < 2:
            return 0.0
        last_t, last_e = self.times[-1], self.ends[-1]
        for t, e in zip(self.times, self.ends):
            if last_t - t <= window_s:
                return (last_e - e) / (last_t - t) if last_t > t else 0.0
        return 0.0


def desired_workers(demand_per_s: float, per_worker: float, live: int, cap: int,
                    sizing: Sizing) -> int:
    """The workers ``demand_per_s`` needs (module docstring), within [0, ``cap``]."""
    if demand_per_s <= 0:
        return 0
    if per_worker <= 0:
        return min(cap, max(1, live + 1))
    return min(cap, max(1, math.ceil(demand_per_s / (per_worker * sizing.utilization))))


def demand(arrivals_per_s: float, lag_records: int, sizing: Sizing) -> float:
    """Requests per second a class asks of the model: what arrives, and its backlog
    drained within ``drain_s``."""
    return arrivals_per_s + lag_records / sizing.drain_s

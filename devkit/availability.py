"""What each fault cost interactive requests: the longest time no interactive request got
a result after the fault began, and the interactive p99 and slowest of the requests sent
in the minute around it (a partition whose owner is cut off stalls only its own
requests: the gap misses it, the slowest shows it), from when the harness sent each and when its result became readable
(read_committed) to a client following the results as they come."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

WINDOW_S = 60.0   # how long after a fault its gap is looked for; the p99's minute


@dataclass
class Timeline:
    sent: dict[str, float] = field(default_factory=dict)      # interactive id -> sent at
    arrived: dict[str, float] = field(default_factory=dict)   # request id -> result seen at
    failed: set[str] = field(default_factory=set)             # ids whose result is not OK
    faults: list[tuple[float, str]] = field(default_factory=list)   # (began at, what)

    def fault(self, began: float, what: str) -> None:
        self.faults.append((began, what))

    def costs(self) -> list[FaultCost]:
        faults = sorted(self.faults)
        ends = [nxt for nxt, _ in faults[1:]] + [float("inf")]
        return [self.cost(began, what, next_fault=end)
                for (began, what), end in zip(faults, ends)]

    def cost(self, began: float, what: str, next_fault: float = float("inf")) -> FaultCost:
        """The gap: from the fault on, the longest wait between interactive results,
        looked for up to a window after it or until the last request was sent (no result
        is due after that), the wait that spans that end included; or until the next
        fault began, which owns what comes after (the wait spanning it is cut there)."""
        last_sent = max(self.sent.values(), default=began)
        if began > last_sent:   # nothing was due after it
            return self._figures(what, began, float("nan"))
        horizon = min(began + WINDOW_S, last_sent, next_fault)
        arrivals = sorted(t for rid, t in self.arrived.items()
                          if rid in self.sent and t >= began)
        within = [t for t in arrivals if t <= horizon]
        beyond = [t for t in arrivals if t > horizon][:1]
        end = [horizon] if horizon == next_fault else beyond
        marks = [began, *within, *end]
        gap = max((b - a for a, b in zip(marks, marks[1:])), default=float("inf"))
        return self._figures(what, began, gap)

    def _figures(self, what: str, began: float, gap: float) -> FaultCost:
        near = [rid for rid, t in self.sent.items() if abs(t - began) <= WINDOW_S / 2]
        return self._over(what, near, gap)

    def _over(self, what: str, ids: list[str], gap: float) -> FaultCost:
        waits = [self.arrived[rid] - self.sent[rid] for rid in ids if rid in self.arrived]
        p99 = float(np.percentile(waits, 99)) * 1000 if waits else float("nan")
        slowest = max(waits, default=float("nan")) * 1000
        return FaultCost(what, gap, p99, slowest, len(ids),
                         sum(rid in self.failed for rid in ids),
                         sum(rid not in self.arrived for rid in ids))

    def steady(self) -> FaultCost:
        """The same figures over the requests sent neither in the half window before a
        fault nor in the window after it: what a fault's figures compare with."""
        calm = [rid for rid, t in self.sent.items()
                if not any(-WINDOW_S / 2 <= t - began <= WINDOW_S for began, _ in self.faults)]
        return self._over("no fault near", calm, float("nan"))


@dataclass(frozen=True)
class FaultCost:
    what: str
    gap_s: float           # longest time without an interactive result, from the fault on
    p99_ms: float          # interactive p99, sent within half a window of the fault
    max_ms: float          # the slowest of them: a stalled partition's wait shows here
    requests: int          # interactive requests sent within half a window of it
    failed: int            # of them, answered with an error
    unanswered: int        # of them, never answered

    def line(self) -> str:
        gap = "" if self.gap_s != self.gap_s else f"longest gap {self.gap_s:5.1f}s  "
        return (f"{self.what:40} {gap}interactive p99 {self.p99_ms:6.0f} ms, slowest "
                f"{self.max_ms:6.0f} ms over {self.requests} requests, {self.failed} failed, "
                f"{self.unanswered} unanswered")

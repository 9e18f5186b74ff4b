"""How many rows of a model version fit in one inference call of a given length, learned
from the calls the worker makes.

The background lane sizes its inference calls with it: as many requests per call as fit
in ``background_call_ms`` (an interactive request may wait for one call already running,
and on a GPU a kernel cannot be preempted), so a fast model runs hundreds of rows per
call and a slow one a few. A fixed number of requests per call was either too few for
the fast model (kip's overhead per call, paid every four rows) or too many for the slow.

A call's time is a fixed part plus a part per row, so scaling the rows of one call by
``budget / its time`` undershoots; the next call, bigger, scales again, and the fit
settles where a call takes the budget. Growth is at most twofold per call: twice the
fit so far, or twice the call's rows before there is one. (Capped by the call's rows
alone, the evidence of a short call, the remainder of a batch, pulled the fit down:
with 32 requests per batch it settled near 28, and every batch ran as 28 + 4.)
"""

from __future__ import annotations

SMOOTHING = 0.3   # weight of the newest call in the moving average
GROWTH = 2.0      # the most one call's evidence may raise the fit, as a factor


class Pace:
    """Rows that fit in ``budget_ms``, per model version (a moving average)."""

    def __init__(self, budget_ms: float) -> None:
        self.budget_ms = budget_ms
        self._rows_fit: dict[str, float] = {}

    def observe(self, version: str, rows: int, ms: float) -> None:
        if rows <= 0 or ms < 0:
            return
        before = self._rows_fit.get(version)
        fit = min(rows * self.budget_ms / max(ms, 1e-3), max(rows, before or 0) * GROWTH)
        self._rows_fit[version] = fit if before is None else before + SMOOTHING * (fit - before)

    def requests_within(self, version: str, rows_per_request: float, cap: int) -> int:
        """Requests of ``rows_per_request`` rows per call: between 1 and ``cap``; 1 until
        the version has been timed."""
        fit = self._rows_fit.get(version)
        if fit is None:
            return 1
        return max(1, min(cap, int(fit / max(rows_per_request, 1.0))))

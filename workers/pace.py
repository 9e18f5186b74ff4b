"""How long inference takes per row, per model version, measured as the worker runs.

The background lane sizes its inference calls with it: as many requests per call as fit
in ``background_call_ms`` (an interactive request may wait for one call already running,
and on a GPU a kernel cannot be preempted), so a fast model runs hundreds of rows per
call and a slow one a few. A fixed number of rows per call was either too few for the
fast model (kip's overhead per call, paid for every four rows) or too many for the slow.
"""

from __future__ import annotations

SMOOTHING = 0.2   # weight of the newest call in the moving average


class Pace:
    """Milliseconds per row of each model version's calls (a moving average)."""

    def __init__(self) -> None:
        self._ms_per_row: dict[str, float] = {}

    def observe(self, version: str, rows: int, ms: float) -> None:
        if rows <= 0 or ms < 0:
            return
        now = ms / rows
        before = self._ms_per_row.get(version)
        self._ms_per_row[version] = now if before is None else (
            before + SMOOTHING * (now - before))

    def requests_within(self, version: str, budget_ms: float, rows_per_request: float,
                        cap: int) -> int:
        """Requests of ``rows_per_request`` rows per call so that a call takes about
        ``budget_ms``: between 1 and ``cap``; 1 until the version has been timed."""
        per_row = self._ms_per_row.get(version)
        if per_row is None:
            return 1
        fit = int(budget_ms / max(per_row * max(rows_per_request, 1.0), 1e-6))
        return max(1, min(cap, fit))

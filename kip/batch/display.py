"""The progress bar of ``kip batch run`` on a terminal (rich): rows, rows/s, ETA and
the counts by outcome."""

from __future__ import annotations

from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TaskProgressColumn,
                           TextColumn, TimeElapsedColumn, TimeRemainingColumn)


class Bar:
    def __init__(self, progress) -> None:
        self._bar = Progress(TextColumn("kip batch"), BarColumn(), MofNCompleteColumn(),
                             TaskProgressColumn(), TextColumn("{task.fields[rate]} rows/s"),
                             TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                             TextColumn("{task.fields[counts]}"), transient=False)
        self._task = self._bar.add_task("rows", total=progress.total,
                                        completed=progress.done, rate="-", counts="")
        self._bar.start()

    def __call__(self, progress) -> None:
        task = self._bar.tasks[0]
        rate = f"{task.speed:.0f}" if task.speed else "-"
        counts = "  ".join(f"{k}: {v}" for k, v in sorted(progress.counts.items()))
        self._bar.update(self._task, completed=progress.done, rate=rate, counts=counts)

    def close(self) -> None:
        self._bar.stop()

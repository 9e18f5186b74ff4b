"""CPU time of processes, read from /proc: what the cost benchmark charges each one."""

from __future__ import annotations

import os
from collections.abc import Mapping

_TICK_US = 1e6 / os.sysconf("SC_CLK_TCK")


def cpu_us(pid: int) -> float:
    """User + system CPU time of ``pid`` (all its threads) so far, in µs."""
    return _stat_cpu_us(f"/proc/{pid}/stat")


def main_thread_cpu_us(pid: int) -> float:
    """The same for ``pid``'s main thread alone: in a kip stage, its event loop."""
    return _stat_cpu_us(f"/proc/{pid}/task/{pid}/stat")


def _stat_cpu_us(path: str) -> float:
    with open(path) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * _TICK_US   # utime, stime


class CpuMeter:
    """CPU µs each named process spent between ``start`` and ``stop``; with ``read``,
    what it spent by another measure (``main_thread_cpu_us``)."""

    def __init__(self, pids: Mapping[str, int], read=cpu_us) -> None:
        self.pids = dict(pids)
        self.read = read
        self._at: dict[str, float] = {}
        self.spent: dict[str, float] = {}

    def start(self) -> None:
        self._at = {name: self.read(pid) for name, pid in self.pids.items()}

    def stop(self) -> dict[str, float]:
        self.spent = {name: self.read(pid) - self._at[name]
                      for name, pid in self.pids.items()}
        return self.spent

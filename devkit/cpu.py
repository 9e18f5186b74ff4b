"""CPU time of processes, read from /proc: what the cost benchmark charges each one."""

from __future__ import annotations

import os
from collections.abc import Mapping

_TICK_US = 1e6 / os.sysconf("SC_CLK_TCK")


def cpu_us(pid: int) -> float:
    """User + system CPU time of ``pid`` (all its threads) so far, in µs."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * _TICK_US   # utime, stime


class CpuMeter:
    """CPU µs each named process spent between ``start`` and ``stop``."""

    def __init__(self, pids: Mapping[str, int]) -> None:
        self.pids = dict(pids)
        self._at: dict[str, float] = {}
        self.spent: dict[str, float] = {}

    def start(self) -> None:
        self._at = {name: cpu_us(pid) for name, pid in self.pids.items()}

    def stop(self) -> dict[str, float]:
        self.spent = {name: cpu_us(pid) - self._at[name] for name, pid in self.pids.items()}
        return self.spent

"""A CPU limit per process, as a Kubernetes pod with equal CPU request and limit has one
(Guaranteed QoS): a CFS quota in a cgroup of its own (cgroup v2's ``cpu.max``, v1's
``cpu.cfs_quota_us``), and a high weight (``cpu.weight``, ``cpu.shares``), so it gets its
quota however busy the rest of the machine is. The scale benchmark gives each worker
one, so that on a machine of two cores a worker has a capacity of its own and three
workers about three times it."""

from __future__ import annotations

import math
import os
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
PERIOD_US = 10_000   # short: a throttled worker waits at most this long in each period
MIN_QUOTA_US = 1_000


class CpuLimitUnavailable(RuntimeError):
    pass


def limit(pid: int, cpus: float, name: str) -> Path:
    """Put ``pid`` (all its threads) in cgroup ``name`` capped at ``cpus`` cores."""
    period = max(PERIOD_US, math.ceil(MIN_QUOTA_US / cpus))   # the kernel's least quota
    quota = int(cpus * period)
    if (ROOT / "cgroup.controllers").exists():   # v2: one tree
        group = ROOT / name
        _make(group)
        (group / "cpu.max").write_text(f"{quota} {period}")
        (group / "cpu.weight").write_text("10000")
    else:
        group = ROOT / "cpu" / name
        _make(group)
        (group / "cpu.cfs_period_us").write_text(str(period))
        (group / "cpu.cfs_quota_us").write_text(str(quota))
        (group / "cpu.shares").write_text(str(1 << 18))
    (group / "cgroup.procs").write_text(str(pid))
    return group


def release(group: Path) -> None:
    """Remove a group whose processes have exited."""
    try:
        group.rmdir()
    except OSError:
        pass


def _make(group: Path) -> None:
    if os.geteuid() != 0:
        raise CpuLimitUnavailable("a CPU limit per worker needs root (a cgroup of its own)")
    try:
        group.mkdir(exist_ok=True)
    except OSError as err:
        raise CpuLimitUnavailable(f"cannot make cgroup {group}: {err}") from err

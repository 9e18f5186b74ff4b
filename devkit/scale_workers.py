"""The digits workers of the scale benchmark (devkit/bench_scale.py), as Kubernetes would
run them: each a static member of its groups under an instance id of its own, with a CPU
limit (devkit/cpu_limit.py), stopped with SIGTERM, or killed and started again.

A worker starts unlimited and gets its limit once it serves (its model loaded): kip's
start (imports, a model load, a warm-up) is seconds of CPU, which a limit sized for a
share of this machine's two cores would stretch into a minute; Kubernetes clusters give
starting pods the same boost (in-place resize of a pod's CPU)."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from kip.devkit.broker import free_port
from kip.devkit.cpu_limit import limit, release
from kip.devkit.stack import DevStack

REBALANCE_HISTOGRAMS = ("kip_rebalance_pause_seconds", "kip_partitions_takeover_seconds")


@dataclass
class ScaleWorker:
    name: str             # its group.instance.id
    port: int             # its metrics
    proc: subprocess.Popen
    cgroup: Path | None = None


@dataclass
class Workers:
    stack: DevStack
    cpus: float
    model: str = "digits"
    running: dict[str, ScaleWorker] = field(default_factory=dict)

    async def start(self, name: str) -> float:
        """Start worker ``name``; seconds until it serves (then it is limited)."""
        began, port = time.monotonic(), free_port()
        shared = self.stack.worker_env
        self.stack.worker_env = shared | {"KIP_GROUP_INSTANCE_ID": name}
        try:
            proc = self.stack.spawn(["worker", "--model", self.model], port,
                                    log=lambda *_: None)
        finally:
            self.stack.worker_env = shared
        worker = self.running[name] = ScaleWorker(name, port, proc)
        while _metric(port, "kip_models_loaded{") < 1:
            if proc.poll() is not None:
                raise RuntimeError(f"worker {name} exited with {proc.returncode}")
            await asyncio.sleep(0.1)
        worker.cgroup = limit(proc.pid, self.cpus, f"kip-scale-{name}")
        return time.monotonic() - began

    async def terminate(self, name: str) -> float:
        """SIGTERM, as a pod's stop; seconds until the process has exited."""
        worker = self.running.pop(name)
        began = time.monotonic()
        worker.proc.send_signal(signal.SIGTERM)
        await asyncio.to_thread(worker.proc.wait, 60)
        self._release(worker)
        return time.monotonic() - began

    async def kill_and_restart(self, name: str) -> float:
        """SIGKILL, then the same instance started again at once, as a container
        restart; seconds until it serves again."""
        worker = self.running.pop(name)
        worker.proc.send_signal(signal.SIGKILL)
        await asyncio.to_thread(worker.proc.wait, 30)
        self._release(worker)
        return await self.start(name)

    def revoked(self, but: str = "") -> float:
        """Partitions rebalances have taken from the running workers (but ``but``)."""
        return sum(_metric(w.port, "kip_partitions_revoked_total")
                   for n, w in self.running.items() if n != but)

    def rebalances(self) -> dict[str, dict[str, tuple[float, float]]]:
        """Per running worker, the sum and count of each rebalance histogram per group
        (``kip_rebalance_pause_seconds``, ``kip_partitions_takeover_seconds``)."""
        return {name: _histograms(w.port, REBALANCE_HISTOGRAMS)
                for name, w in self.running.items()}

    def stop_all(self) -> None:
        for worker in list(self.running.values()):
            worker.proc.send_signal(signal.SIGTERM)
            try:
                worker.proc.wait(30)
            except subprocess.TimeoutExpired:
                worker.proc.kill()
            self._release(worker)
        self.running.clear()

    def _release(self, worker: ScaleWorker) -> None:
        if worker.proc in self.stack.procs:
            self.stack.procs.remove(worker.proc)
        if worker.cgroup is not None:
            release(worker.cgroup)


def _metric(port: int, prefix: str) -> float:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
            lines = r.read().decode().splitlines()
    except OSError:
        return 0.0
    return sum(float(line.split()[-1]) for line in lines if line.startswith(prefix))


def _histograms(port: int, names: tuple[str, ...]) -> dict[str, tuple[float, float]]:
    """``{"<name>{<labels>}": (sum, count)}`` of the histograms ``names`` at ``port``."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
            lines = r.read().decode().splitlines()
    except OSError:
        return {}
    found: dict[str, list[float]] = {}
    for line in lines:
        series, _, value = line.rpartition(" ")
        for name in names:
            for n, suffix in enumerate(("_sum{", "_count{")):
                if series.startswith(name + suffix):
                    key = name + series[len(name + suffix) - 1:]
                    found.setdefault(key, [0.0, 0.0])[n] = float(value)
    return {key: (v[0], v[1]) for key, v in found.items()}

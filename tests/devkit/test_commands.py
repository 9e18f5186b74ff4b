"""The developer commands: a benchmark stopped with SIGTERM (by ``timeout``, say) stops
the broker and the kip it started, which run in sessions of their own; ``kip up`` stops
its pipeline and workers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from kip.devkit.broker import LocalBroker, free_port_run


def _stat(pid: int) -> list[str]:
    """The fields of ``/proc/PID/stat`` after the command's name: [0] the state, [19] the
    start time."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:   # gone
        return []


def _children(pid: int) -> list[tuple[int, str]]:
    """The children of ``pid``, each as (pid, start time): over a long run the pids wrap
    (pid_max is 32768 here) and a freed one soon names some other process or thread."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            status = (entry / "status").read_text() if entry.name.isdigit() else ""
        except OSError:   # gone while we looked
            continue
        if any(line.split()[1:] == [str(pid)] for line in status.splitlines()
               if line.startswith("PPid:")):
            fields = _stat(int(entry.name))
            if fields:
                found.append((int(entry.name), fields[19]))
    return found


def _alive(child: tuple[int, str]) -> bool:
    fields = _stat(child[0])
    return bool(fields) and fields[19] == child[1] and fields[0] != "Z"


def _kill_all(children: list[tuple[int, str]]) -> None:
    for child in children:
        if _alive(child):
            os.kill(child[0], signal.SIGKILL)


def _left(children: list[tuple[int, str]], log: Path) -> str:
    """What a failure needs: who is still alive, and the end of the command's output."""
    alive = [_command(pid) for pid, started in children if _alive((pid, started))]
    return f"still alive: {alive}; the command printed:\n{log.read_text()[-2000:]}"


def _command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()[:160].replace(b"\0", b" ").decode()
    except OSError:   # gone since we looked
        return f"{pid} (gone)"


def _wait_for(condition, timeout_s: float, what: str, explain=lambda: "") -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}. {explain()}"
        time.sleep(0.2)


def test_a_benchmark_stopped_with_sigterm_stops_its_broker_and_services(registry, tmp_path):
    err = tmp_path / "bench.err"
    with open(err, "w") as out:
        bench = subprocess.Popen(
            [sys.executable, "-m", "kip.cli", "bench", "cost", "--warm-up", "0",
             "--requests", "1000000"], stdout=subprocess.DEVNULL, stderr=out,
            env=os.environ | {"KIP_REGISTRY_DIR": str(registry.root)})
    started: list[tuple[int, str]] = []
    try:
        _wait_for(lambda: "(a) " in err.read_text() or bench.poll() is not None, 180,
                  "the benchmark's single-row requests")
        started = _children(bench.pid)   # the broker, the pipeline and the workers
        assert bench.poll() is None and len(started) >= 4, err.read_text()[-2000:]
        bench.send_signal(signal.SIGTERM)
        assert bench.wait(timeout=90) == 130, err.read_text()[-2000:]
        _wait_for(lambda: not any(_alive(p) for p in started), 30, "its children to stop",
                  lambda: _left(started, err))
    finally:   # on a failure, nothing of the benchmark's is left behind
        bench.kill()
        _kill_all(started)
        bench.wait()


def test_kip_up_stopped_with_sigterm_stops_its_services_and_leaves_the_broker(registry,
                                                                              tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "registry").symlink_to(registry.root)
    port = free_port_run(2)   # the broker's controller listens on the port after it
    log = tmp_path / "up.out"
    with open(log, "w") as out:
        up = subprocess.Popen(
            [sys.executable, "-m", "kip.cli", "up", "--port", str(port), "--metrics-port", "0"],
            stdout=out, stderr=subprocess.STDOUT,
            env=os.environ | {"KIP_HOME": str(home), "PYTHONUNBUFFERED": "1"})
    broker = LocalBroker(home / "kafka", port=port)
    services: list[tuple[int, str]] = []
    try:
        _wait_for(lambda: "kip is up" in log.read_text() or up.poll() is not None, 180,
                  "kip up to start")
        services = [c for c in _children(up.pid) if c[0] != broker.pid()]
        assert up.poll() is None and len(services) >= 3, log.read_text()[-2000:]
        up.send_signal(signal.SIGTERM)
        assert up.wait(timeout=60) == 130, log.read_text()[-2000:]
        _wait_for(lambda: not any(_alive(p) for p in services), 30, "its services to stop",
                  lambda: _left(services, log))
        assert broker.pid() is not None   # `kip kafka stop` stops it, as the README says
    finally:
        up.kill()
        _kill_all(services)
        up.wait()
        broker.stop()

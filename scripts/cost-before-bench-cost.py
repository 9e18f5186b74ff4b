"""``kip bench cost``'s (a), (b) and (c) on a commit from before ``kip bench cost`` existed:
issue 14's baseline, 81721c5, measured beside today's on the same machine and hour.

    git worktree add /tmp/before 81721c5
    (cd /tmp/before && PYTHONPATH=. KIP_REGISTRY_DIR=$OLDPWD/.kip/registry \\
        $OLDPWD/.venv/bin/python $OLDPWD/scripts/cost-before-bench-cost.py)

(from the old tree: the stack's processes run ``python -m kip.cli`` from the current
folder, which must hold the old commit's modules)

The same scenario as devkit/bench_cost.py, written against that commit's modules
(kip.devstack, kip.broker, the client of then): its own broker and stack, a warm-up,
(a) single-row digits requests all in flight, (b) 32-row ones, each process's CPU read
from /proc before and after; (c) interactive MiniLM requests one at a time, after
2,500 unmeasured; its broker compiled by C2 too, as ``kip bench cost``'s.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

import kip.broker
from kip.broker import LocalBroker, free_port
from kip.client import KipClient
from kip.devstack import DEV_KEY_ID, DevStack, ensure_dev_access
from kip.loadgen import sentences

TICK_US = 1e6 / os.sysconf("SC_CLK_TCK")


def cpu_us(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * TICK_US


async def in_flight(kip: KipClient, pids: dict[str, int], count: int, rows: int,
                    require_ok: bool = True) -> dict:
    """CPU per request of each process; ``require_ok``: fail unless every request
    succeeded. The warm-up only reports how the others ended: in about two runs of
    five, one of its 6,000 did not succeed, and the run stopped there."""
    images = np.random.default_rng(0).random((rows, 64), dtype=np.float32)
    before = {n: cpu_us(p) for n, p in pids.items()}
    started = time.perf_counter()
    futures = [await kip.submit(kip.request("digits", {"pixels": images}))
               for _ in range(count)]
    results = await asyncio.wait_for(asyncio.gather(*futures), 600)
    elapsed = time.perf_counter() - started
    spent = {n: (cpu_us(p) - before[n]) / count for n, p in pids.items()}
    endings = Counter(" ".join([getattr(r.status, "value", r.status), *(
        [r.error.code] if r.error else [])]) for r in results)
    if require_ok:
        assert set(endings) == {"ok"}, f"not every request succeeded: {dict(endings)}"
    elif set(endings) != {"ok"}:
        print(f"warm-up: {dict(endings)}")
    return spent | {"all": sum(spent.values()), "per_s": count / elapsed}


async def sequential(kip: KipClient, count: int, warm_up: int) -> dict:
    for text in sentences(warm_up, seed=2):   # unmeasured, as kip bench cost's (c)
        assert (await kip.infer("minilm", {"text": [text]},
                                priority="interactive")).status == "ok"
    wall, added = [], []
    for text in sentences(count):
        started = time.perf_counter()
        result = await kip.infer("minilm", {"text": [text]}, priority="interactive")
        ms = (time.perf_counter() - started) * 1000
        assert result.status == "ok", result.error
        wall.append(ms)
        added.append(ms - result.timings.inference_ms)
    return {k: (np.percentile(v, 50), np.percentile(v, 99))
            for k, v in (("client wall", wall), ("added over inference", added))}


async def measure(stack: DevStack, broker: LocalBroker) -> None:
    pids = {"broker": broker.pid()} | {
        " ".join(a for a in p.args[3:] if a != "--model"): p.pid for p in stack.procs}
    pids["client"] = os.getpid()
    key = ensure_dev_access(stack.access_file).keys[DEV_KEY_ID]
    async with KipClient(stack.bootstrap, tenant=key.tenant, key_id=DEV_KEY_ID,
                         secret=key.secret.get_secret_value(),
                         topic_prefix=stack.prefix) as kip:
        for model, inputs in (("digits", {"pixels": np.zeros((1, 64), np.float32)}),
                              ("minilm", {"text": ["warm"]})):
            assert (await kip.infer(model, inputs, timeout_s=120)).status == "ok"
        for _ in range(10):   # 30,000 in rounds of (a)'s 3,000, as kip bench cost warms up
            await in_flight(kip, pids, 3000, 1, require_ok=False)
        for title, count, rows in (("(a) single row, CPU µs per request", 3000, 1),
                                   ("(b) 32 rows, CPU µs per row", 1000, 32)):
            spent = await in_flight(kip, pids, count, rows)
            print(f"{title} ({spent.pop('per_s'):.0f} requests/s):")
            print("  " + "  ".join(f"{n} {us / rows:.1f}" for n, us in spent.items()))
        print("(c) interactive MiniLM one at a time, ms (p50, p99):")
        for name, (p50, p99) in (await sequential(kip, 200, 2500)).items():
            print(f"  {name}: {p50:.1f}, {p99:.1f}")


def main() -> int:
    kip.broker.JVM_OPTIONS = [o for o in kip.broker.JVM_OPTIONS   # C2 too, as kip bench
                              if not o.startswith("-XX:TieredStopAtLevel")]   # cost's broker
    with tempfile.TemporaryDirectory(prefix="kip-then-") as tmp:
        broker = LocalBroker(Path(tmp) / "kafka", port=free_port(), controller_port=free_port())
        broker.start(log=lambda *_: None)
        stack = DevStack(home=Path(tmp), bootstrap_servers=broker.bootstrap, prefix="then",
                         registry_dir=Path(os.environ["KIP_REGISTRY_DIR"]),
                         metrics_base_port=0)
        try:
            stack.prepare(log=lambda *_: None)
            stack.start_services(log=lambda *_: None)
            asyncio.run(measure(stack, broker))
        except BaseException:
            for path in stack.logs.values():   # why the stack of then did not answer
                print(f"--- {path}", *path.read_text().splitlines()[-8:], sep="\n")
            raise
        finally:
            stack.stop_services()
            broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

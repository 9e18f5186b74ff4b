"""``kip bench rollout``: a staged release on a kip of its own, under interactive traffic.

A second version of ``--model`` (digits or minilm: the same graph under another doc
string, so another digest) is published and signed. While interactive requests run at
``--interactive-rate``:

1. steady: interactive latency before any change;
2. ``kip rollout start MODEL <v2> --canary 10``: for 5 s only interactive requests,
   while the worker loads v2 (ahead of its first request, workers/preload.py); then
   ``--requests`` standard requests, 500 in flight, counted by the version that served
   them (every result names version and digest, checked against the registry);
3. ``kip rollout promote MODEL``: 5 s, then ``--after`` requests, all v2;
4. ``kip rollout rollback MODEL``: 5 s, then ``--after`` requests, all v1.

Prints the canary's share, failed and lost requests in each phase (interactive ones
throughout), and interactive p99 steady against the 5 s after each change. The verdict
holds the canary's share to 10% +/- 1.5%, every request to ok with the right digest,
promote and rollback to one version each, and the p99 of the 5 s after the start (v2's
cold load) to at most twice the steady p99.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from kip.devkit import arguments
from kip.devkit.bursts import (INPUTS, Interactive, burst_from_child, bursts_reply_topic,
                               start_interactive)
from kip.devkit.stack import DevStack, dev_client, dev_spec
from kip.devkit.own_stack import own_stack
from kip.runtime.settings import KipSettings

CHANGE_WINDOW_S = 5.0


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", choices=sorted(INPUTS), default="digits")
    p.add_argument("--requests", type=arguments.count, default=10_000, help="during the 90/10 canary")
    p.add_argument("--after", type=arguments.count, default=1_000, help="after promote, after rollback")
    p.add_argument("--interactive-rate", type=arguments.above_zero, default=20.0, help="requests/s")
    p.add_argument("--steady-s", type=arguments.above_zero, default=20.0)
    p.add_argument("--registry", type=Path, default=KipSettings().registry_dir)


def run(args) -> int:
    report = asyncio.run(measure(args))
    print(render(report))
    return 0 if report["passed"] else 1


async def measure(args) -> dict:
    async with own_stack("rollout", args.registry, log=_quiet) as stack:
        model, inputs = args.model, INPUTS[args.model]
        v1, v2 = stack.registry.resolve(model).manifest, _second_version(stack, model)
        stack.start_services(log=_quiet)
        digests = {v.version: v.artifact_sha256 for v in (v1, v2)}
        bursts = dev_spec(stack, await bursts_reply_topic(stack))
        async with dev_client(stack) as kip:
            interactive, ticker = await start_interactive(kip, args.interactive_rate, model,
                                                          inputs)
            await asyncio.sleep(args.steady_s)
            phases = {}
            for name, command, count in (
                    ("canary", ["start", model, f"{model}@{v2.version}", "--canary", "10"],
                     args.requests), ("promote", ["promote", model], args.after),
                    ("rollback", ["rollback", model], args.after)):
                interactive.mark(name)   # measured: the change, and v2's cold load
                await asyncio.to_thread(_rollout, stack, command)   # the loop keeps going
                await asyncio.sleep(CHANGE_WINDOW_S)
                interactive.mark(f"{name}: burst")   # counted, not measured
                phases[name] = await burst_from_child(bursts, model, inputs, count, digests)
            ticker.cancel()
            await interactive.drain()
    return _report(phases, interactive, v1.version, v2.version)


def _second_version(stack: DevStack, model: str):
    """``model``'s graph under another doc string: another digest, same answers (and the
    same extra files); signed."""
    import onnx

    first = stack.registry.resolve(model)
    graph = onnx.load(str(first.artifact))
    graph.doc_string = "kip bench rollout: the second version"
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "model.onnx"
        onnx.save(graph, str(path))
        files = {name: first.file(name) for name in first.manifest.files_sha256}
        mv = stack.registry.publish(path, first.manifest.model_dump(
            exclude={"version", "artifact_sha256", "files_sha256"}), files)
    stack.sign_models([f"{model}@{mv.manifest.version}"])
    return mv.manifest


def _rollout(stack: DevStack, command: list[str]) -> None:
    """The operator's command, at nice 10: it stands in for a workstation, and its start
    (a Python process's start) would otherwise be charged to the interactive requests measured."""
    out = subprocess.run([sys.executable, "-m", "kip.cli", "rollout", *command],
                         env=stack.env(), capture_output=True, text=True, check=True,
                         preexec_fn=lambda: os.nice(10))
    print(f"kip rollout {' '.join(command)}: {out.stdout.strip()}", file=sys.stderr)


def _report(phases: dict, interactive: Interactive, v1: str, v2: str) -> dict:
    p99 = {phase: float(np.percentile(v, 99)) for phase, v in interactive.latencies.items()
           if v and ":" not in phase}
    canary = phases["canary"]
    served = sum(canary["by_version"].values())
    share = canary["by_version"].get(v2, 0) / served if served else 0.0
    passed = (abs(share - 0.10) <= 0.015 and interactive.failed == 0
              and all(p["failed"] == p["lost"] == p["misnamed"] == 0 for p in phases.values())
              and phases["promote"]["by_version"] == {v2: sum(phases["promote"]["by_version"]
                                                             .values())}
              and phases["rollback"]["by_version"] == {v1: sum(phases["rollback"]["by_version"]
                                                              .values())}
              and p99["canary"] <= 2 * p99["steady"])   # the cold load's window
    return {"phases": phases, "canary_share": share, "v1": v1, "v2": v2,
            "interactive_p99_ms": p99, "interactive_failed": interactive.failed,
            "interactive_requests": {k: len(v) for k, v in interactive.latencies.items()},
            "passed": passed}


def render(r: dict) -> str:
    lines = [f"versions: v1 {r['v1']}, v2 {r['v2']}"]
    for name, p in r["phases"].items():
        lines.append(f"{name:9} served by version {p['by_version']}; failed {p['failed']} "
                     f"{p['codes'] or ''}, lost {p['lost']}, naming the wrong digest "
                     f"{p['misnamed']}")
    lines.append(f"canary share during the 90/10 split: {r['canary_share']:.2%} "
                 "(target 10% +/- 1.5%)")
    p99 = r["interactive_p99_ms"]
    lines.append("interactive p99 (ms): " + ", ".join(
        f"{k} {v:.1f} ({r['interactive_requests'][k]} requests)" for k, v in p99.items())
        + f"; failed {r['interactive_failed']}")
    lines.append(f"verdict: {'PASS' if r['passed'] else 'FAIL'}")
    return "\n".join(lines)


def _quiet(*_) -> None:
    pass


"""``kip bench burst``: interactive latency while bursts of standard requests are all in
flight, against the same interactive traffic before them.

On a kip of its own: interactive ``--model`` requests at ``--interactive-rate`` for
``--steady-s`` seconds, then ``--bursts`` bursts of ``--requests`` standard requests,
``--in-flight`` at a time (by default all of them: an offline job that publishes a
chunk and waits), each sent from a process of its own, with ``--pause-s`` between.
Prints interactive p50/p99, and the pipeline's share (admission: issued to routed),
steady and during the bursts, with the ratios; the verdict holds interactive p50 during
the bursts to at most twice steady. ``--one-pipeline`` runs a single pipeline for every
class (``kip up``'s way) instead of the pair docker-compose.yml runs.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

import numpy as np

from kip.devkit.arguments import above_zero, count, zero_or_above, zero_or_more
from kip.devkit.bursts import (INPUTS, Interactive, burst_from_child, bursts_reply_topic,
                               start_interactive)
from kip.devkit.stack import dev_client, dev_spec
from kip.devkit.own_stack import own_stack
from kip.runtime.settings import KipSettings


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", choices=sorted(INPUTS), default="digits")
    p.add_argument("--requests", type=count, default=5_000, help="standard requests a burst")
    p.add_argument("--in-flight", type=zero_or_more, default=0, help="at a time (0: all)")
    p.add_argument("--bursts", type=count, default=2)
    p.add_argument("--pause-s", type=zero_or_above, default=5.0, help="between bursts")
    p.add_argument("--interactive-rate", type=above_zero, default=20.0, help="requests/s")
    p.add_argument("--steady-s", type=above_zero, default=10.0)
    p.add_argument("--one-pipeline", dest="split_pipeline", action="store_false",
                   help="one pipeline for every class instead of two")
    p.add_argument("--registry", type=Path, default=KipSettings().registry_dir)


def run(args) -> int:
    if args.requests < 1 or args.bursts < 1 or args.in_flight < 0:
        print("kip bench burst: --requests and --bursts need at least 1, --in-flight at "
              "least 0 (0: all of a burst at once)", file=sys.stderr)
        return 2
    report = asyncio.run(measure(args))
    print(render(report))
    return 0 if report["passed"] else 1


async def measure(args) -> dict:
    model, inputs = args.model, INPUTS[args.model]
    in_flight = args.in_flight or args.requests
    async with own_stack("burst", args.registry, split_pipeline=args.split_pipeline,
                         log=_quiet) as stack:
        stack.start_services(log=_quiet)
        bursts_spec = dev_spec(stack, await bursts_reply_topic(stack))
        async with dev_client(stack) as kip:
            interactive, ticker = await start_interactive(kip, args.interactive_rate, model,
                                                          inputs)
            await asyncio.sleep(args.steady_s)
            bursts = []
            for _ in range(args.bursts):
                interactive.mark("burst")
                bursts.append(await burst_from_child(bursts_spec, model, inputs,
                                                     args.requests, {}, in_flight))
                interactive.mark("pause")
                await asyncio.sleep(args.pause_s)
            ticker.cancel()
            await interactive.drain()
    return _report(args, bursts, interactive)


def _report(args, bursts: list[dict], interactive: Interactive) -> dict:
    figures = {phase: {"requests": len(interactive.latencies[phase]),
                       "p50_ms": _pct(interactive.latencies[phase], 50),
                       "p99_ms": _pct(interactive.latencies[phase], 99),
                       "admission_p50_ms": _pct(interactive.admission[phase], 50)}
               for phase in ("steady", "burst")}
    ratio = {k: figures["burst"][k] / figures["steady"][k] if figures["steady"][k] else None
             for k in ("p50_ms", "p99_ms")}
    ok = all(b["failed"] == b["lost"] == 0 for b in bursts) and interactive.failed == 0
    return {"pipelines": "two" if args.split_pipeline else "one",
            "bursts": [{k: b[k] for k in ("failed", "lost", "seconds")} for b in bursts],
            "burst_requests": args.requests, "interactive": figures, "ratio": ratio,
            "interactive_failed": interactive.failed,
            "passed": ok and ratio["p50_ms"] is not None and ratio["p50_ms"] <= 2.0}


def _pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def render(r: dict) -> str:
    lines = [f"pipelines: {r['pipelines']}; bursts of {r['burst_requests']} standard "
             "requests: " + ", ".join(f"{b['seconds']:.1f} s ({b['failed']} failed, "
                                      f"{b['lost']} lost)" for b in r["bursts"])]
    for phase, f in r["interactive"].items():
        lines.append(f"interactive {phase:6} {f['requests']:4d} requests: p50 "
                     f"{f['p50_ms']:7.1f} ms  p99 {f['p99_ms']:7.1f} ms  admission p50 "
                     f"{f['admission_p50_ms']:7.1f} ms")
    ratio = r["ratio"]
    lines.append(f"during bursts / steady: p50 {ratio['p50_ms']:.2f}x, p99 "
                 f"{ratio['p99_ms']:.2f}x; interactive failed {r['interactive_failed']}")
    lines.append(f"verdict: {'PASS' if r['passed'] else 'FAIL'} (p50 at most 2x steady, "
                 "nothing failed or lost)")
    return "\n".join(lines)


def _quiet(*_) -> None:
    pass

"""``kip bench cost --brokers 3``: what replication costs, beside one broker, in one run.

Two kips of their own, one after the other, on the same machine: one on a single broker
(replication factor 1), one on a cluster of ``brokers`` (3 copies, 2 in sync). Each is
warmed up the same way, then measured as ``kip bench cost`` measures (a) and (c): the
CPU per single-row digits request of every process, each broker included, all in
flight; and interactive MiniLM requests one at a time, their client wall time and what
kip adds over inference. The report sets the cluster's figures beside the single
broker's, with their ratio.
"""

from __future__ import annotations

import sys

from kip.devkit.bench_cost import (RawDigits, all_in_flight, sequential, stack_pids,
                                   warm_up_models, warm_up_rounds)
from kip.devkit.cluster import LocalCluster
from kip.devkit.own_stack import own_stack
from kip.devkit.stack import DevStack, dev_client


async def measure_replication(args) -> dict:
    return {f"{n} broker{'s' if n > 1 else ''}": await measure_one(args, n)
            for n in (1, args.brokers)}


async def measure_one(args, brokers: int = 1, env: dict | None = None) -> dict:
    """(a) and (c) on a kip of its own of ``brokers`` brokers, its services started with
    ``env`` added, after the warm-up ``args`` asks for."""
    print(f"on {brokers} broker(s): warming up ({args.warm_up} single-row requests)",
          file=sys.stderr, flush=True)
    async with own_stack("cost", args.registry, bus=args.bus, log=lambda *_: None,
                         steady_state=True, brokers=brokers) as stack:
        stack.worker_env |= env or {}
        stack.start_services(log=lambda *_: None)
        pids = stack_pids(stack)
        raw = RawDigits(stack)
        async with dev_client(stack) as kip:
            await warm_up_models(kip)
            for count in warm_up_rounds(args.warm_up, args.requests):
                await all_in_flight(kip, pids, raw, count, 1)
            a = await all_in_flight(kip, pids, raw, args.requests, 1)
            c, c_cpu = await sequential(kip, stack, args.sequential, pids,
                                        args.sequential_warm_up)
    return {"replication": stack_replication(stack), "a_single_row": a,
            "c_sequential": c, "c_cpu_us_per_request": c_cpu}


def stack_replication(stack: DevStack) -> str:
    kafka = stack.own_broker
    r = kafka.replication if isinstance(kafka, LocalCluster) else None
    return f"factor {r.factor}, min ISR {r.min_insync}" if r else "factor 1, min ISR 1"


def render_replication(report: dict) -> str:
    (one_name, one), (many_name, many) = report.items()
    return render_beside(report, f"replication: {one_name} ({one['replication']}) beside "
                                 f"{many_name} ({many['replication']}), one run")


def render_beside(report: dict, heading: str) -> str:
    """Two runs of (a) and (c), the second's figures beside the first's, with ratios."""
    (one_name, one), (many_name, many) = report.items()
    lines = [heading]
    a1, an = one["a_single_row"], many["a_single_row"]
    lines.append(f"\n(a) single-row requests, all in flight: {a1['requests_per_s']:.0f}/s "
                 f"beside {an['requests_per_s']:.0f}/s")
    lines.append(f"  {'process':16} {one_name:>12} {many_name:>12} {'ratio':>7}")
    lines += _cpu_rows(a1["cpu_us_per_request"], an["cpu_us_per_request"])
    lines.append("\n(c) interactive MiniLM, one at a time (ms):")
    for stage in ("client_wall", "added_over_inference", "admission", "transport",
                  "commit_and_return"):
        s1, sn = one["c_sequential"][stage], many["c_sequential"][stage]
        lines.append(f"  {stage:22} p50 {s1['p50_ms']:6.1f} beside {sn['p50_ms']:6.1f} "
                     f"({_ratio(sn['p50_ms'], s1['p50_ms'])}); p99 {s1['p99_ms']:6.1f} "
                     f"beside {sn['p99_ms']:6.1f} ({_ratio(sn['p99_ms'], s1['p99_ms'])})")
    lines.append("  CPU µs per request:")
    lines += _cpu_rows(one["c_cpu_us_per_request"], many["c_cpu_us_per_request"])
    return "\n".join(lines)


def _cpu_rows(one: dict[str, float], many: dict[str, float]) -> list[str]:
    """Each process's CPU µs per request on one broker and on the cluster; the brokers
    summed, and every process summed, with their ratio."""
    rows = []
    names = [n for n in many if n != "all"] + [n for n in one if n not in many]
    for name in names:
        rows.append(f"  {name:16} {_us(one.get(name)):>12} {_us(many.get(name)):>12}")
    brokers_one = sum(us for n, us in one.items() if n.startswith("broker"))
    brokers_many = sum(us for n, us in many.items() if n.startswith("broker"))
    rows.append(f"  {'brokers, summed':16} {brokers_one:12.0f} {brokers_many:12.0f} "
                f"{_ratio(brokers_many, brokers_one):>7}")
    all_one = sum(us for n, us in one.items() if n != "all")
    all_many = sum(us for n, us in many.items() if n != "all")
    rows.append(f"  {'all':16} {all_one:12.0f} {all_many:12.0f} "
                f"{_ratio(all_many, all_one):>7}")
    return rows


def _us(value: float | None) -> str:
    return "" if value is None else f"{value:.0f}"


def _ratio(value: float, base: float) -> str:
    return f"{value / base:.2f}x" if base else "n/a"

"""``kip bench load``: open-loop load against a kip of its own, per-class figures.

Three modes, each on a fresh broker, pipeline and workers on this machine:

- default (the overload scenario): measure capacity for the scenario's mix (a closed
  loop of batch requests beside the interactive rate), measure interactive latency
  alone, then offer interactive plus batch at ``--overload`` times capacity for
  ``--duration`` seconds and check the targets of issue 3;
- ``--rate interactive=20 --rate batch=400``: offer exactly these rates;
- ``--sweep``: raise the batch rate step by step and report the knee, the offered rate at
  which controlled rejection begins.

Offered batch load comes from a child process at a lower OS priority, with a reply topic
of its own (``devkit/loadproc.py``); capacity and the other classes come from this one.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
from contextlib import asynccontextmanager
from pathlib import Path

import numpy as np

from kip.devkit.arguments import above_zero, count
from kip.devkit.broker import LocalBroker
from kip.devkit.loadgen import LoadReport, closed_loop_capacity, run_load
from kip.devkit.loadproc import offer_from_child
from kip.devkit.stack import ClientSpec, DevStack, dev_client, dev_spec
from kip.devkit.own_stack import own_stack
from kip.client import KipClient
from kip.runtime.settings import KipSettings
from kip.schemas.codec import now_ms
from kip.schemas.messages import Priority, Status
from kip.transport.admin import apply
from kip.topics.catalogue import reply_topic

DEADLINES_MS = {Priority.INTERACTIVE: 1_000, Priority.STANDARD: 5_000, Priority.BATCH: 10_000}
# Batch requests kept in flight to measure capacity: enough that the workers' queue never
# runs dry while a pipeline round (up to 200 ms for batch) and its transaction are under
# way, or the capacity reference reads low (docs/benchmarks.md).
IN_FLIGHT = 1024
# The batch load's child process needs a few seconds to import and connect; both
# processes start offering this long after the window is set.
CHILD_LEAD_MS = 8_000


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="minilm")
    p.add_argument("--duration", type=above_zero, default=60.0, help="seconds of offered load")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--rate", action="append", default=[], type=class_rate,
                   metavar="CLASS=RPS", help="offer this rate for a class, e.g. batch=400 "
                   "(repeat for several classes)")
    p.add_argument("--interactive-rate", type=above_zero, default=10.0)
    p.add_argument("--overload", type=above_zero, default=3.0, help="batch rate / capacity")
    p.add_argument("--sweep", action="store_true")
    p.add_argument("--registry", type=Path, default=KipSettings().registry_dir,
                   help="registry with the reference models (default $KIP_REGISTRY_DIR)")
    p.add_argument("--background-max-batch", type=count, default=None,
                   help="at most this many batch-class requests per inference call "
                   "(default: the worker's)")
    p.add_argument("--no-pin", dest="pin", action="store_false",
                   help="do not pin workers to their own CPU (by default the last CPU runs "
                   "the workers and the others run broker, pipeline and load generator, "
                   "standing in for a separate GPU host)")
    p.add_argument("--batch-load-nice", type=nice_level, default=19, metavar="0-19",
                   help="OS priority (nice) of the process that offers batch load; it "
                   "stands in for offline jobs on other hosts, so by default it yields "
                   "the CPU to the broker and to admission, the standard/batch pipeline "
                   "included, which runs at nice 19 (0: the broker's priority)")
    p.add_argument("--one-pipeline", dest="split_pipeline", action="store_false",
                   help="one pipeline process for all classes (by default interactive has "
                   "its own, and standard/batch admission runs at nice 19)")
    p.add_argument("--worker-threads", type=count, default=1,
                   help="ONNX Runtime threads in the worker (1 leaves a core to the pipeline "
                   "and broker when everything shares one small machine)")


def class_rate(text: str) -> tuple[Priority, float]:
    """``CLASS=RPS`` from the command line, checked before anything starts."""
    name, _, rate = text.partition("=")
    try:
        priority, rps = Priority(name), float(rate)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected CLASS=RPS with CLASS one of "
            f"{', '.join(p.value for p in Priority)}, e.g. batch=400") from None
    if rps <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: the rate must be above 0")
    return priority, rps


def nice_level(text: str) -> int:
    """A nice value that any user may set: 0 (unchanged) to 19 (lowest priority)."""
    if not text.isdigit() or int(text) > 19:
        raise argparse.ArgumentTypeError(f"{text!r}: expected 0 to 19 (a lower priority "
                                         "than the bench's own; raising it needs root)")
    return int(text)


def run(args) -> int:
    return asyncio.run(_main(args))


async def _main(args) -> int:
    async with _stack(args.registry, args.worker_threads, args.background_max_batch,
                      args.split_pipeline,
                      args.pin and len(os.sched_getaffinity(0)) >= 2) as clients:
        if args.rate:
            rates = dict(args.rate)
            print_report(await _offer(clients, args, rates, args.duration), "offered load")
            return 0
        if args.sweep:
            return await _sweep(clients, args)
        return await _overload_scenario(clients, args)


@dataclasses.dataclass(frozen=True)
class Clients:
    """The bench's own client (capacity, interactive load) and what the batch load's
    child process needs to open its own."""

    here: KipClient
    batch: ClientSpec


@asynccontextmanager
async def _stack(registry: Path, threads: int, background: int, split: bool, pin: bool):
    worker_env = {"KIP_MAX_BATCH": "32", "KIP_MAX_DELAY_MS": "5",
                  "KIP_INTRA_OP_THREADS": str(threads)}
    if background is not None:
        worker_env["KIP_BACKGROUND_MAX_BATCH"] = str(background)
    async with own_stack("load", registry, worker_env, split) as stack:
        batch_reply = await _reply_topic(stack, f"{dev_spec(stack).tenant}.batch-load")
        stack.start_services()
        if pin:
            _pin_processes(stack, stack.broker)
        batch = dev_spec(stack, batch_reply)
        async with dev_client(stack) as client:
            await _warm_up(client, stack)
            await asyncio.sleep(2)   # a first telemetry report reaches the pipeline
            yield Clients(client, batch)


async def _reply_topic(stack: DevStack, suffix: str) -> str:
    spec = reply_topic(stack.names, suffix, purpose="the bench's batch load")
    await apply(stack.kafka, [spec])
    return spec.name


async def _warm_up(client: KipClient, stack: DevStack) -> None:
    """One answered request, or a clear error: which service died, and its log."""
    try:
        await client.infer("minilm", {"text": ["warm-up"]}, priority="batch", timeout_s=120,
                           retry_s=120)
    except asyncio.TimeoutError:
        stack.check_services()
        raise RuntimeError("no answer to a warm-up request within 120 s") from None


def _pin_processes(stack: DevStack, broker: LocalBroker) -> None:
    """Workers on the last CPU, everything else on the others: the last CPU stands in
    for a GPU host of their own, so admission, the broker and the load generator do not
    take the workers' device time (docs/architecture.md, "The local broker and the benches")."""
    cpus = sorted(os.sched_getaffinity(0))
    worker_cpu, rest = {cpus[-1]}, set(cpus[:-1])
    for proc in stack.procs:
        _set_affinity(proc.pid, worker_cpu if "worker" in proc.args else rest)
    _set_affinity(broker.pid(), rest)
    _set_affinity(os.getpid(), rest)
    print(f"pinned: workers on CPU {cpus[-1]}; broker, pipeline and load generator on "
          f"CPU {','.join(map(str, sorted(rest)))}", flush=True)


def _set_affinity(pid: int | None, cpus: set[int]) -> None:
    """Every thread of ``pid`` (threads started later inherit from their creator)."""
    if pid is None:
        return
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            os.sched_setaffinity(int(task.name), cpus)
        except OSError:
            pass


async def _offer(clients: Clients, args, rates: dict, duration: float) -> LoadReport:
    """Batch load from a child process (``devkit/loadproc.py``), the other classes from
    this one, over the same window."""
    described = ", ".join(f"{p.value} {r:.0f}/s" for p, r in rates.items())
    print(f"offering {described} for {duration:.0f}s ...", flush=True)
    start_at = now_ms() + (CHILD_LEAD_MS if Priority.BATCH in rates else 0)
    here = {p: r for p, r in rates.items() if p != Priority.BATCH}
    offers = [run_load(clients.here, args.model, here, duration, DEADLINES_MS, args.seed,
                       start_at_ms=start_at)] if here else []
    if Priority.BATCH in rates:
        offers.append(offer_from_child(
            clients.batch, args.batch_load_nice, args.model,
            {Priority.BATCH: rates[Priority.BATCH]}, duration, DEADLINES_MS, args.seed + 1,
            start_at))
    reports = await asyncio.gather(*offers)
    merged = reports[0]
    for report in reports[1:]:
        merged = merged.merge(report)
    return merged


async def _overload_scenario(clients: Clients, args) -> int:
    """Warm up, capacity, interactive alone, overload, capacity again. Capacity is the
    mean of the measurements before and after the overload window: this machine's
    speed drifts by several percent from minute to minute, and measuring on both
    sides keeps that drift from landing on one side of the goodput ratio."""
    print("warming up (not measured): the broker's JIT and the workers' caches ...",
          flush=True)
    await _mixed_capacity(clients.here, args, 15)
    # Two windows of 30 s, before and after: one short window varies too much from
    # minute to minute on a shared machine to hold a 90% line against.
    before = await _mixed_capacity(clients.here, args, 30)
    # As long as the mixed window, so both p99s come from as many requests.
    alone = await _offer(clients, args, {Priority.INTERACTIVE: args.interactive_rate},
                         args.duration)
    print_report(alone, "interactive alone")
    rates = {Priority.INTERACTIVE: args.interactive_rate,
             Priority.BATCH: args.overload * before}
    mixed = await _offer(clients, args, rates, args.duration)
    print_report(mixed, f"interactive + batch at {args.overload:.1f}x capacity")
    after = await _mixed_capacity(clients.here, args, 30)
    capacity = (before + after) / 2
    print(f"capacity: {before:.1f}/s before, {after:.1f}/s after; mean {capacity:.1f}/s")
    return _verdict(capacity, alone, mixed)


async def _mixed_capacity(client: KipClient, args, duration_s: float) -> float:
    """ok results/s for the scenario's own mix without overload: interactive at its rate
    beside a closed loop of batch requests (``IN_FLIGHT``) that keeps the workers busy.
    The same mix as under overload, so the goodput ratio measures what overload costs,
    not what serving interactive requests one at a time costs (an unbatched request
    takes the worker several times as long as one in a full batch)."""
    print(f"capacity: batch closed loop ({IN_FLIGHT} in flight) beside interactive "
          f"{args.interactive_rate:.0f}/s, {duration_s:.0f}s ...", flush=True)
    interactive = {Priority.INTERACTIVE: args.interactive_rate}
    batch, beside = await asyncio.gather(
        closed_loop_capacity(client, args.model, Priority.BATCH, IN_FLIGHT, duration_s),
        run_load(client, args.model, interactive, duration_s, DEADLINES_MS, args.seed + 100))
    served = beside.goodput(Priority.INTERACTIVE)
    print(f"  capacity {batch + served:.1f} requests/s (batch {batch:.1f}, interactive "
          f"{served:.1f})")
    return batch + served


def _verdict(capacity: float, alone: LoadReport, mixed: LoadReport) -> int:
    offered = sum(s.offered for s in mixed.classes.values())
    answered = sum(len(s.results) for s in mixed.classes.values())
    late = sum(s.late_inferences for s in mixed.classes.values())
    goodput = sum(mixed.goodput(p) for p in mixed.classes)
    p99_alone = np.nanpercentile(alone.classes[Priority.INTERACTIVE].latencies(), 99)
    p99_mixed = np.nanpercentile(mixed.classes[Priority.INTERACTIVE].latencies(), 99)
    checks = [
        (f"terminal results {answered}/{offered}, duplicates {mixed.duplicates}",
         answered == offered and mixed.duplicates == 0),
        (f"inferences started after their deadline: {late}", late == 0),
        (f"goodput {goodput:.1f}/s = {goodput / capacity:.0%} of capacity {capacity:.1f}/s "
         "(target >= 90%)", goodput >= 0.9 * capacity),
        (f"interactive p99 {p99_mixed:.0f} ms vs {p99_alone:.0f} ms alone = "
         f"{p99_mixed / p99_alone:.2f}x (target <= 2x)", p99_mixed <= 2 * p99_alone),
    ]
    print("\nverdict:")
    for text, ok in checks:
        print(f"  [{'pass' if ok else 'FAIL'}] {text}")
    return 0 if all(ok for _, ok in checks) else 1


async def _sweep(clients: Clients, args) -> int:
    capacity = await closed_loop_capacity(clients.here, args.model, Priority.BATCH,
                                          IN_FLIGHT, 15)
    # A step shorter than a few batch deadlines ends before its queue does: rejection
    # would show up a step late and the knee would read too high.
    step_s = max(args.duration, 3 * DEADLINES_MS[Priority.BATCH] / 1000)
    print(f"capacity {capacity:.1f} requests/s; sweeping the batch rate in steps of "
          f"{step_s:.0f}s", flush=True)
    knee = None
    print(f"{'offered/s':>10} {'ok/s':>8} {'rejected':>9} {'expired':>8}")
    for factor in (0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 3.0):
        rate = factor * capacity
        report = await _offer(clients, args, {Priority.BATCH: rate}, step_s)
        stats = report.classes[Priority.BATCH]
        rejected = stats.count(Status.REJECTED) / max(1, stats.offered)
        print(f"{rate:10.1f} {report.goodput(Priority.BATCH):8.1f} {rejected:9.1%} "
              f"{stats.count(Status.EXPIRED):8d}", flush=True)
        if knee is None and rejected > 0.01:
            knee = rate
    print(f"knee: controlled rejection begins at ~{knee:.0f} requests/s offered"
          if knee else "knee: not reached")
    return 0


def print_report(report: LoadReport, title: str) -> None:
    print(f"\n{title} ({report.duration_s:.0f}s):")
    print(f"  {'class':12} {'offered':>8} {'ok':>7} {'rejected (by reason)':>34} "
          f"{'expired':>8} {'failed':>7} {'goodput/s':>10} {'p50':>7} {'p95':>7} {'p99':>7}")
    for priority, s in report.classes.items():
        lat = s.latencies()
        reasons = ", ".join(f"{code} {n}" for code, n in s.codes().most_common()) or "0"
        print(f"  {priority.value:12} {s.offered:8d} {len(s.ok()):7d} {reasons:>34} "
              f"{s.count(Status.EXPIRED):8d} {s.count(Status.FAILED):7d} "
              f"{report.goodput(priority):10.1f} "
              + " ".join(f"{np.nanpercentile(lat, q):7.0f}" for q in (50, 95, 99)))
        if s.unanswered:
            print(f"  {'':12} {s.unanswered} requests got no result")
    for priority, s in report.classes.items():
        ok = s.ok()
        if ok:
            print(f"  {priority.value}: where an ok request's time went (mean ms) - "
                  + stage_breakdown(ok))
            slowest = sorted(ok, key=lambda r: r.timings.total_ms)[-max(1, len(ok) // 100):]
            print(f"  {priority.value}, slowest 1% ({len(slowest)}) - "
                  + stage_breakdown(slowest))


def stage_breakdown(ok: list) -> str:
    """The worker's timings: admission runs from the client's issue to the pipeline's
    routing, the worker queue from there to the worker's pull (the pipeline's commit and
    the worker's fetch included), and total to the result's building."""
    t = [r.timings for r in ok]
    admission = np.mean([x.admission_ms or 0 for x in t])
    queue = np.mean([x.queue_ms or 0 for x in t])
    wait = np.mean([x.batch_wait_ms or 0 for x in t])
    infer = np.mean([x.inference_ms or 0 for x in t])
    total = np.mean([x.total_ms for x in t])
    return (f"admission {admission:.0f}, worker queue {queue:.0f}, batch wait {wait:.0f}, "
            f"inference {infer:.0f}, total {total:.0f}")

"""Scale out and in under load (``kip bench scale``): digits workers 1 -> 3 -> 1 while a
steady load of about twice one worker's capacity runs, each worker a static member with
a CPU limit of its own (devkit/scale_workers.py).

It measures one worker's capacity first (a backlog drained by it alone), then sends
standard requests at ``load`` times that and interactive ones at a steady trickle, and
every ``phase_s``: a worker joins, another joins, one is killed and started again at
once (inside its session timeout), one leaves with SIGTERM, another leaves. Then it
stops sending and reads until every request is answered.

Per event: how long the groups stopped consuming (the longest rebalance pause of any
member, revocation to assignment, from the workers' ``kip_rebalance_pause_seconds``),
how long the partitions that moved waited on top of it to be taken over
(``kip_partitions_takeover_seconds``: producers built, answered ids read back), the
longest gap between two results of each class, the interactive p99 of the requests sent
in the 10 s after it, the backlog (sent and not answered) when it began, and for the
restart the partitions any rebalance took from the other workers. Pass: 0 lost, 0
duplicated, each join stops the groups at most ``--join-budget-s`` (3 s), a SIGTERM
leave at most ``--leave-budget-s`` (1 s), the restart revokes nothing, and the backlog
built by one worker is gone before the first leave.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import shutil
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from kip.devkit import arguments
from kip.devkit.faults_report import leftover_records
from kip.devkit.loadgen import sentences
from kip.devkit.result_log import ResultLog
from kip.devkit.own_stack import own_stack
from kip.devkit.scale_workers import REBALANCE_HISTOGRAMS, Workers
from kip.devkit.stack import dev_client
from kip.runtime.settings import KipSettings
from kip.schemas.messages import Priority

EVENTS = (("join", "w2"), ("join", "w3"), ("restart", "w2"), ("leave", "w3"),
          ("leave", "w2"))
AFTER_S = 10.0   # the interactive p99 after an event covers this long
DEADLINE_MS = 30 * 60_000
TEXTS = sentences(512)


@dataclass
class Event:
    kind: str
    worker: str
    at: float                 # wall clock, s
    took_s: float = 0.0       # to serve (join, restart) or to exit (leave)
    backlog: int = 0
    revoked: float = 0.0      # restart: partitions rebalances took from the others
    stops_s: dict[str, float] = field(default_factory=dict)   # class -> longest gap
    pause_s: float = float("nan")      # the longest rebalance pause of any member
    takeover_s: float = float("nan")   # the longest wait of partitions that moved
    rebalances: list = field(default_factory=list)   # Workers.rebalances, before and after
    waiting: dict[str, int] = field(default_factory=dict)   # records past each group's offset
    interactive_p99_ms: float = float("nan")


@dataclass
class Sending:
    sent_at: dict[str, float] = field(default_factory=dict)   # id -> wall clock, s
    classes: dict[str, Priority] = field(default_factory=dict)
    deliveries: list = field(default_factory=list)


async def measure(args) -> dict:
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    env = {"KIP_INTRA_OP_THREADS": "1", "KIP_BACKGROUND_PULL": str(args.background_pull),
           "KIP_INTERACTIVE_SESSION_TIMEOUT_MS": str(args.session_timeout_ms),
           "KIP_SESSION_TIMEOUT_MS": str(args.session_timeout_ms)}
    async with own_stack("scale", args.registry, env, log=_quiet) as stack:
        stack.procs.append(stack.spawn(["pipeline"], log=_quiet))
        workers = Workers(stack, args.worker_cpus, args.model)
        try:
            await workers.start("w1")
            async with dev_client(stack) as client:
                return await _measured(args, stack, workers, client)
        finally:
            workers.stop_all()
            if args.keep_logs:
                _keep_logs(stack.home, args.keep_logs)


async def _measured(args, stack, workers: Workers, client) -> dict:
    tally = ResultLog(stack.kafka, [stack.names.results,
                                    stack.names.reply_topic(client.tenant)])
    await tally.start()
    reading = asyncio.create_task(_follow(tally))
    try:
        capacity = await _capacity(client, tally, args.capacity_requests, args.model)
        rate = capacity * args.load
        sending = Sending()
        sender = asyncio.create_task(_send(client, sending, rate, args))
        events = await _events(args, workers, tally, sending)
        await sender
        for delivery in sending.deliveries:
            await delivery
        lost = await _drain(tally, set(sending.classes), args.drain_timeout_s)
        stalled = await leftover_records(stack.kafka, stack.names, [args.model])
    finally:
        reading.cancel()
        await asyncio.gather(reading, return_exceptions=True)
        await tally.stop()
    report = _report(args, capacity, rate, sending, tally, events, lost)
    report["stalled"] = {g: n for g, n in stalled.items() if n}
    return report


def _keep_logs(home: Path, into: Path) -> None:
    into.mkdir(parents=True, exist_ok=True)
    for log in home.glob("*.log"):
        shutil.copy(log, into / log.name)


async def _follow(tally: ResultLog) -> None:
    while True:
        await tally.poll(0.2)


async def _capacity(client, tally: ResultLog, count: int, model: str) -> float:
    """Standard requests/s one worker answers: a backlog of ``count``, sent all at once
    (sent one by one, the client's pace would be measured), drained by it alone; over
    the middle 80% of its results."""
    ids = [f"cap-{i:06d}" for i in range(count)]
    for chunk in range(0, count, 200):
        await asyncio.gather(*(client.send(_request(client, rid, Priority.STANDARD, model))
                               for rid in ids[chunk:chunk + 200]))
    while sum(rid in tally.results for rid in ids) < count:
        await asyncio.sleep(0.5)
    produced = sorted(tally.results[rid][0].produced_at_ms for rid in ids)
    lo, hi = produced[count // 10], produced[count * 9 // 10]
    return (count * 8 // 10) / max((hi - lo) / 1000, 1e-3)


def _request(client, request_id: str, priority: Priority, model: str):
    n = int(request_id.rsplit("-", 1)[1])
    inputs = ({"text": [TEXTS[n % len(TEXTS)]]} if model == "minilm" else
              {"pixels": np.full((1, 64), float(n % 16), np.float32)})
    return client.request(model, inputs, priority=priority, request_id=request_id,
                          deadline_ms=int(time.time() * 1000) + DEADLINE_MS)


async def _send(client, sending: Sending, rate: float, args) -> None:
    """Standard at ``rate``, interactive at ``args.interactive_rate``, for the events'
    length and one phase after the last."""
    duration = args.phase_s * (len(EVENTS) + 1)
    total = rate + args.interactive_rate
    every = max(1, round(total / args.interactive_rate))
    began = time.monotonic()
    for i in range(int(total * duration)):
        priority = Priority.INTERACTIVE if i % every == 0 else Priority.STANDARD
        request_id = f"s-{i:07d}"
        sending.sent_at[request_id] = time.time()
        sending.classes[request_id] = priority
        sending.deliveries.append(await client.send(_request(client, request_id, priority,
                                                             args.model)))
        await asyncio.sleep(max(0.0, began + (i + 1) / total - time.monotonic()))


async def _events(args, workers: Workers, tally: ResultLog, sending: Sending) -> list[Event]:
    began, events = time.monotonic(), []
    for n, (kind, name) in enumerate(EVENTS, 1):
        await asyncio.sleep(max(0.0, began + n * args.phase_s - time.monotonic()))
        before = workers.rebalances()
        if events:
            events[-1].rebalances.append(before)
        event = Event(kind, name, time.time(),
                      backlog=len(set(sending.classes) - tally.results.keys()),
                      rebalances=[before])
        lags = await leftover_records(workers.stack.kafka, workers.stack.names,
                                      [workers.model])
        event.waiting = {_lane_of(group): n for group, n in lags.items()}
        revoked = workers.revoked(but=name)
        if kind == "join":
            event.took_s = await workers.start(name)
        elif kind == "leave":
            event.took_s = await workers.terminate(name)
        else:
            event.took_s = await workers.kill_and_restart(name)
            await asyncio.sleep(min(args.phase_s / 2, 8))   # a rebalance would show now
            event.revoked = workers.revoked(but=name) - revoked
        events.append(event)
    await asyncio.sleep(args.phase_s)
    events[-1].rebalances.append(workers.rebalances())
    for event in events:
        event.pause_s, event.takeover_s = (_longest(*event.rebalances, name) for name in
                                           REBALANCE_HISTOGRAMS)
    return events


def _lane_of(group: str) -> str:
    if ".workers." not in group:
        return "pipeline"
    return "interactive" if group.endswith(".interactive") else "standard+batch"


def _longest(before: dict, after: dict, name: str) -> float:
    """The longest mean of ``name`` over a worker's and group's observations between the
    two snapshots (one rebalance each, as a rule)."""
    means = []
    for worker, series in after.items():
        for key, (total, count) in series.items():
            was = before.get(worker, {}).get(key, (0.0, 0.0))
            if key.startswith(name) and count > was[1]:
                means.append((total - was[0]) / (count - was[1]))
    return max(means, default=0.0)


async def _drain(tally: ResultLog, expected: set[str], timeout_s: float) -> int:
    last_change, seen = time.monotonic(), -1
    while time.monotonic() - last_change < timeout_s:
        answered = len(expected & tally.results.keys())
        if answered == len(expected):
            await asyncio.sleep(3)   # a little longer: duplicates would show up now
            return 0
        if answered != seen:
            last_change, seen = time.monotonic(), answered
        await asyncio.sleep(1)
    return len(expected) - seen


def _report(args, capacity, rate, sending: Sending, tally: ResultLog, events: list[Event],
            lost: int) -> dict:
    produced = {p: sorted(tally.results[rid][0].produced_at_ms / 1000
                          for rid, c in sending.classes.items()
                          if c == p and rid in tally.results)
                for p in (Priority.INTERACTIVE, Priority.STANDARD)}
    ends = [e.at for e in events[1:]] + [events[-1].at + args.phase_s]
    for event, end in zip(events, ends):
        for priority, times in produced.items():
            event.stops_s[priority.value] = _longest_gap(times, event.at - 0.5, end)
        event.interactive_p99_ms = _p99_after(sending, tally, event.at)
    first = events[0].at
    one_worker = sum(first - args.phase_s / 2 <= t < first
                     for t in produced[Priority.STANDARD]) / (args.phase_s / 2)
    duplicated = sum(len(tally.results[rid]) > 1 for rid in sending.classes
                     if rid in tally.results)
    unanswered = Counter(c.value for rid, c in sending.classes.items()
                         if rid not in tally.results)
    return _verdict(args, {"capacity_per_s": capacity, "rate_per_s": rate,
                           "one_worker_under_load_per_s": one_worker,
                           "sent": len(sending.classes), "lost": lost,
                           "duplicated": duplicated, "unanswered": dict(unanswered),
                           "events": events})


def _longest_gap(times: list[float], start: float, end: float) -> float:
    within = [t for t in times if start <= t < end]
    return max((b - a for a, b in zip(within, within[1:])), default=float("nan"))


def _p99_after(sending: Sending, tally: ResultLog, at: float) -> float:
    waits = [tally.results[rid][0].produced_at_ms - sending.sent_at[rid] * 1000
             for rid, c in sending.classes.items()
             if c == Priority.INTERACTIVE and at <= sending.sent_at[rid] < at + AFTER_S
             and rid in tally.results]
    return float(np.percentile(waits, 99)) if waits else float("nan")


def _verdict(args, report: dict) -> dict:
    events, problems = report["events"], []
    if report["lost"] or report["duplicated"]:
        problems.append(f"{report['lost']} lost ({report['unanswered']}), "
                        f"{report['duplicated']} duplicated")
    for e in events:
        budget = args.leave_budget_s if e.kind == "leave" else args.join_budget_s
        if e.kind != "restart" and not e.pause_s <= budget:
            problems.append(f"{e.kind} {e.worker} stopped the groups {e.pause_s:.2f} s")
        if e.kind == "restart" and e.revoked:
            problems.append(f"the restart of {e.worker} revoked {e.revoked:.0f} partitions")
    first_leave = next(e for e in events if e.kind == "leave")
    if first_leave.backlog > report["rate_per_s"]:
        problems.append(f"{first_leave.backlog} requests still waited at the first leave")
    report["problems"], report["passed"] = problems, not problems
    return report


def render(report: dict) -> str:
    under = report["one_worker_under_load_per_s"]
    lines = [f"one worker: {report['capacity_per_s']:.0f} standard requests/s alone, "
             f"{under:.0f}/s under the load (the second half of the first phase); load "
             f"{report['rate_per_s']:.0f}/s ({report['rate_per_s'] / max(under, 1):.1f}x the "
             f"latter); sent {report['sent']}, lost {report['lost']}, "
             f"duplicated {report['duplicated']}; records past a group's committed offset: "
             f"{report['stalled'] or 'none'}",
             f"{'event':12} {'took s':>6} {'backlog':>7} {'group stop s':>12} "
             f"{'moved wait s':>12} {'results gap s (int./std.)':>25} {'int. p99 ms':>11} "
             f"{'revoked':>7}"]
    for e in report["events"]:
        gaps = f"{e.stops_s['interactive']:.2f} / {e.stops_s['standard']:.2f}"
        lines.append(f"{e.kind + ' ' + e.worker:12} {e.took_s:6.2f} {e.backlog:7d} "
                     f"{e.pause_s:12.2f} {e.takeover_s:12.2f} {gaps:>25} "
                     f"{e.interactive_p99_ms:11.0f} {e.revoked:7.0f}")
    lines.append("records waiting per group when each event began: " + "; ".join(
        f"{e.kind} {e.worker} {e.waiting}" for e in report["events"]))
    lines.append("PASS" if report["passed"] else "FAIL: " + "; ".join(report["problems"]))
    return "\n".join(lines)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", choices=("digits", "minilm"), default="digits")
    p.add_argument("--worker-cpus", type=arguments.above_zero, default=0.1,
                   help="each worker's CPU limit, in cores (a cgroup quota; needs root)")
    p.add_argument("--background-pull", type=arguments.count, default=64,
                   help="standard/batch records a worker pulls and commits together: a "
                   "rebalance waits for the pull in flight, and at a tenth of a core a "
                   "full one (256) takes most of a second")
    p.add_argument("--load", type=arguments.above_zero, default=2.0,
                   help="standard load, in multiples of one worker's capacity")
    p.add_argument("--interactive-rate", type=arguments.above_zero, default=20.0)
    p.add_argument("--phase-s", type=arguments.above_zero, default=30.0,
                   help="seconds between events")
    p.add_argument("--capacity-requests", type=arguments.count, default=4000)
    p.add_argument("--session-timeout-ms", type=arguments.count, default=10_000)
    p.add_argument("--join-budget-s", type=arguments.above_zero, default=3.0)
    p.add_argument("--leave-budget-s", type=arguments.above_zero, default=1.0)
    p.add_argument("--drain-timeout-s", type=arguments.above_zero, default=60.0)
    p.add_argument("--registry", type=Path, default=KipSettings().registry_dir)
    p.add_argument("--keep-logs", type=Path, help="copy the processes' logs here")


def run(args) -> int:
    report = asyncio.run(measure(args))
    print(render(report))
    return 0 if report["passed"] else 1


def _quiet(*_args) -> None:
    pass

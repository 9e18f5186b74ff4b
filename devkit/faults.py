"""The fault harness: uniquely identified requests through a real kip while its processes
crash, and a count of what came out (``kip faults``; tests/faults runs a small size).

It starts a broker of its own, two pipeline processes and three digits workers, sends
``requests`` at a steady rate, and meanwhile, one fault at a time: kills a worker
(SIGKILL), pauses one past its session timeout (SIGSTOP ... SIGCONT), kills or pauses
the pipeline, restarts the broker. Killed processes are started again, as a supervisor
would; a process that exits on its own is restarted too, and counted as unplanned.

Then it drains: reads results, audit and dead letters with read_committed until every
request is answered (or nothing moves for ``drain_timeout_s``), and reports lost,
duplicated, unseen and orphaned requests, poison handling and stalled partitions.
"""

from __future__ import annotations

import asyncio
import logging
import random
import signal
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from kip.devkit.arguments import above_zero, count, fraction, zero_or_more
from kip.devkit.broker import LocalBroker
from kip.devkit.faults_report import FaultReport, Tally, leftover_records
from kip.devkit.stack import DevStack, dev_client, own_stack
from kip.audit.reading import committed_metadata, trusted_heads
from kip.schemas.codec import REQUEST_ID_HEADER
from kip.schemas.deadletter import fallback_request_id
from kip.client import KipClient
from kip.runtime.settings import KipSettings
from kip.schemas.messages import Priority
from kip.schemas.result_signatures import ResultKeys

MODEL = "digits"
DEADLINE_MS = 30 * 60_000      # long: this harness counts delivery, not latency
POISON_KINDS = ("bad-request", "bad-work-item", "overflowing-input")


@dataclass
class FaultPlan:
    requests: int = 20_000
    rate: float = 150.0                  # requests per second, offered steadily
    workers: int = 3
    pipelines: int = 2                   # a paused one is a real zombie: the other takes over
    worker_kills: int = 10
    worker_pauses: int = 3
    pipeline_kills: int = 3
    pipeline_pauses: int = 1
    broker_restarts: int = 1
    poison_ratio: float = 0.0            # share of messages that are poison
    interactive_share: float = 0.2
    session_timeout_ms: int = 6_000      # the broker's minimum: faults resolve quickly
    drain_timeout_s: float = 120.0
    seed: int = 1

    @property
    def faults(self) -> int:
        return (self.worker_kills + self.worker_pauses + self.pipeline_kills
                + self.pipeline_pauses + self.broker_restarts)


@dataclass
class Supervisor:
    """Keeps the pipelines (the first ``pipelines`` processes) and the workers running,
    counting restarts."""

    stack: DevStack
    pipelines: int = 1
    planned: Counter = field(default_factory=Counter)
    unplanned: Counter = field(default_factory=Counter)
    paused: set[int] = field(default_factory=set)

    def start(self, workers: int) -> None:
        for _ in range(self.pipelines):
            self.stack.procs.append(self.stack.spawn(["pipeline"], log=_quiet))
        for _ in range(workers):
            self.stack.procs.append(self.stack.spawn(["worker", "--model", MODEL], log=_quiet))

    def kind(self, index: int) -> str:
        return "pipeline" if index < self.pipelines else "worker"

    def pick(self, kind: str, rng: random.Random) -> int:
        if kind == "pipeline":
            return rng.randrange(self.pipelines)
        return rng.randrange(self.pipelines, len(self.stack.procs))

    def kill(self, index: int) -> None:
        proc = self.stack.procs[index]
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        self.planned[self.kind(index)] += 1
        self._respawn(index)

    def revive(self) -> None:
        """Start again whatever exited on its own."""
        for index, proc in enumerate(self.stack.procs):
            if proc.poll() is not None and index not in self.paused:
                self.unplanned[self.kind(index)] += 1
                self._respawn(index)

    def _respawn(self, index: int) -> None:
        self.stack.procs[index] = self.stack.spawn(self.stack.procs[index].args[3:], log=_quiet)


async def run_faults(plan: FaultPlan, registry: Path, log=print) -> FaultReport:
    # The harness breaks the broker on purpose: its own clients' reconnect errors are noise.
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    worker_env = {"KIP_SESSION_TIMEOUT_MS": str(plan.session_timeout_ms),
                  "KIP_INTRA_OP_THREADS": "1"}
    async with own_stack("faults", registry, worker_env, log=log) as stack:
        supervisor = Supervisor(stack, plan.pipelines)
        try:
            supervisor.start(plan.workers)
            return await _run(plan, stack, stack.broker, supervisor, log)
        finally:
            for index in supervisor.paused:
                stack.procs[index].send_signal(signal.SIGCONT)


async def _run(plan: FaultPlan, stack: DevStack, broker: LocalBroker, supervisor: Supervisor,
               log) -> FaultReport:
    async with dev_client(stack) as client:
        log("warming up: one request through pipeline and workers ...")
        await client.infer(MODEL, {"pixels": np.zeros((1, 64), np.float32)}, timeout_s=180)
        trusted = ResultKeys(keys=stack.result_keys()).verifier()
        tally = Tally(stack.kafka, stack.names, trusted, [client.tenant])
        await tally.start()
        try:
            started = time.monotonic()
            sent = await _under_faults(plan, stack, broker, supervisor, client, log)
            log(f"sent {len(sent.kinds)} requests in {time.monotonic() - started:.0f}s; "
                "draining results ...")
            await _drain(plan, tally, sent, log)
            # The chains' committed heads, then what the audit topic holds up to them:
            tally.chains.heads, _ = trusted_heads(
                await committed_metadata(stack.kafka, stack.names), trusted)
            await tally.poll(2.0)
            report = tally.report(sent.kinds, sent.failed)
            report.leftover = await leftover_records(stack.kafka, stack.names, [MODEL])
            report.faults = dict(supervisor.planned) | {
                "worker pauses": plan.worker_pauses, "pipeline pauses": plan.pipeline_pauses,
                "broker restarts": plan.broker_restarts}
            report.unplanned = dict(supervisor.unplanned)
            report.elapsed_s = time.monotonic() - started
            return report
        finally:
            await tally.stop()


async def _under_faults(plan: FaultPlan, stack: DevStack, broker: LocalBroker,
                        supervisor: Supervisor, client: KipClient, log) -> Sent:
    """Send every request while faults are injected and the supervisor restarts what
    died. The faults and the supervisor stop when sending ends, also when it fails."""
    faults = asyncio.create_task(_inject(plan, stack, broker, supervisor, log))
    watcher = asyncio.create_task(_watch(supervisor))
    try:
        sent = await _send_all(plan, client, log)
        await faults
        return sent
    finally:
        for task in (faults, watcher):
            task.cancel()
        await asyncio.gather(faults, watcher, return_exceptions=True)


@dataclass
class Sent:
    kinds: dict[str, str] = field(default_factory=dict)   # request id -> normal / poison kind
    failed: int = 0                                       # Kafka never took these


async def _send_all(plan: FaultPlan, client: KipClient, log) -> Sent:
    """Every request at a steady rate; poison mixed in at ``poison_ratio``."""
    rng = random.Random(plan.seed)
    images = np.random.default_rng(plan.seed).random((64, 64), dtype=np.float32) * 16
    poison = rng.sample(range(plan.requests), round(plan.requests * plan.poison_ratio))
    kinds = {i: POISON_KINDS[n % len(POISON_KINDS)] for n, i in enumerate(poison)}
    sent, deliveries = Sent(), []
    began = time.monotonic()
    for i in range(plan.requests):
        request_id = f"f{plan.seed}-{i:06d}"
        kind = kinds.get(i, "normal")
        priority = Priority.INTERACTIVE if rng.random() < plan.interactive_share \
            else Priority.STANDARD
        deliveries.append((request_id, kind, await _send_one(
            client, request_id, kind, priority, images[i % 64:i % 64 + 1])))
        if i % 1000 == 999:
            log(f"  sent {i + 1}/{plan.requests}")
        await asyncio.sleep(max(0.0, began + (i + 1) / plan.rate - time.monotonic()))
    for request_id, kind, delivery in deliveries:
        try:
            meta = await delivery
        except Exception:
            sent.failed += 1
            continue
        if kind == "bad-work-item":
            request_id = fallback_request_id(meta.topic, meta.partition, meta.offset)
        sent.kinds[request_id] = kind
    return sent


async def _send_one(client: KipClient, request_id: str, kind: str, priority: Priority,
                    pixels: np.ndarray) -> asyncio.Future:
    """Publish one message; the returned future resolves when Kafka has it."""
    names = client.names
    if kind == "bad-request":   # valid JSON, not a request: the pipeline rejects it
        value = f'{{"request_id": "{request_id}", "tenant": "demo", "model": 7}}'.encode()
        return await client.send_raw(names.requests(priority), value, key=b"demo",
                                     headers=[(REQUEST_ID_HEADER, request_id.encode())],
                                     sealed=True)
    if kind == "bad-work-item":   # straight onto a work topic: the worker rejects it, under
        # its coordinates: nothing vouches for the id it names (recorded so below)
        value = f'{{"request": {{"request_id": "{request_id}"}}, "route": 1}}'.encode()
        return await client.send_raw(names.work(MODEL, priority), value,
                                     key=request_id.encode())
    if kind == "overflowing-input":   # finite, so admitted; the model's sums overflow to NaN
        pixels = np.full_like(pixels, 3e38)
        pixels[:, ::2] *= -1
    request = client.request(MODEL, {"pixels": pixels}, priority=priority,
                             request_id=request_id, deadline_ms=_deadline())
    return await client.send(request)   # the harness reads results itself


def _deadline() -> int:
    return int(time.time() * 1000) + DEADLINE_MS


async def _inject(plan: FaultPlan, stack: DevStack, broker: LocalBroker,
                  supervisor: Supervisor, log) -> None:
    """The faults, in a seeded order, spread over the sending time."""
    rng = random.Random(plan.seed)
    events = (["kill worker"] * plan.worker_kills + ["pause worker"] * plan.worker_pauses
              + ["kill pipeline"] * plan.pipeline_kills
              + ["pause pipeline"] * plan.pipeline_pauses
              + ["restart broker"] * plan.broker_restarts)
    rng.shuffle(events)
    gap = plan.requests / plan.rate / (len(events) + 1)
    for n, event in enumerate(events, 1):
        await asyncio.sleep(gap)
        action, kind = event.split()
        if kind == "broker":
            log(f"  fault {n}/{len(events)}: {event}")
            await asyncio.to_thread(broker.stop)
            await asyncio.sleep(1)
            await asyncio.to_thread(broker.start, log=_quiet)
            continue
        index = supervisor.pick(kind, rng)
        log(f"  fault {n}/{len(events)}: {event} (process {index})")
        if action == "kill":
            supervisor.kill(index)
        else:
            await _pause(stack, supervisor, index, plan.session_timeout_ms / 1000 + 2)


async def _pause(stack: DevStack, supervisor: Supervisor, index: int, seconds: float) -> None:
    proc = stack.procs[index]
    supervisor.paused.add(index)
    proc.send_signal(signal.SIGSTOP)
    await asyncio.sleep(seconds)
    proc.send_signal(signal.SIGCONT)
    supervisor.paused.discard(index)


async def _watch(supervisor: Supervisor) -> None:
    while True:
        supervisor.revive()
        await asyncio.sleep(1)


async def _drain(plan: FaultPlan, tally: Tally, sent: Sent, log) -> None:
    """Read until every request is answered, or nothing new arrives for a while."""
    expected = set(sent.kinds)
    last_change, seen = time.monotonic(), -1
    while time.monotonic() - last_change < plan.drain_timeout_s:
        await tally.poll(2.0)
        answered = len(expected & tally.results.keys())
        if answered != seen:
            log(f"  answered {answered}/{len(expected)}")
            last_change, seen = time.monotonic(), answered
        if answered == len(expected) and len(tally.final_audit) >= answered:
            await tally.poll(3.0)   # a little longer: duplicates would show up now
            return


def _quiet(*_args) -> None:
    pass


def add_arguments(p) -> None:
    d = FaultPlan()
    p.add_argument("--requests", type=count, default=d.requests)
    p.add_argument("--rate", type=above_zero, default=d.rate, help="requests per second")
    p.add_argument("--workers", type=count, default=d.workers, help="digits worker processes")
    p.add_argument("--pipelines", type=count, default=d.pipelines, help="pipeline processes")
    p.add_argument("--worker-kills", type=zero_or_more, default=d.worker_kills)
    p.add_argument("--worker-pauses", type=zero_or_more, default=d.worker_pauses,
                   help="SIGSTOP past the session timeout, then SIGCONT")
    p.add_argument("--pipeline-kills", type=zero_or_more, default=d.pipeline_kills)
    p.add_argument("--pipeline-pauses", type=zero_or_more, default=d.pipeline_pauses,
                   help="SIGSTOP past the session timeout, then SIGCONT")
    p.add_argument("--broker-restarts", type=zero_or_more, default=d.broker_restarts)
    p.add_argument("--poison", type=fraction, default=d.poison_ratio, metavar="RATIO",
                   help="share of poison messages (e.g. 0.01)")
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--registry", type=Path, default=KipSettings().registry_dir,
                   help="registry with the reference models (default $KIP_REGISTRY_DIR)")


def run_cli(args) -> int:
    plan = FaultPlan(requests=args.requests, rate=args.rate, workers=args.workers,
                     pipelines=args.pipelines,
                     worker_kills=args.worker_kills, worker_pauses=args.worker_pauses,
                     pipeline_kills=args.pipeline_kills,
                     pipeline_pauses=args.pipeline_pauses, broker_restarts=args.broker_restarts,
                     poison_ratio=args.poison, seed=args.seed)
    report = asyncio.run(run_faults(plan, args.registry, log=_flushed))
    print("\n".join(report.lines()))
    return 0 if report.passed else 1


def _flushed(*args) -> None:
    print(*args, flush=True)


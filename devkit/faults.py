"""The fault harness: uniquely identified requests through a real kip while its processes
crash, and a count of what came out (``kip faults``; tests/faults runs a small size).

It starts a broker (or a cluster: ``--cluster``) of its own, two pipeline processes and
three digits workers, sends ``requests`` at a steady rate, and meanwhile, one fault at a
time: kills a worker (SIGKILL), pauses one past its session timeout (SIGSTOP ...
SIGCONT), kills or pauses the pipeline, restarts the broker; on a cluster also kills
the leading broker, the transaction coordinator and the controller, and pauses a broker
(devkit/fault_injection.py). Killed processes are started again, as a supervisor would;
a process that exits on its own is restarted too, and counted as unplanned. Meanwhile it
follows the results, to tell what each fault cost interactive requests
(devkit/availability.py).

Then it drains: reads results, audit and dead letters with read_committed until every
request is answered (or nothing moves for ``drain_timeout_s``), and reports lost,
duplicated, unseen and orphaned requests, poison handling and stalled partitions.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import random
import signal
import time
from dataclasses import dataclass, field
from contextlib import nullcontext
from pathlib import Path

import numpy as np

from kip.devkit.arguments import above_zero, count, fraction, zero_or_more
from kip.devkit.availability import Timeline
from kip.devkit.fault_injection import MODEL, FaultPlan, Injector, Supervisor, watch
from kip.devkit.hosts import Network
from kip.devkit.faults_report import FaultReport, Tally, leftover_records
from kip.devkit.stack import DevStack, dev_client
from kip.devkit.own_stack import own_stack
from kip.audit.reading import committed_metadata, trusted_heads
from kip.schemas.codec import REQUEST_ID_HEADER
from kip.schemas.deadletter import fallback_request_id
from kip.client import KipClient
from kip.runtime.settings import KipSettings
from kip.schemas.messages import InferenceRequest, Priority, Status
from kip.schemas.result_signatures import ResultKeys

DEADLINE_MS = 30 * 60_000      # long: this harness counts delivery, not latency
POISON_KINDS = ("bad-request", "bad-work-item", "overflowing-input")


async def run_faults(plan: FaultPlan, registry: Path, log=print) -> FaultReport:
    # The harness breaks the broker on purpose: its own clients' reconnect errors are noise.
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    worker_env = {"KIP_SESSION_TIMEOUT_MS": str(plan.session_timeout_ms),
                  "KIP_INTERACTIVE_SESSION_TIMEOUT_MS": str(plan.session_timeout_ms),
                  "KIP_INTRA_OP_THREADS": "1"}
    with Network() if plan.hosts else nullcontext() as network:
        async with own_stack("faults", registry, worker_env, log=log, brokers=plan.brokers,
                             replication_factor=plan.replication_factor,
                             network=network) as stack:
            supervisor = Supervisor(stack, plan.pipelines, network)
            try:
                supervisor.start(plan.workers)
                return await _run(plan, stack, supervisor, log)
            finally:
                for index in supervisor.paused:
                    stack.procs[index].send_signal(signal.SIGCONT)


async def _run(plan: FaultPlan, stack: DevStack, supervisor: Supervisor, log
               ) -> FaultReport:
    async with dev_client(stack) as client:
        log("warming up: one request through pipeline and workers ...")
        await client.infer(MODEL, {"pixels": np.zeros((1, 64), np.float32)}, timeout_s=180)
        trusted = ResultKeys(keys=stack.result_keys()).verifier()
        tally = Tally(stack.kafka, stack.names, trusted, [client.tenant])
        await tally.start()
        injector = Injector(plan, stack, supervisor, tally.timeline, log)
        try:
            started = time.monotonic()
            sent = await _under_faults(plan, injector, client, tally, log)
            log(f"sent {len(sent.kinds)} requests in {time.monotonic() - started:.0f}s; "
                "draining results ...")
            await _drain(plan, tally, sent, log)
            # The chains' committed heads, then what the audit topic holds up to them:
            tally.chains.heads, _ = trusted_heads(
                await committed_metadata(stack.kafka, stack.names), trusted)
            await tally.poll(2.0)
            report = tally.report(sent.kinds, sent.failed)
            report.leftover = await leftover_records(stack.kafka, stack.names, [MODEL])
            report.faults = dict(injector.done)
            report.unplanned = dict(supervisor.unplanned)
            steady = tally.timeline.steady()   # none where faults leave no calm minute
            report.costs = tally.timeline.costs() + ([steady] if steady.requests else [])
            report.replay = await _replayed(client, tally, _last_admitted(tally, sent))
            report.elapsed_s = time.monotonic() - started
            return report
        finally:
            await tally.stop()


async def _under_faults(plan: FaultPlan, injector: Injector, client: KipClient,
                        tally: Tally, log) -> Sent:
    """Send every request while faults are injected, the supervisor restarts what died
    and the tally follows results as they come (when each arrived: availability). The
    faults and the supervisor stop when sending ends, also when it fails."""
    faults = asyncio.create_task(injector.run())
    watcher = asyncio.create_task(watch(injector.supervisor))
    follower = asyncio.create_task(_follow(tally))
    try:
        sent = await _send_all(plan, client, tally.timeline, log)
        await faults
        return sent
    finally:
        for task in (faults, watcher, follower):
            task.cancel()
        await asyncio.gather(faults, watcher, follower, return_exceptions=True)


async def _follow(tally: Tally) -> None:
    while True:
        await tally.poll(0.2)


def _last_admitted(tally: Tally, sent: Sent) -> InferenceRequest | None:
    """The last normal request the pipeline admitted (not one it rejected: a rejected
    request is no one's to replay; its sender may send it again)."""
    for request in reversed(sent.normal):
        results = tally.results.get(request.request_id, [])
        if results and results[0].status != Status.REJECTED:
            return request
    return None


async def _replayed(client: KipClient, tally: Tally, request) -> str:
    """Send a copy of an admitted request (the last sent, inside the replay window) and
    say how it ended: ``REPLAY_REFUSED``, or what went wrong."""
    if request is None:
        return "not tried"
    before = len(tally.results.get(request.request_id, []))
    await (await client.send(request))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        await tally.poll(0.5)
        results = tally.results.get(request.request_id, [])
        if len(results) > before:
            copy = results[-1]
            return f"{copy.status.value} {copy.error.code if copy.error else ''}".strip()
    return "no answer in 60 s"


@dataclass
class Sent:
    kinds: dict[str, str] = field(default_factory=dict)   # request id -> normal / poison kind
    failed: int = 0                                       # Kafka never took these
    normal: list[InferenceRequest] = field(default_factory=list)   # to send a copy of


async def _send_all(plan: FaultPlan, client: KipClient, timeline: Timeline, log) -> Sent:
    """Every request at a steady rate; poison mixed in at ``poison_ratio``; when each
    interactive one was sent goes on ``timeline``."""
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
        if priority == Priority.INTERACTIVE and kind == "normal":
            timeline.sent[request_id] = time.time()
        delivery, request = await _send_one(client, request_id, kind, priority,
                                            images[i % 64:i % 64 + 1])
        deliveries.append((request_id, kind, delivery))
        if kind == "normal":
            sent.normal.append(request)
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
                    pixels: np.ndarray) -> tuple[asyncio.Future, InferenceRequest | None]:
    """Publish one message; the returned future resolves when Kafka has it. With it, the
    request sent, where it is one."""
    names = client.names
    if kind == "bad-request":   # valid JSON, not a request: the pipeline rejects it
        value = f'{{"request_id": "{request_id}", "tenant": "demo", "model": 7}}'.encode()
        return await client.send_raw(names.requests(priority), value, key=b"demo",
                                     headers=[(REQUEST_ID_HEADER, request_id.encode())],
                                     sealed=True), None
    if kind == "bad-work-item":   # straight onto a work topic: the worker rejects it, under
        # its coordinates: nothing vouches for the id it names (recorded so below)
        value = f'{{"request": {{"request_id": "{request_id}"}}, "route": 1}}'.encode()
        return await client.send_raw(names.work(MODEL, priority), value,
                                     key=request_id.encode()), None
    if kind == "overflowing-input":   # finite, so admitted; the model's sums overflow to NaN
        pixels = np.full_like(pixels, 3e38)
        pixels[:, ::2] *= -1
    request = client.request(MODEL, {"pixels": pixels}, priority=priority,
                             request_id=request_id, deadline_ms=_deadline())
    return await client.send(request), request   # the harness reads results itself


def _deadline() -> int:
    return int(time.time() * 1000) + DEADLINE_MS


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


def add_arguments(p) -> None:
    d = FaultPlan()
    p.add_argument("--requests", type=count, default=d.requests)
    p.add_argument("--rate", type=above_zero, help=f"requests per second (default "
                   f"{d.rate:.0f}; {FaultPlan.cluster().rate:.0f} with --cluster)")
    p.add_argument("--workers", type=count, default=d.workers, help="digits worker processes")
    p.add_argument("--pipelines", type=count, default=d.pipelines, help="pipeline processes")
    p.add_argument("--worker-kills", type=zero_or_more, default=d.worker_kills)
    p.add_argument("--worker-pauses", type=zero_or_more, default=d.worker_pauses,
                   help="SIGSTOP past the session timeout, then SIGCONT")
    p.add_argument("--pipeline-kills", type=zero_or_more, default=d.pipeline_kills)
    p.add_argument("--pipeline-pauses", type=zero_or_more, default=d.pipeline_pauses,
                   help="SIGSTOP past the session timeout, then SIGCONT")
    p.add_argument("--broker-restarts", type=zero_or_more, default=d.broker_restarts,
                   help="controlled restarts (of one node, on a cluster)")
    _cluster_arguments(p)
    p.add_argument("--poison", type=fraction, default=d.poison_ratio, metavar="RATIO",
                   help="share of poison messages (e.g. 0.01)")
    p.add_argument("--interactive-share", type=fraction, default=d.interactive_share,
                   help="share of requests sent as interactive (1: all)")
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--registry", type=Path, default=KipSettings().registry_dir,
                   help="registry with the reference models (default $KIP_REGISTRY_DIR)")


def _cluster_arguments(p) -> None:
    """The faults of a cluster, hosts apart; unset ones take ``--cluster``'s plan."""
    p.add_argument("--cluster", action="store_true", help="on 3 brokers (replication 3, "
                   "min ISR 2), with 3 leader kills (one of the pipeline's transaction "
                   "coordinator), 1 controller kill and 1 broker pause besides the rest")
    p.add_argument("--brokers", type=count, help="brokers (default 1; 3 with --cluster)")
    p.add_argument("--replication-factor", type=count,
                   help="of kip's topics (default: what the cluster can hold)")
    p.add_argument("--leader-kills", type=zero_or_more,
                   help="SIGKILL of the broker leading interactive requests (the first: "
                   "the pipeline's transaction coordinator)")
    p.add_argument("--controller-kills", type=zero_or_more,
                   help="SIGKILL of the active KRaft controller")
    p.add_argument("--broker-pauses", type=zero_or_more,
                   help="SIGSTOP of the interactive leader past broker.session.timeout.ms")
    p.add_argument("--hosts", action=argparse.BooleanOptionalAction,
                   help="each broker, pipeline and worker a host apart, in a network "
                   "namespace of its own (needs root; on with --cluster)")
    for name, what in (("worker", "a worker's host"), ("pipeline", "a pipeline's host"),
                       ("broker", "the interactive leader's host")):
        p.add_argument(f"--{name}-partitions", type=zero_or_more,
                       help=f"{what} cut off past the session timeouts, then healed")
    p.add_argument("--broker-wipes", type=zero_or_more,
                   help="SIGKILL of the interactive leader, its disk lost before its restart")
    p.add_argument("--degraded-links", type=zero_or_more,
                   help="the interactive leader's link made lossy (5%%) and narrow (4 Mbit/s) "
                   "for 20 s")


def run_cli(args) -> int:
    chosen = dict(requests=args.requests, workers=args.workers,
                  pipelines=args.pipelines, worker_kills=args.worker_kills,
                  worker_pauses=args.worker_pauses, pipeline_kills=args.pipeline_kills,
                  pipeline_pauses=args.pipeline_pauses, broker_restarts=args.broker_restarts,
                  poison_ratio=args.poison, seed=args.seed,
                  interactive_share=args.interactive_share,
                  replication_factor=args.replication_factor)
    for name in ("rate", "brokers", "leader_kills", "controller_kills", "broker_pauses", "hosts",
                 "worker_partitions", "pipeline_partitions", "broker_partitions",
                 "degraded_links", "broker_wipes"):
        if getattr(args, name) is not None:
            chosen[name] = getattr(args, name)
    plan = FaultPlan.cluster(**chosen) if args.cluster else FaultPlan(**chosen)
    report = asyncio.run(run_faults(plan, args.registry, log=_flushed))
    print("\n".join(report.lines()))
    return 0 if report.passed else 1


def _flushed(*args) -> None:
    print(*args, flush=True)


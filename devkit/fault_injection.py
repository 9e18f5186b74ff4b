"""The faults of ``kip faults``: what it breaks and when (``FaultPlan``), the supervisor
that starts killed processes again, and the ``Injector`` that breaks one process or one
broker at a time while requests flow (devkit/faults.py runs it; devkit/cluster_faults.py
breaks a cluster's brokers)."""

from __future__ import annotations

import asyncio
import random
import signal
import time
from collections import Counter
from dataclasses import dataclass, field

from kip.devkit.availability import Timeline
from kip.devkit.broker import BROKER_SESSION_TIMEOUT_MS
from kip.devkit.cluster import LocalCluster
from kip.devkit.cluster_faults import BrokerFaults
from kip.devkit.hosts import Host, Network
from kip.devkit.stack import DevStack

MODEL = "digits"


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
    broker_restarts: int = 1             # a controlled restart (of one node, on a cluster)
    brokers: int = 1                     # a cluster from 3: the faults below are its own
    replication_factor: int | None = None   # unset: what the cluster can hold
    leader_kills: int = 0                # SIGKILL of the interactive leader; the first,
    # of the pipeline's transaction coordinator
    controller_kills: int = 0            # SIGKILL of the active KRaft controller
    broker_pauses: int = 0               # SIGSTOP past broker.session.timeout.ms
    broker_down_s: float = 5.0           # a killed broker's time down before its restart
    hosts: bool = False                  # each broker, pipeline and worker a host apart
    worker_partitions: int = 0           # a worker's host cut off, then healed
    pipeline_partitions: int = 0         # a pipeline's host cut off, then healed
    broker_partitions: int = 0           # the interactive leader's host cut off, healed
    degraded_links: int = 0              # the interactive leader's link lossy and narrow
    broker_wipes: int = 0                # the interactive leader killed, its disk lost
    poison_ratio: float = 0.0            # share of messages that are poison
    interactive_share: float = 0.2
    session_timeout_ms: int = 6_000      # the broker's minimum: faults resolve quickly
    drain_timeout_s: float = 120.0
    seed: int = 1

    @property
    def faults(self) -> int:
        return len(self.events())

    def events(self) -> list[str]:
        """Every fault, in a seeded order."""
        events = (["kill worker"] * self.worker_kills + ["pause worker"] * self.worker_pauses
                  + ["kill pipeline"] * self.pipeline_kills
                  + ["pause pipeline"] * self.pipeline_pauses
                  + ["restart broker"] * self.broker_restarts
                  + ["kill leader"] * max(0, self.leader_kills - 1)
                  + ["kill coordinator"] * min(1, self.leader_kills)
                  + ["kill controller"] * self.controller_kills
                  + ["pause broker"] * self.broker_pauses
                  + ["partition worker"] * self.worker_partitions
                  + ["partition pipeline"] * self.pipeline_partitions
                  + ["partition broker"] * self.broker_partitions
                  + ["degrade broker"] * self.degraded_links
                  + ["wipe broker"] * self.broker_wipes)
        random.Random(self.seed).shuffle(events)
        return events

    @classmethod
    def cluster(cls, **overrides) -> FaultPlan:
        """On three brokers, each process a host apart: the process faults, and at least
        3 leader kills (one of the coordinator), 1 controller kill, 1 broker pause, 2
        worker-host partitions, 1 pipeline-host partition, 1 broker partition and 1
        lossy link; at a rate whose sending time (400 s for 20,000 requests) holds them
        all, the slowest (a partition, a broker's restart) lasting 10 to 20 s."""
        return cls(**({"rate": 50.0, "brokers": 3, "leader_kills": 3, "controller_kills": 1,
                       "broker_pauses": 1, "hosts": True, "worker_partitions": 2,
                       "pipeline_partitions": 1, "broker_partitions": 1,
                       "degraded_links": 1} | overrides))


@dataclass
class Supervisor:
    """Keeps the pipelines (the first ``pipelines`` processes) and the workers running,
    counting restarts; with a ``network``, each on a host of its own (pipeline1,
    worker1, ...), where it is started again too."""

    stack: DevStack
    pipelines: int = 1
    network: Network | None = None
    planned: Counter = field(default_factory=Counter)
    unplanned: Counter = field(default_factory=Counter)
    paused: set[int] = field(default_factory=set)
    commands: list[tuple[list[str], Host | None]] = field(default_factory=list)

    def start(self, workers: int) -> None:
        commands = ([("pipeline", ["pipeline"])] * self.pipelines
                    + [("worker", ["worker", "--model", MODEL])] * workers)
        counts: Counter = Counter()
        for kind, args in commands:
            counts[kind] += 1
            host = self.network.host(f"{kind}{counts[kind]}") if self.network else None
            self.commands.append((args, host))
            self.stack.procs.append(self.stack.spawn(args, log=_quiet, host=host))

    def host(self, index: int) -> Host | None:
        return self.commands[index][1]

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
        args, host = self.commands[index]
        self.stack.procs[index] = self.stack.spawn(args, log=_quiet, host=host)

class Injector:
    """The faults, one at a time, spread over the sending time; each broker fault only
    once the cluster is back in full sync; when each began goes on the timeline."""

    def __init__(self, plan: FaultPlan, stack: DevStack, supervisor: Supervisor,
                 timeline: Timeline, log) -> None:
        self.plan, self.stack, self.supervisor = plan, stack, supervisor
        self.timeline, self.log = timeline, log
        self.done: Counter = Counter()
        self.rng = random.Random(plan.seed)
        self.brokers = None
        self.links = None if supervisor.network is None else Links(
            supervisor.network, partition_s=max(plan.session_timeout_ms,
                                                BROKER_SESSION_TIMEOUT_MS) / 1000 + 6)
        if isinstance(stack.broker, LocalCluster):
            self.brokers = BrokerFaults(stack.broker, stack.kafka, stack.names,
                                        stack.topic_names(), plan.broker_down_s)

    async def run(self) -> None:
        events = self.plan.events()
        if self.links is None and any(e.split()[0] in ("partition", "degrade")
                                      for e in events):
            raise ValueError("network faults need hosts apart (FaultPlan.hosts)")
        # Fault n is due at n / (N + 1) of the sending time; one that ran long delays the
        # next, which then starts at once, and the schedule catches up.
        gap = self.plan.requests / self.plan.rate / (len(events) + 1)
        start = time.monotonic()
        for n, event in enumerate(events, 1):
            await asyncio.sleep(max(0.0, start + n * gap - time.monotonic()))
            if self.brokers and event.endswith(("broker", "leader", "coordinator",
                                                "controller")):
                await self.brokers.settled()
            began = time.time()
            target = await self.inject(event)
            self.log(f"  fault {n}/{len(events)}: {event} ({target})")
            self.timeline.fault(began, f"{event} ({target})")
            self.done[event] += 1

    async def inject(self, event: str) -> str:
        """Break what ``event`` names; say which process or node it broke."""
        action, kind = event.split()
        if action in ("partition", "degrade"):
            return await self._break_link(action, kind)
        if kind in ("worker", "pipeline"):
            index = self.supervisor.pick(kind, self.rng)
            if action == "kill":
                self.supervisor.kill(index)
            else:
                await _pause(self.stack, self.supervisor, index,
                             self.plan.session_timeout_ms / 1000 + 2)
            return f"process {index}"
        if self.brokers is None:   # the one broker: a controlled restart
            await asyncio.to_thread(self.stack.broker.stop)
            await asyncio.sleep(1)
            await asyncio.to_thread(self.stack.broker.start, log=_quiet)
            return "the broker"
        return f"node {await self._break_node(event)}"

    async def _break_link(self, action: str, kind: str) -> str:
        """Cut a host off past every session timeout, then heal it; or make its link
        lossy and narrow for a while. A broker's: the interactive leader's."""
        if kind == "broker":
            node = await self.brokers.interactive_leader()
            host, what = self.stack.broker.node(node).host, f"node {node}"
        else:
            index = self.supervisor.pick(kind, self.rng)
            host, what = self.supervisor.host(index), f"process {index}"
        if action == "partition":
            await self.links.partition(host)
        else:
            await self.links.degrade(host)
        return f"{what} on {host.address}"

    async def _break_node(self, event: str) -> int:
        if event == "kill leader":
            return await self.brokers.kill_leader()
        if event == "kill coordinator":
            return await self.brokers.kill_leader(coordinator=True)
        if event == "kill controller":
            return await self.brokers.kill_controller()
        if event == "wipe broker":
            return await self.brokers.wipe()
        if event == "pause broker":
            return await self.brokers.pause(BROKER_SESSION_TIMEOUT_MS / 1000 + 2)
        return await self.brokers.restart()


async def _pause(stack: DevStack, supervisor: Supervisor, index: int, seconds: float) -> None:
    proc = stack.procs[index]
    supervisor.paused.add(index)
    proc.send_signal(signal.SIGSTOP)
    await asyncio.sleep(seconds)
    proc.send_signal(signal.SIGCONT)
    supervisor.paused.discard(index)


async def watch(supervisor: Supervisor) -> None:
    while True:
        supervisor.revive()
        await asyncio.sleep(1)


@dataclass
class Links:
    """The network faults: a host cut off for ``partition_s`` (longer than every session
    timeout, so that its partitions move and its zombie is met on its return), or its
    link lossy and narrow for ``degraded_s``."""

    network: Network
    partition_s: float
    degraded_s: float = 20.0
    loss_percent: float = 5.0
    rate_kbit: int = 4000

    async def partition(self, host: Host) -> None:
        self.network.cut(host)
        try:
            await asyncio.sleep(self.partition_s)
        finally:
            self.network.heal(host)

    async def degrade(self, host: Host) -> None:
        self.network.degrade(host, self.loss_percent, self.rate_kbit)
        try:
            await asyncio.sleep(self.degraded_s)
        finally:
            self.network.restore(host)

def _quiet(*_args) -> None:
    pass

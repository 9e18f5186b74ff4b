"""Faults a Kafka cluster has, for the fault harness (``kip faults --cluster``).

Each breaks one broker of a ``LocalCluster`` the way a lost host would, and starts it
again as its supervisor would once it has been down ``down_s``:

- ``kill_leader``: SIGKILL of the broker that leads most interactive request partitions,
  or of the transaction coordinator of the pipeline's first interactive partition;
- ``kill_controller``: SIGKILL of the active KRaft controller (each node is broker and
  controller, so this also takes a broker);
- ``pause``: SIGSTOP of the interactive leader past ``broker.session.timeout.ms``; it is
  fenced, its partitions move, and it comes back (SIGCONT) to a new epoch;
- ``restart``: a controlled restart (SIGTERM) of the interactive leader;
- ``wipe``: SIGKILL of the interactive leader and the loss of its disk.

Before each fault the harness waits until every partition is back in full sync, so that
no fault lands on a cluster still short of a replica. A partition with no replica in
sync is offline for good: its only copies are gone, and with unclean leader election
off Kafka elects no empty replica in their place (after a wipe at replication factor 1).
The wait passes over those; the harness counts what their loss costs.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections import Counter
from dataclasses import dataclass

from kip.devkit.cluster import LocalCluster
from kip.schemas.messages import Priority
from kip.topics.names import TopicNames
from kip.transport.clients import KafkaConnection

TRANSACTION = 1   # FindCoordinator's key type of a transactional id
KAFKA_TOPICS = ["__consumer_offsets", "__transaction_state"]
_QUORUM_LINE = re.compile(r"RaftManager id=(\d+)\] Completed transition to "
                          r"(Leader|FollowerState)\((.*)")


@dataclass
class BrokerFaults:
    cluster: LocalCluster
    kafka: KafkaConnection
    names: TopicNames
    topics: list[str]             # kip's topics, whose sync each fault waits for
    down_s: float = 5.0           # a killed broker's time down before it is started again

    async def kill_leader(self, coordinator: bool = False) -> int:
        node = await (self.coordinator() if coordinator else self.interactive_leader())
        await self._kill_and_restart(node)
        return node

    async def kill_controller(self) -> int:
        node = active_controller(self.cluster)
        await self._kill_and_restart(node)
        return node

    async def wipe(self) -> int:
        """SIGKILL of the interactive leader, whose disk is lost before it comes back:
        copied back to it from the other replicas, or, where it held the only copy
        (replication factor 1), gone, and those partitions offline for good."""
        node = await self.interactive_leader()
        broker = self.cluster.node(node)
        await asyncio.to_thread(broker.kill)
        broker.wipe()
        await asyncio.sleep(self.down_s)
        await asyncio.to_thread(self.cluster.restart, node)
        return node

    async def pause(self, seconds: float) -> int:
        node = await self.interactive_leader()
        broker = self.cluster.node(node)
        broker.pause()
        try:
            await asyncio.sleep(seconds)
        finally:
            broker.resume()
        return node

    async def restart(self) -> int:
        node = await self.interactive_leader()
        await asyncio.to_thread(self.cluster.node(node).stop)
        await asyncio.to_thread(self.cluster.restart, node)
        return node

    async def _kill_and_restart(self, node: int) -> None:
        await asyncio.to_thread(self.cluster.node(node).kill)
        await asyncio.sleep(self.down_s)
        await asyncio.to_thread(self.cluster.restart, node)

    async def interactive_leader(self) -> int:
        """The broker leading the most interactive request partitions."""
        topic = self.names.requests(Priority.INTERACTIVE)
        described = await self._admin(lambda a: a.describe_topics([topic]))
        leaders = Counter(p["leader"] for p in described[0]["partitions"] if p["leader"] >= 0)
        return leaders.most_common(1)[0][0]

    async def coordinator(self) -> int:
        """The transaction coordinator of the pipeline's first interactive partition."""
        txn_id = (f"{self.names.pipeline_group()}."
                  f"{self.names.requests(Priority.INTERACTIVE)}.0")
        return await self._admin(lambda a: a.find_coordinator(txn_id, TRANSACTION))

    async def settled(self, timeout_s: float = 120.0) -> float:
        """Wait until every partition of kip's topics and Kafka's own that has a replica
        in sync has all of them in sync; return how long that took."""
        started = time.monotonic()
        while True:
            topics = await self._admin(lambda a: a.describe_topics(self.topics + KAFKA_TOPICS))
            short = short_of_replicas(topics)
            if not short:
                return time.monotonic() - started
            if time.monotonic() - started > timeout_s:
                raise TimeoutError(f"after {timeout_s:.0f}s still short of replicas: "
                                   + ", ".join(short[:5]))
            await asyncio.sleep(1)

    async def _admin(self, ask):
        admin = self.kafka.admin(client_id="kip-faults")
        await admin.start()
        try:
            return await ask(admin)
        finally:
            await admin.close()


def short_of_replicas(described: list[dict]) -> list[str]:
    """The topics of a DescribeTopics answer with a partition that will yet regain a
    replica: some in sync, not all. One with none in sync stays offline (see above)."""
    return sorted({t["topic"] for t in described for p in t["partitions"]
                   if t["error_code"] or (p["isr"] and set(p["isr"]) != set(p["replicas"]))})


def active_controller(cluster: LocalCluster) -> int:
    """The node the controller quorum last elected, read from the nodes' own quorum
    transitions (the metadata API names any broker as "controller" under KRaft)."""
    newest: tuple[int, int] = (-1, -1)   # (epoch, leader)
    for node in cluster.nodes:
        text = node.log_file.read_text(errors="replace")
        for match in _QUORUM_LINE.finditer(text):
            state = match.group(3)
            epoch = int(re.search(r"epoch=(\d+)", state).group(1))
            leader = (int(match.group(1)) if match.group(2) == "Leader"
                      else int(re.search(r"leader=(\d+)", state).group(1)))
            newest = max(newest, (epoch, leader))
    if newest[1] < 0:
        raise RuntimeError("no node has logged a controller election; see their logs")
    return newest[1]

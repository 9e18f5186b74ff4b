"""A real Kafka cluster of several KRaft nodes on loopback (``kip kafka start --brokers 3``).

Each node is a ``LocalBroker`` in a folder of its own, combined broker and controller, all
of them voters of one controller quorum, formatted with one cluster id. Kafka's own
topics and kip's are replicated as ``Replication.for_cluster`` says (3 copies, 2 in sync
on three nodes) and unclean leader election is off: the settings a production cluster
runs with (docs/deploy.md). A secured cluster shares one CA, one set of SCRAM users and
one client config per role, whose bootstrap names every node.

Node ``i`` (from 1) listens on ``port + 3 (i - 1)``, its controller on the port after,
its mTLS listener on the one after that; on ``hosts`` of their own (devkit/hosts.py),
every node on ``port`` at its host's address.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from kip.devkit.broker import ClientAccess, LocalBroker, new_cluster_id
from kip.devkit.hosts import Host
from kip.runtime.files import private_dir
from kip.security import Security
from kip.topics.catalogue import Replication

PORTS_PER_NODE = 3


class LocalCluster(ClientAccess):
    """``brokers`` KRaft nodes whose state lives under ``data_dir``. Offers what
    ``LocalBroker`` offers a stack (``bootstrap``, ``ClientAccess``, ``start``, ``stop``),
    and ``nodes`` for a harness that breaks them one at a time."""

    def __init__(self, data_dir: str | os.PathLike, brokers: int = 3, port: int = 9092, *,
                 secure: bool = False, users: list[str] = (), steady_state: bool = False,
                 hosts: list[Host] | None = None) -> None:
        if brokers < 1:
            raise ValueError("a cluster has at least one broker")
        self.data_dir = Path(data_dir).resolve()
        private_dir(self.data_dir)
        self.security = Security(self.data_dir / "security", list(users)) if secure else None
        self.replication = Replication.for_cluster(brokers)
        # On hosts of their own every node listens on the same ports, at its own address.
        hosts = hosts or [None] * brokers
        ports = [port if hosts[0] else port + PORTS_PER_NODE * i for i in range(brokers)]
        addresses = [h.address if h else "127.0.0.1" for h in hosts]
        voters = ",".join(f"{i}@{a}:{p + 1}" for i, (a, p) in enumerate(zip(addresses, ports), 1))
        self.nodes = [
            LocalBroker(self.data_dir / f"node-{i}", port=p, controller_port=p + 1,
                        mtls_port=p + 2, node_id=i, voters=voters,
                        cluster_id=self._cluster_id(), replication=self.replication,
                        security=self.security, steady_state=steady_state, host=h)
            for i, (p, h) in enumerate(zip(ports, hosts), 1)]

    def _cluster_id(self) -> str:
        """The cluster's id, made once and kept beside its nodes' folders."""
        path = self.data_dir / "cluster.id"
        if not path.exists():
            path.write_text(new_cluster_id())
        return path.read_text().strip()

    @property
    def bootstrap(self) -> str:
        return ",".join(node.bootstrap for node in self.nodes)

    @property
    def mtls_bootstrap(self) -> str:
        return ",".join(node.mtls_bootstrap for node in self.nodes)

    def node(self, node_id: int) -> LocalBroker:
        return self.nodes[node_id - 1]

    def start(self, timeout_s: float = 90.0, log=print) -> None:
        """Start every node that is not running; return when all accept clients. The
        nodes start together: none is ready before a majority of controllers votes."""
        started = time.monotonic()
        waiting = [node for node in self.nodes if node.pid() is None]
        for node in waiting:
            node.launch(log)
        for node in waiting:
            node.wait_ready(max(1.0, started + timeout_s - time.monotonic()))
        log(f"kafka cluster of {len(self.nodes)} brokers ready on {self.bootstrap} in "
            f"{time.monotonic() - started:.1f}s (replication factor {self.replication.factor}, "
            f"min.insync.replicas {self.replication.min_insync}; logs in {self.data_dir})")
        if self.security:
            folder = self.write_client_configs()
            log(f"secured: client configs in {folder} "
                f"(export KIP_KAFKA_CONFIG={folder}/admin.json)")

    def restart(self, node_id: int, timeout_s: float = 90.0) -> None:
        """Start node ``node_id`` again (after a kill) and wait until it serves."""
        node = self.node(node_id)
        node.launch(lambda *_: None)
        node.wait_ready(timeout_s)

    def stop(self, timeout_s: float = 30.0) -> bool:
        """Stop every node; True if any was running. All at once: a node stopped last,
        alone, would wait for a controller quorum to let it shut down cleanly."""
        with ThreadPoolExecutor(len(self.nodes)) as pool:
            return any(list(pool.map(lambda node: node.stop(timeout_s), self.nodes)))

    def pid(self) -> int | None:
        """A running node's pid, if any runs."""
        return next((pid for node in self.nodes if (pid := node.pid()) is not None), None)

    def status(self) -> str:
        lines = [f"kafka cluster of {len(self.nodes)} brokers, data in {self.data_dir}"]
        for node in self.nodes:
            pid = node.pid()
            lines.append(f"  node {node.node_id}: " + (
                f"running (pid {pid}) on {node.bootstrap}" if pid else "not running"))
        return "\n".join(lines)


def local_kafka(data_dir: Path, brokers: int = 1, port: int = 9092, **options
                ) -> LocalBroker | LocalCluster:
    """One broker, or a cluster of ``brokers``."""
    if brokers == 1:
        return LocalBroker(data_dir, port=port, **options)
    return LocalCluster(data_dir, brokers, port, **options)


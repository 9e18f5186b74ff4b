"""A kip of a benchmark's or the fault harness's own: a broker (or a cluster) on free
loopback ports or on hosts apart, in a temporary folder, prepared, and stopped on exit."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from kip.devkit.broker import LocalBroker, free_port, free_port_run
from kip.devkit.cluster import PORTS_PER_NODE, LocalCluster
from kip.devkit.hosts import Network
from kip.devkit.stack import DevStack
from kip.pipeline.access import AccessConfig
from kip.runtime.files import write_private


# What a benchmark's own broker takes: plain, or trusting no one with every process
# connecting as its role over SASL_SSL (SCRAM) or with its certificate (mTLS).
BUSES = ("plaintext", "scram", "mtls")


@asynccontextmanager
async def own_stack(prefix: str, registry_dir: Path, worker_env: dict[str, str] | None = None,
                    split_pipeline: bool = False, bus: str = "plaintext", log=print,
                    steady_state: bool = False, access: AccessConfig | None = None,
                    brokers: int = 1, replication_factor: int | None = None,
                    network: Network | None = None) -> AsyncIterator[DevStack]:
    """A prepared kip with a broker (or a cluster of ``brokers``) of its own on free
    loopback ports, in a temporary folder, on ``bus`` (``BUSES``), compiled by C2 where
    ``steady_state`` (``LocalBroker``), with ``access`` as its access file (default: one
    demo tenant), its topics replicated ``replication_factor`` times (default: what the
    cluster can hold), each broker on a host of its own on ``network`` where given;
    services are the caller's to start. Everything stops on exit."""
    with tempfile.TemporaryDirectory(prefix=f"kip-{prefix}-") as tmp:
        if access is not None:
            write_private(Path(tmp) / "access.json", access.to_json().encode())
        broker = _own_broker(Path(tmp), bus, steady_state, brokers, network)
        stack = DevStack(home=Path(tmp), bootstrap_servers=broker.bootstrap, prefix=prefix,
                         registry_dir=registry_dir, metrics_base_port=0,
                         worker_env=worker_env or {}, split_pipeline=split_pipeline,
                         own_broker=broker, mtls=bus == "mtls",
                         replication_factor=replication_factor)
        try:
            await asyncio.to_thread(broker.start, log=log)
            await asyncio.to_thread(stack.prepare, log)
            yield stack
        finally:
            await asyncio.to_thread(stack.stop_services)
            await asyncio.to_thread(broker.stop)
            stack.remove_signatures()


def _own_broker(home: Path, bus: str, steady_state: bool, brokers: int = 1,
                network: Network | None = None) -> LocalBroker | LocalCluster:
    """A broker (or a cluster of ``brokers``) for a stack in ``home``: plain, or secured
    with a user for each of the stack's roles (its SASL_SSL listener and its mTLS one
    both open)."""
    if bus not in BUSES:
        raise ValueError(f"bus '{bus}': expected one of {', '.join(BUSES)}")
    security = {} if bus == "plaintext" else dict(secure=True, users=DevStack(home=home).roles())
    if network is not None:   # hosts of their own: plain, every node on Kafka's port
        if security:
            raise ValueError("brokers on hosts of their own run plaintext only")
        return LocalCluster(home / "kafka", brokers, 9092, steady_state=steady_state,
                            hosts=[network.host(f"broker{i}") for i in range(1, brokers + 1)])
    if brokers > 1:
        base = free_port_run(PORTS_PER_NODE * brokers)
        return LocalCluster(home / "kafka", brokers, base, steady_state=steady_state,
                            **security)
    ports = dict(port=free_port(), controller_port=free_port(), steady_state=steady_state)
    if security:
        ports["mtls_port"] = free_port()
    return LocalBroker(home / "kafka", **ports, **security)

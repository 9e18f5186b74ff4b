"""Session fixtures: one real Kafka broker (and, for the tests that ask, a secured one and
a cluster of three) and one registry with the reference models.

The broker runs on free loopback ports in a temporary folder and is always stopped.
Topic names are unique per test module (``prefix``), so tests never see each other's
messages.
"""

from __future__ import annotations

import gc
import threading
import uuid
from pathlib import Path

import pytest

from kip.devkit.broker import LocalBroker, free_port, free_port_run
from kip.devkit.cluster import PORTS_PER_NODE, LocalCluster
from kip.models.export.reference import build_reference
from kip.models.registry import Registry


@pytest.fixture(scope="session")
def broker(tmp_path_factory) -> LocalBroker:
    b = LocalBroker(tmp_path_factory.mktemp("kafka"), port=free_port(),
                    controller_port=free_port())
    b.start(log=lambda *_: None)
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture(scope="session")
def cluster(tmp_path_factory) -> LocalCluster:
    """Three KRaft nodes, each broker and controller, as a production cluster runs:
    Kafka's topics and kip's replicated 3 times, 2 in sync, no unclean elections."""
    c = LocalCluster(tmp_path_factory.mktemp("kafka-cluster"), 3,
                     free_port_run(3 * PORTS_PER_NODE))
    c.start(log=lambda *_: None)
    try:
        yield c
    finally:
        c.stop()


# Every principal the secured tests use: kip's roles and a few tenants.
SECURE_USERS = ["pipeline", "operator", "audit-reader", "scaling", "worker-digits", "worker-minilm",
                "tenant-acme", "tenant-bob", "tenant-limited", "tenant-greedy",
                "tenant-modest", "tenant-restart", "tenant-demo"]


@pytest.fixture(scope="session")
def secure_broker(tmp_path_factory) -> LocalBroker:
    """A broker that trusts no one: SASL_SSL and mTLS listeners, the StandardAuthorizer,
    nothing allowed without an ACL; ``admin`` is its super user."""
    b = LocalBroker(tmp_path_factory.mktemp("kafka-secure"), port=free_port(),
                    controller_port=free_port(), mtls_port=free_port(), secure=True,
                    users=SECURE_USERS)
    b.start(log=lambda *_: None)
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture(scope="session")
def registry(tmp_path_factory) -> Registry:
    reg = Registry(tmp_path_factory.mktemp("registry"))
    build_reference(reg, log=lambda *_: None)
    return reg


@pytest.fixture
def prefix() -> str:
    return f"t{uuid.uuid4().hex[:10]}"


@pytest.fixture(autouse=True)
def no_lingering_threads():
    """A test must not leave threads behind (faust-streaming's tasks_not_lingering idea)."""
    before = set(threading.enumerate())
    yield
    extra = [t for t in threading.enumerate() if t not in before and t.is_alive()
             and not t.daemon]
    assert not extra, f"threads left running: {extra}"


@pytest.fixture(scope="module", autouse=True)
def leaks_found_in_their_module():
    """Collect garbage after each test module: an object left unclosed (an aiokafka
    connection, say) warns as it is collected, and that warning fails the module that
    left it rather than whichever later test the collector happened to run in."""
    yield
    gc.collect()


def repo_root() -> Path:
    return Path(__file__).resolve().parent.parent

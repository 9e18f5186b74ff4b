"""A real Apache Kafka broker (KRaft) on loopback, without Docker.

``LocalBroker`` formats KRaft storage once, starts ``kafka.Kafka`` in a child process
(its jars: devkit/kafka_jars.py) and waits for it: a single node, or one node of a
cluster (devkit/cluster.py).
"""

from __future__ import annotations

import base64
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

from kip.devkit.hosts import Host
from kip.devkit.kafka_jars import KAFKA_VERSION, BrokerError, fetch_jars, require_tool
from kip.security import ADMIN, CLIENT_MECHANISM, Listeners, Security
from kip.runtime.files import open_private_log, private_dir
from kip.topics.catalogue import MAX_MESSAGE_BYTES, Replication
from kip.transport.clients import KafkaConnection

READY_LINE = "Kafka Server started"
_LOG4J = """rootLogger.level=WARN
rootLogger.appenderRef.out.ref=out
appender.out.type=Console
appender.out.name=out
appender.out.layout.type=PatternLayout
appender.out.layout.pattern=[%d] %p %m (%c)%n
logger.server.name=kafka.server.KafkaRaftServer
logger.server.level=INFO
logger.quorum.name=org.apache.kafka.raft.QuorumState
logger.quorum.level=INFO
"""


# A development broker on a small machine, sharing its cores with the pipeline and the
# workers. ZGC: the serial and G1 collectors stop the broker for tens of milliseconds
# under load, and every request in flight waits through each pause. A plain broker runs
# the C1 compiler alone: with C2 as well, a fresh JVM spends its first minutes compiling
# on those cores. A secured one keeps C2: TLS 1.3's AES-GCM runs on the JIT's AES and
# GHASH intrinsics, which C1 lacks (docs/architecture.md, "The local broker and the
# benches").
JVM_OPTIONS = ["-Xms512m", "-Xmx1g", "-XX:+UseZGC"]
PLAIN_JVM_OPTIONS = [*JVM_OPTIONS, "-XX:TieredStopAtLevel=1"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_port_run(count: int, low: int = 20_000, high: int = 32_000) -> int:
    """The first of ``count`` consecutive free loopback ports, below Linux's ephemeral
    range (32768 and up): ``free_port() + 1`` is an ephemeral port that any outgoing
    connection (each Kafka client holds several) may take before a service binds it."""
    for _ in range(200):
        base = random.randrange(low, high - count)
        if all(_bindable(port) for port in range(base, base + count)):
            return base
    raise RuntimeError(f"no {count} consecutive free ports in {low}-{high}")


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


# How long a broker may go without a heartbeat before the controller fences it and moves
# its partitions' leadership (Kafka's default: 9 s). Every second of it is a second in
# which a lost broker's partitions have no leader; too short, and a broker starved of CPU
# for a moment is fenced for nothing (docs/deploy.md, "Failure domains").
BROKER_SESSION_TIMEOUT_MS = 4000
BROKER_HEARTBEAT_INTERVAL_MS = 1000


class ClientAccess:
    """How clients reach a local Kafka, one broker or a cluster, from its ``bootstrap``,
    ``mtls_bootstrap`` and ``security`` (None when plain)."""

    bootstrap: str
    mtls_bootstrap: str
    security: Security | None

    @property
    def kafka(self) -> KafkaConnection:
        """The connection of an operator who may do everything (``admin`` when secure)."""
        return self.client(ADMIN) if self.security else KafkaConnection(bootstrap=self.bootstrap)

    def client(self, user: str, *, mtls: bool = False, mechanism: str = CLIENT_MECHANISM
               ) -> KafkaConnection:
        """How ``user`` connects to this secured Kafka: SCRAM over TLS, or mTLS."""
        if mtls:
            return KafkaConnection(**self.security.mtls_client(user, self.mtls_bootstrap))
        return KafkaConnection(**self.security.client(user, self.bootstrap, mechanism))

    def client_config(self, user: str, *, mtls: bool = False) -> Path:
        """The client config file of ``user`` (for ``KIP_KAFKA_CONFIG``): SCRAM over TLS,
        or its certificate over mTLS."""
        return self.security.folder / "clients" / (
            f"{user}.mtls.json" if mtls else f"{user}.json")

    def write_client_configs(self) -> Path:
        """A client config per user, naming this Kafka's bootstrap; their folder."""
        return self.security.write_client_configs(self.bootstrap,
                                                  mtls_bootstrap=self.mtls_bootstrap)


class LocalBroker(ClientAccess):
    """One KRaft broker+controller process whose state lives in ``data_dir``: alone, or
    node ``node_id`` of a cluster whose controllers are ``voters``
    (``devkit/cluster.py``), formatted with that cluster's ``cluster_id``.

    ``secure``: SASL_SSL on ``port``, mTLS on ``mtls_port``, the StandardAuthorizer, and
    a SCRAM user for each of ``users`` (and ``admin``) created when storage is formatted
    (kip/security.py); ``kafka`` then connects as ``admin``, ``client(user)`` as another.
    A cluster's nodes share one ``security``.

    ``replication``: how Kafka's own topics (consumer offsets, transaction state) and any
    topic created without a factor are replicated; 1 and 1 alone.
    """

    def __init__(self, data_dir: str | os.PathLike, port: int = 9092,
                 controller_port: int | None = None, *, secure: bool = False,
                 users: list[str] = (), mtls_port: int | None = None,
                 config: Path | None = None, steady_state: bool = False,
                 node_id: int = 1, voters: str | None = None, cluster_id: str | None = None,
                 replication: Replication = Replication(),
                 security: Security | None = None, host: Host | None = None) -> None:
        self.data_dir = Path(data_dir).resolve()
        self.port = port
        self.controller_port = controller_port or port + 1
        self.mtls_port = mtls_port or port + 2
        self.pid_file = self.data_dir / "broker.pid"
        self._proc: subprocess.Popen | None = None
        self._log_start = 0
        self.log_file = self.data_dir / "broker.log"
        self.security = security or (
            Security(self.data_dir / "security", list(users)) if secure else None)
        self.config = config   # a server.properties of someone else's making, run as it is
        self.steady_state = steady_state
        self.node_id = node_id
        self.host = host   # the network namespace it runs in (devkit/hosts.py), if any
        self.address = host.address if host else "127.0.0.1"
        self.voters = voters or f"{node_id}@{self.address}:{self.controller_port}"
        self.cluster_id = cluster_id
        self.replication = replication

    @property
    def bootstrap(self) -> str:
        return f"{self.address}:{self.port}"

    @property
    def jvm_options(self) -> list[str]:
        """The JVM's flags: a secured broker keeps the C2 compiler (``JVM_OPTIONS``), and
        so does one made for ``steady_state``: a benchmark that warms it up to measure
        what a long-running broker, compiled by C2 as the JVM's default has it, costs."""
        return JVM_OPTIONS if self.security or self.steady_state else PLAIN_JVM_OPTIONS

    @property
    def mtls_bootstrap(self) -> str:
        return f"{self.address}:{self.mtls_port}"

    def start(self, timeout_s: float = 60.0, log=print) -> None:
        """Start the broker unless it runs already; return when it accepts clients."""
        if self.pid() is not None:
            log(f"kafka broker already running (pid {self.pid()}) on {self.bootstrap}")
            return
        started = time.monotonic()
        proc = self.launch(log)
        self.wait_ready(timeout_s)
        log(f"kafka broker {KAFKA_VERSION} ready on {self.bootstrap} "
            f"in {time.monotonic() - started:.1f}s (pid {proc.pid}, log {self.log_file})")
        if self.security:
            folder = self.write_client_configs()
            log(f"secured: SASL_SSL on {self.bootstrap}, mTLS on {self.mtls_bootstrap}; "
                f"client configs in {folder} (export KIP_KAFKA_CONFIG={folder}/admin.json)")

    def launch(self, log=print) -> subprocess.Popen:
        """Start the broker's process (its storage formatted first, once) and return it
        without waiting: a cluster's nodes wait for each other's votes. On its ``host``
        where it has one."""
        libs = fetch_jars(log)
        java = require_tool("java", "the Kafka broker runs on Java 17+")
        private_dir(self.data_dir)   # the broker's data and logs: kip's account only
        (self.data_dir / "log4j2.properties").write_text(_LOG4J)
        props = self.config or self._write_config()
        classpath = f"{libs}/*"
        if not (self.data_dir / "logs" / "meta.properties").exists():
            self._format(java, classpath, props)
        with open_private_log(self.log_file) as out:
            self._log_start = out.tell()   # an earlier run's ready line must not count
            proc = subprocess.Popen(
                [*(self.host.prefix if self.host else []), java, *self.jvm_options,
                 f"-Dlog4j2.configurationFile={self.data_dir / 'log4j2.properties'}",
                 "-cp", classpath, "kafka.Kafka", str(props)],
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        self._proc = proc   # held so that stop() can reap it
        self.pid_file.write_text(str(proc.pid))
        return proc

    def kill(self) -> None:
        """SIGKILL: the broker dies as a lost host's would, with no controlled shutdown."""
        pid = self.pid()
        if pid is None:
            return
        os.kill(pid, signal.SIGKILL)
        self._wait_gone(pid)

    def wipe(self) -> None:
        """Lose the stopped broker's disk: every log and its metadata. It is formatted
        again (same cluster id) at its next launch, and comes back empty."""
        if self.pid() is not None:
            raise BrokerError("wipe a broker once it is stopped")
        shutil.rmtree(self.data_dir / "logs", ignore_errors=True)

    def pause(self) -> None:
        """SIGSTOP: the broker holds its connections and answers nothing."""
        os.kill(self.pid(), signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.pid(), signal.SIGCONT)

    def stop(self, timeout_s: float = 30.0) -> bool:
        """Stop the broker if it runs (SIGTERM, then SIGKILL); True if one was stopped."""
        pid = self.pid()
        if pid is None:
            return False
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
        self._wait_gone(pid)
        return True

    def _wait_gone(self, pid: int) -> None:
        if self._proc is not None and self._proc.pid == pid:
            self._proc.wait()
            self._proc = None
        _reap(pid)
        while _alive(pid):
            time.sleep(0.05)
        self.pid_file.unlink(missing_ok=True)

    def pid(self) -> int | None:
        try:
            pid = int(self.pid_file.read_text())
        except (FileNotFoundError, ValueError):
            return None
        return pid if _alive(pid) else None

    def status(self) -> str:
        pid = self.pid()
        if pid is None:
            return f"kafka broker not running (data in {self.data_dir})"
        return f"kafka broker running (pid {pid}) on {self.bootstrap}, data in {self.data_dir}"

    def _write_config(self) -> Path:
        props = self.data_dir / "server.properties"
        props.write_text("\n".join([
            "process.roles=broker,controller",
            f"node.id={self.node_id}",
            f"controller.quorum.voters={self.voters}",
            "controller.listener.names=CONTROLLER",
            *self._listeners(),
            f"log.dirs={self.data_dir / 'logs'}",
            *self.replication.broker_properties(),
            f"broker.session.timeout.ms={BROKER_SESSION_TIMEOUT_MS}",
            f"broker.heartbeat.interval.ms={BROKER_HEARTBEAT_INTERVAL_MS}",
            "offsets.topic.num.partitions=6",
            "transaction.state.log.num.partitions=6",
            "group.initial.rebalance.delay.ms=0",
            "auto.create.topics.enable=false",
            f"message.max.bytes={MAX_MESSAGE_BYTES}",
            "num.network.threads=2",
            "num.io.threads=4",
        ]) + "\n")
        props.chmod(0o600)   # a secured broker's holds passwords
        return props

    def _listeners(self) -> list[str]:
        if self.security:
            return self.security.server_properties(
                Listeners(self.port, self.mtls_port, self.controller_port))
        return [f"listeners=PLAINTEXT://{self.address}:{self.port},"
                f"CONTROLLER://{self.address}:{self.controller_port}",
                f"advertised.listeners=PLAINTEXT://{self.address}:{self.port}",
                "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
                "inter.broker.listener.name=PLAINTEXT"]

    def _format(self, java: str, classpath: str, props: Path) -> None:
        cmd = [java, "-cp", classpath, "kafka.tools.StorageTool", "format",
               f"--cluster-id={self.cluster_id or new_cluster_id()}", "-c", str(props),
               "--ignore-formatted",
               *(self.security.format_args() if self.security else [])]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise BrokerError(f"formatting KRaft storage failed:\n{done.stdout}{done.stderr}")

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        """Return when the launched broker accepts clients; raise if it exits first."""
        proc = self._proc
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                self.pid_file.unlink(missing_ok=True)
                raise BrokerError(f"the broker exited with {proc.returncode}; see {self.log_file}:\n"
                                  + self.log_file.read_text()[-3000:])
            if self._ready_logged() and _port_open(self.address, self.port):
                return
            time.sleep(0.2)
        self.stop()
        raise BrokerError(f"the broker was not ready within {timeout_s:.0f}s; see {self.log_file}")


    def _ready_logged(self) -> bool:
        with open(self.log_file, "rb") as log:
            log.seek(self._log_start)
            return READY_LINE.encode() in log.read()


def new_cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, base64 without padding (22 characters)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:   # a zombie child of ours counts as gone
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return sys.platform != "linux"


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def _port_open(address: str, port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((address, port)) == 0

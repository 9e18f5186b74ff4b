"""A real single-node Apache Kafka broker (KRaft) on loopback, without Docker.

The broker's jars come from Maven Central through Maven (pinned ``KAFKA_VERSION``) into a
cache folder reused by every later start. ``LocalBroker`` formats KRaft storage once,
starts ``kafka.Kafka`` in a child process with single-node settings, and waits for it.
"""

from __future__ import annotations

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

from kip.devkit.settings import DevSettings
from kip.security import ADMIN, CLIENT_MECHANISM, Listeners, Security
from kip.runtime.files import open_private_log, private_dir
from kip.topics.catalogue import MAX_MESSAGE_BYTES
from kip.transport.clients import KafkaConnection

KAFKA_VERSION = "4.1.1"      # pinned: the broker the tests and `kip up` run
LOG4J_VERSION = "2.25.3"
SLF4J_VERSION = "2.0.17"
READY_LINE = "Kafka Server started"

_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>dev.kip</groupId><artifactId>kafka-broker</artifactId><version>1</version>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>{kafka}</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-storage</artifactId><version>{kafka}</version></dependency>
    <dependency><groupId>org.slf4j</groupId><artifactId>slf4j-api</artifactId><version>{slf4j}</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j2-impl</artifactId><version>{log4j}</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-core</artifactId><version>{log4j}</version></dependency>
  </dependencies>
</project>
"""

_LOG4J = """rootLogger.level=WARN
rootLogger.appenderRef.out.ref=out
appender.out.type=Console
appender.out.name=out
appender.out.layout.type=PatternLayout
appender.out.layout.pattern=[%d] %p %m (%c)%n
logger.server.name=kafka.server.KafkaRaftServer
logger.server.level=INFO
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


class BrokerError(RuntimeError):
    """The local broker could not be fetched, started or reached."""


def cache_dir() -> Path:
    return DevSettings().cache_dir / f"kafka-{KAFKA_VERSION}"


def require_tool(name: str, why: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise BrokerError(f"'{name}' is not on PATH; {why}. Install it (e.g. "
                          f"apt-get install {'openjdk-17-jre-headless' if name == 'java' else 'maven'})"
                          " and try again.")
    return path


def fetch_jars(log=print) -> Path:
    """The folder of broker jars, fetched with Maven on first use."""
    libs = cache_dir() / "libs"
    if (libs / f"kafka_2.13-{KAFKA_VERSION}.jar").exists():
        return libs
    mvn = require_tool("mvn", "Maven fetches the Kafka broker jars from Maven Central")
    require_tool("java", "the Kafka broker runs on Java 17+")
    work = cache_dir()
    work.mkdir(parents=True, exist_ok=True)
    (work / "pom.xml").write_text(_POM.format(kafka=KAFKA_VERSION, log4j=LOG4J_VERSION,
                                              slf4j=SLF4J_VERSION))
    staging = work / "libs.partial"
    shutil.rmtree(staging, ignore_errors=True)
    log(f"fetching Apache Kafka {KAFKA_VERSION} broker jars with Maven into {libs} "
        "(first time only, ~1 min)...")
    cmd = [mvn, "-B", "-q", "-f", str(work / "pom.xml"), "dependency:copy-dependencies",
           f"-DoutputDirectory={staging}", "-DincludeScope=runtime"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise BrokerError(f"Maven could not fetch the Kafka jars:\n{done.stdout[-2000:]}"
                          f"{done.stderr[-2000:]}")
    staging.rename(libs)
    return libs


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


class LocalBroker:
    """One KRaft broker+controller process whose state lives in ``data_dir``.

    ``secure``: SASL_SSL on ``port``, mTLS on ``mtls_port``, the StandardAuthorizer, and
    a SCRAM user for each of ``users`` (and ``admin``) created when storage is formatted
    (kip/security.py); ``kafka`` then connects as ``admin``, ``client(user)`` as another.
    """

    def __init__(self, data_dir: str | os.PathLike, port: int = 9092,
                 controller_port: int | None = None, *, secure: bool = False,
                 users: list[str] = (), mtls_port: int | None = None,
                 config: Path | None = None, steady_state: bool = False) -> None:
        self.data_dir = Path(data_dir).resolve()
        self.port = port
        self.controller_port = controller_port or port + 1
        self.mtls_port = mtls_port or port + 2
        self.pid_file = self.data_dir / "broker.pid"
        self._proc: subprocess.Popen | None = None
        self.log_file = self.data_dir / "broker.log"
        self.security = Security(self.data_dir / "security", list(users)) if secure else None
        self.config = config   # a server.properties of someone else's making, run as it is
        self.steady_state = steady_state

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def jvm_options(self) -> list[str]:
        """The JVM's flags: a secured broker keeps the C2 compiler (``JVM_OPTIONS``), and
        so does one made for ``steady_state``: a benchmark that warms it up to measure
        what a long-running broker, compiled by C2 as the JVM's default has it, costs."""
        return JVM_OPTIONS if self.security or self.steady_state else PLAIN_JVM_OPTIONS

    @property
    def mtls_bootstrap(self) -> str:
        return f"127.0.0.1:{self.mtls_port}"

    @property
    def kafka(self) -> KafkaConnection:
        """The connection of an operator who may do everything (``admin`` when secure)."""
        return self.client(ADMIN) if self.security else KafkaConnection(bootstrap=self.bootstrap)

    def client(self, user: str, *, mtls: bool = False, mechanism: str = CLIENT_MECHANISM
               ) -> KafkaConnection:
        """How ``user`` connects to this secured broker: SCRAM over TLS, or mTLS."""
        if mtls:
            return KafkaConnection(**self.security.mtls_client(user, self.mtls_bootstrap))
        return KafkaConnection(**self.security.client(user, self.bootstrap, mechanism))

    def client_config(self, user: str, *, mtls: bool = False) -> Path:
        """The client config file of ``user`` (for ``KIP_KAFKA_CONFIG``): SCRAM over TLS,
        or its certificate over mTLS."""
        return self.data_dir / "security" / "clients" / (
            f"{user}.mtls.json" if mtls else f"{user}.json")

    def start(self, timeout_s: float = 60.0, log=print) -> None:
        """Start the broker unless it runs already; return when it accepts clients."""
        if self.pid() is not None:
            log(f"kafka broker already running (pid {self.pid()}) on {self.bootstrap}")
            return
        libs = fetch_jars(log)
        java = require_tool("java", "the Kafka broker runs on Java 17+")
        private_dir(self.data_dir)   # the broker's data and logs: kip's account only
        (self.data_dir / "log4j2.properties").write_text(_LOG4J)
        props = self.config or self._write_config()
        classpath = f"{libs}/*"
        if not (self.data_dir / "logs" / "meta.properties").exists():
            self._format(java, classpath, props)
        started = time.monotonic()
        with open_private_log(self.log_file) as out:
            proc = subprocess.Popen(
                [java, *self.jvm_options,
                 f"-Dlog4j2.configurationFile={self.data_dir / 'log4j2.properties'}",
                 "-cp", classpath, "kafka.Kafka", str(props)],
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        self._proc = proc   # held so that stop() can reap it
        self.pid_file.write_text(str(proc.pid))
        self._wait_ready(proc, timeout_s)
        log(f"kafka broker {KAFKA_VERSION} ready on {self.bootstrap} "
            f"in {time.monotonic() - started:.1f}s (pid {proc.pid}, log {self.log_file})")
        if self.security:
            folder = self.security.write_client_configs(
                self.bootstrap, mtls_bootstrap=self.mtls_bootstrap)
            log(f"secured: SASL_SSL on {self.bootstrap}, mTLS on {self.mtls_bootstrap}; "
                f"client configs in {folder} (export KIP_KAFKA_CONFIG={folder}/admin.json)")

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
        if self._proc is not None and self._proc.pid == pid:
            self._proc.wait()
            self._proc = None
        _reap(pid)
        self.pid_file.unlink(missing_ok=True)
        return True

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
            "node.id=1",
            f"controller.quorum.voters=1@127.0.0.1:{self.controller_port}",
            "controller.listener.names=CONTROLLER",
            *self._listeners(),
            f"log.dirs={self.data_dir / 'logs'}",
            # single node: internal topics cannot have more replicas than brokers
            "offsets.topic.replication.factor=1",
            "offsets.topic.num.partitions=6",
            "transaction.state.log.replication.factor=1",
            "transaction.state.log.min.isr=1",
            "transaction.state.log.num.partitions=6",
            "min.insync.replicas=1",
            "default.replication.factor=1",
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
        return [f"listeners=PLAINTEXT://127.0.0.1:{self.port},"
                f"CONTROLLER://127.0.0.1:{self.controller_port}",
                f"advertised.listeners=PLAINTEXT://127.0.0.1:{self.port}",
                "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
                "inter.broker.listener.name=PLAINTEXT"]

    def _format(self, java: str, classpath: str, props: Path) -> None:
        cmd = [java, "-cp", classpath, "kafka.tools.StorageTool", "format",
               "-t", uuid.uuid4().hex[:22], "-c", str(props), "--ignore-formatted",
               *(self.security.format_args() if self.security else [])]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise BrokerError(f"formatting KRaft storage failed:\n{done.stdout}{done.stderr}")

    def _wait_ready(self, proc: subprocess.Popen, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                self.pid_file.unlink(missing_ok=True)
                raise BrokerError(f"the broker exited with {proc.returncode}; see {self.log_file}:\n"
                                  + self.log_file.read_text()[-3000:])
            if READY_LINE in self.log_file.read_text(errors="replace") and _port_open(self.port):
                return
            time.sleep(0.2)
        self.stop()
        raise BrokerError(f"the broker was not ready within {timeout_s:.0f}s; see {self.log_file}")


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


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0

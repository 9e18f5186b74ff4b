"""``kip up``: a whole kip on one machine (broker, topics, models, pipeline, workers).

Each part runs as its own process, as in a deployment; this module only starts them,
waits for them, and stops them in reverse order. ``own_stack`` (devkit/own_stack.py) gives
the benchmarks and the fault harness a kip of their own, and ``dev_client`` a client of
the demo tenant.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from kip.devkit.broker import LocalBroker
from kip.devkit.cluster import LocalCluster, local_kafka
from kip.devkit.hosts import Host
from kip.client import KipClient
from kip.security import ensure_access_file
from kip.tenants import broker_quotas
from kip.models.export.reference import build_reference
from kip.models.registry import Registry
from kip.models.signing import sign
from kip.pipeline.access import AccessConfig
from kip.runtime import keys
from kip.runtime.files import open_private_log, private_dir
from kip.runtime.settings import KipSettings
from kip.schemas.codec import now_ms
from kip.transport.acl_admin import apply as apply_acls
from kip.topics.acls import plan
from kip.transport.quota_admin import apply_quotas
from kip.transport.admin import apply, cluster_brokers
from kip.topics.catalogue import Replication, catalogue
from kip.transport.clients import KafkaConnection
from kip.topics.names import TopicNames

REFERENCE_MODELS = ["minilm", "digits"]
DEV_TENANT, DEV_KEY_ID = "demo", "demo-key"


def ensure_dev_access(path: Path) -> AccessConfig:
    """The access file, created with one demo tenant and a fresh secret if missing."""
    return ensure_access_file(path, DEV_TENANT, DEV_KEY_ID)


@dataclass
class DevStack:
    """A kip on one machine. With ``bootstrap`` set it uses that cluster instead of
    starting a local broker (the tests and benchmarks bring their own).

    ``secure`` (or an ``own_broker`` that is secured): SASL_SSL, mTLS and the authorizer;
    the ACLs of ``kip acls apply`` are applied, and every process connects as its own
    role (pipeline, worker-<model>, tenant-demo) with the client config of that user.
    """

    home: Path = field(default_factory=lambda: KipSettings().home)
    port: int = 9092
    bootstrap_servers: str | None = None
    prefix: str = "kip"
    registry_dir: Path | None = None
    metrics_base_port: int = 9101
    worker_env: dict[str, str] = field(default_factory=dict)
    split_pipeline: bool = False   # one pipeline for interactive, one (niced) for the rest
    brokers: int = 1   # the local Kafka's: one broker, or a cluster
    own_broker: LocalBroker | LocalCluster | None = None   # the Kafka ``own_stack`` started
    secure: bool = False
    mtls: bool = False   # on a secured stack: every process connects with its certificate
    replication_factor: int | None = None   # unset: what the cluster can hold
    min_insync_replicas: int | None = None
    procs: list[subprocess.Popen] = field(default_factory=list)
    logs: dict[int, Path] = field(default_factory=dict)   # pid -> its log file
    signed: list[Path] = field(default_factory=list)   # signature files it wrote

    @cached_property
    def broker(self) -> LocalBroker | LocalCluster:
        if self.own_broker is not None:
            return self.own_broker
        return local_kafka(self.home / "kafka", self.brokers, port=self.port,
                           secure=self.secure, users=self.roles())

    @property
    def secured(self) -> LocalBroker | LocalCluster | None:
        """The broker, when this stack runs a secured one of its own."""
        if self.bootstrap_servers is not None and self.own_broker is None:
            return None
        return self.broker if self.broker.security else None

    @property
    def client_bootstrap(self) -> str:
        """Where kip's processes and clients connect: the mTLS listener with ``mtls``."""
        secured = self.secured
        return secured.mtls_bootstrap if secured and self.mtls else self.bootstrap

    def roles(self) -> list[str]:
        """The users of every role this stack runs or serves."""
        tenants = ensure_dev_access(self.access_file).tenants
        return (["pipeline", "operator", "audit-reader", "scaling"]
                + [f"worker-{m}" for m in REFERENCE_MODELS] + [f"tenant-{t}" for t in tenants])

    @property
    def bootstrap(self) -> str:
        return self.bootstrap_servers or self.broker.bootstrap

    @property
    def names(self) -> TopicNames:
        return TopicNames(self.prefix)

    @property
    def kafka(self) -> KafkaConnection:
        """The administrator's connection (topics, ACLs)."""
        secured = self.secured
        return secured.kafka if secured else KafkaConnection(bootstrap=self.bootstrap)

    def connection(self, user: str) -> KafkaConnection:
        """How ``user`` (a role: ``pipeline``, ``operator``, ``tenant-acme``, ...) connects."""
        secured = self.secured
        return secured.client(user) if secured else KafkaConnection(bootstrap=self.bootstrap)

    @property
    def registry(self) -> Registry:
        return Registry(self.registry_dir or self.home / "registry")

    @property
    def access_file(self) -> Path:
        return self.home / "access.json"

    @property
    def settings(self) -> KipSettings:
        """The settings this stack's processes run with (key files under ``home``)."""
        return KipSettings(home=self.home)

    def result_keys(self) -> dict[str, str]:
        """The public keys a client of this stack checks results with."""
        return dict(keys.result_keys(self.settings.result_public_keys_file).keys)

    def env(self) -> dict[str, str]:
        return os.environ | {"KIP_HOME": str(self.home),
                             "KIP_BOOTSTRAP": self.bootstrap,
                             "KIP_TOPIC_PREFIX": self.prefix,
                             "KIP_REGISTRY_DIR": str(self.registry.root),
                             "KIP_ACCESS_FILE": str(self.access_file),
                             "KIP_REQUIRE_SIGNED_MODELS": "true"} | self._replication_env()

    def _replication_env(self) -> dict[str, str]:
        wanted = {"KIP_REPLICATION_FACTOR": self.replication_factor,
                  "KIP_MIN_INSYNC_REPLICAS": self.min_insync_replicas}
        return {name: str(value) for name, value in wanted.items() if value is not None}

    def prepare(self, log=print) -> None:
        """Broker running, topics applied, reference models built, access file present."""
        if self.bootstrap_servers is None:
            self.broker.start(log=log)
        private_dir(self.home)
        for made in self.settings.ensure_keys():
            log(f"made {made}")
        tenants = ensure_dev_access(self.access_file).tenants
        replication = self.replication()
        report = asyncio.run(apply(self.kafka, catalogue(
            self.names, REFERENCE_MODELS, tenants=list(tenants), replication=replication)))
        log(f"topics: {len(report.created)} created, {len(report.unchanged)} unchanged, "
            f"{len(report.drift)} drifted (replication factor {replication.factor}, "
            f"min.insync.replicas {replication.min_insync})")
        for line in report.drift:
            log(f"  DRIFT {line}")
        for line in report.warnings:
            log(f"  WARNING {line}")
        if self.secured:
            acls = asyncio.run(apply_acls(self.kafka, self.names, self.acl_plan()))
            log(f"acls: {len(acls.created)} created, {len(acls.unchanged)} unchanged")
            quotas = asyncio.run(apply_quotas(self.kafka, broker_quotas(
                AccessConfig.from_file(self.access_file))))
            log(f"broker quotas: {len(quotas.set)} set, {len(quotas.unchanged)} unchanged")
        build_reference(self.registry, log)
        self.sign_models(REFERENCE_MODELS)

    def acl_plan(self) -> set:
        """The grants ``kip acls apply`` makes for this stack's principals."""
        tenants = ensure_dev_access(self.access_file).tenants
        return plan(self.names, REFERENCE_MODELS,
                    {t: policy.priorities for t, policy in tenants.items()})

    def topic_names(self) -> list[str]:
        """Every topic of this stack's catalogue."""
        tenants = ensure_dev_access(self.access_file).tenants
        return [s.name for s in catalogue(self.names, REFERENCE_MODELS, tenants=list(tenants))]

    def replication(self) -> Replication:
        """How this stack's topics are replicated: as its fields say, else what its
        cluster can hold."""
        settings = KipSettings(replication_factor=self.replication_factor,
                               min_insync_replicas=self.min_insync_replicas)
        return settings.replication(asyncio.run(cluster_brokers(self.kafka)))

    def sign_models(self, aliases) -> None:
        """The versions ``aliases`` point to, signed with this stack's model key, which its
        pipeline and workers trust (``KIP_REQUIRE_SIGNED_MODELS`` is on in ``env``)."""
        key = keys.model_signing_key(self.settings.model_signing_key_file)
        for alias in aliases:
            mv = self.registry.resolve(alias)
            self.signed.append(sign(mv.path, mv.manifest, key, "kip up", now_ms()))

    def remove_signatures(self) -> None:
        """Remove the model signatures this stack wrote. A stack in a temporary home signs
        with a key that goes with it: left behind, each run's signature would stay in the
        registry, and every process that routes to or loads the version reads them all."""
        for path in self.signed:
            path.unlink(missing_ok=True)
        self.signed.clear()

    def start_services(self, log=print) -> None:
        """The pipeline and one worker per reference model, as child processes."""
        pipelines = [["pipeline"]]
        if self.split_pipeline:
            pipelines = [["pipeline", "--classes", "interactive"],
                         ["pipeline", "--classes", "standard,batch", "--nice", "19"]]
        commands = pipelines + [["worker", "--model", m] for m in REFERENCE_MODELS]
        for i, args in enumerate(commands):
            port = self.metrics_base_port + i if self.metrics_base_port else 0
            self.procs.append(self.spawn(args, port, log))

    def spawn(self, args: list[str], metrics_port: int = 0, log=print,
              host: Host | None = None) -> subprocess.Popen:
        """Start one ``kip`` subcommand as a child process logging to ``home``; on
        ``host`` (devkit/hosts.py) where given, with a ``KIP_HOME`` of that host's."""
        env = (self.env() | self.worker_env | self._credentials(args)
               | {"KIP_METRICS_PORT": str(metrics_port)} | self._host_env(host))
        home = self.home / "hosts" / host.name if host else self.home
        logfile = home / ("-".join(a for a in args if not a.startswith("--")) + ".log")
        with open_private_log(logfile) as out:
            proc = subprocess.Popen([*(host.prefix if host else []), sys.executable, "-m",
                                     "kip.cli", *args], env=env,
                                    stdout=out, stderr=subprocess.STDOUT)
        self.logs[proc.pid] = logfile
        log(f"started kip {' '.join(args)} (pid {proc.pid}, metrics on :{metrics_port}, "
            f"log {logfile})")
        return proc

    def _host_env(self, host: Host | None) -> dict[str, str]:
        """A process on a host of its own keeps its state under that host's home and is
        given the deployment's keys and access file, as a deployment mounts them."""
        if host is None:
            return {}
        s = self.settings
        return {"KIP_HOME": str(self.home / "hosts" / host.name),
                "KIP_ACCESS_FILE": str(self.access_file),
                "KIP_STAMP_KEYS_FILE": str(s.stamp_keys_file),
                "KIP_RESULT_SIGNING_KEY_FILE": str(s.result_signing_key_file),
                "KIP_RESULT_PUBLIC_KEYS_FILE": str(s.result_public_keys_file),
                "KIP_MODEL_PUBLIC_KEYS_FILE": str(s.model_public_keys_file)}

    def _credentials(self, args: list[str]) -> dict[str, str]:
        """On a secured stack, the client config of the role ``args`` run as."""
        if self.secured is None:
            return {}
        role = (f"worker-{args[args.index('--model') + 1]}" if args[0] == "worker"
                else args[0])
        return {"KIP_KAFKA_CONFIG": str(self.secured.client_config(role, mtls=self.mtls)),
                "KIP_BOOTSTRAP": self.client_bootstrap}

    def restart(self, index: int, timeout_s: float = 20.0) -> float:
        """Stop service ``index`` (0: the pipeline) with SIGTERM and start it again;
        return how long the old process took to exit."""
        stopped_s = self.stop_service(index, timeout_s)
        self.start_service(index)
        return stopped_s

    def stop_service(self, index: int, timeout_s: float = 20.0) -> float:
        """Stop service ``index`` with SIGTERM; return how long it took to exit."""
        started = time.monotonic()
        terminate([self.procs[index]], timeout_s)
        return time.monotonic() - started

    def start_service(self, index: int) -> None:
        """Start service ``index`` again, as it was started, on its metrics port."""
        self.procs[index] = self.spawn(self.procs[index].args[3:], self.metrics_port(index),
                                       log=lambda *_: None)

    def metrics_port(self, index: int) -> int:
        return self.metrics_base_port + index if self.metrics_base_port else 0

    def check_services(self) -> None:
        """Raise, with the end of its log, if a service has exited."""
        for proc in self.procs:
            if proc.poll() is not None:
                raise RuntimeError(f"kip {' '.join(proc.args[3:])} exited with "
                                   f"{proc.returncode}; the end of its log:\n"
                                   + _tail(self.logs.get(proc.pid)))

    def stop_services(self, timeout_s: float = 20.0) -> None:
        terminate(list(reversed(self.procs)), timeout_s)
        self.procs.clear()


@dataclass(frozen=True)
class ClientSpec:
    """What a ``KipClient`` needs, in a form a child process can be handed."""

    bootstrap: str
    tenant: str
    key_id: str
    secret: str
    topic_prefix: str
    reply_to: str | None = None
    kafka: dict = field(default_factory=dict)   # security options (KafkaConnection's)
    result_keys: dict = field(default_factory=dict)   # key id -> hex public key
    request_partition: int | None = None   # the tenant's, where the access file names one

    def client(self) -> KipClient:
        """A client (not started)."""
        return KipClient(self.bootstrap, tenant=self.tenant, key_id=self.key_id,
                         secret=self.secret, topic_prefix=self.topic_prefix,
                         reply_to=self.reply_to, result_keys=self.result_keys,
                         request_partition=self.request_partition, **self.kafka)


def dev_spec(stack: DevStack, reply_to: str | None = None) -> ClientSpec:
    """The demo tenant's client, with the key from the stack's access file."""
    key = ensure_dev_access(stack.access_file).keys[DEV_KEY_ID]
    return ClientSpec(stack.client_bootstrap, key.tenant, DEV_KEY_ID,
                      key.secret.get_secret_value(), stack.prefix, reply_to,
                      tenant_credentials(stack, key.tenant), stack.result_keys())


def tenant_spec(stack: DevStack, key_id: str, reply_to: str | None = None) -> ClientSpec:
    """The client of API key ``key_id``'s tenant, as the stack's access file has it."""
    access = AccessConfig.from_file(stack.access_file)
    key = access.keys[key_id]
    return ClientSpec(stack.client_bootstrap, key.tenant, key_id,
                      key.secret.get_secret_value(), stack.prefix, reply_to,
                      tenant_credentials(stack, key.tenant), stack.result_keys(),
                      access.tenants[key.tenant].request_partition)


def tenant_credentials(stack: DevStack, tenant: str) -> dict:
    """How ``tenant``'s producer connects (to ``client_bootstrap``): as its own SCRAM
    user on a secured stack, or with its certificate with ``mtls``."""
    if stack.secured is None:
        return {}
    security, user = stack.secured.security, f"tenant-{tenant}"
    options = (security.mtls_client(user, stack.secured.mtls_bootstrap) if stack.mtls
               else security.client(user, stack.bootstrap))
    return {k: v for k, v in options.items() if k != "bootstrap"}


def dev_client(stack: DevStack, reply_to: str | None = None) -> KipClient:
    """A client (not started) of the demo tenant."""
    return dev_spec(stack, reply_to).client()


def _tail(path: Path | None, lines: int = 15) -> str:
    if path is None or not path.exists():
        return "(no log)"
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def terminate(procs: list[subprocess.Popen], timeout_s: float) -> None:
    """SIGTERM, then SIGKILL whatever has not exited within ``timeout_s``."""
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    for proc in procs:
        try:
            proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

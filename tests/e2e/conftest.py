"""A running kip on a session broker: the pipeline and one worker per reference model,
each its own process, on topics with a prefix unique to this module. Every e2e test runs
twice: on the plain broker, and on the secured one, where every process and every test
client connects as its own principal with only the ACLs of ``kip acls apply``."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest
from kip.devkit.broker import free_port_run
from kip.devkit.stack import REFERENCE_MODELS, DevStack, tenant_credentials
from kip.client import KipClient
from kip.pipeline.access import AccessConfig, ApiKey, TenantPolicy
from kip.schemas import AuditRecord, DeadLetterRecord, InferenceResult, Route, WorkItem, decode
from kip.schemas.messages import WorkerTelemetry
from kip.schemas.codec import encode, now_ms
from kip.schemas.result_signatures import request_sha256
from kip.schemas.stamps import stamped
from kip.transport.clients import KafkaConnection
from kip.transport.reading import assign_all, reached, reader_to_end

SECRETS = {"acme-k1": "acme-secret", "lim-k1": "lim-secret", "greedy-k1": "greedy-secret",
           "modest-k1": "modest-secret", "restart-k1": "restart-secret"}
TENANT_OF = {"acme-k1": "acme", "lim-k1": "limited", "greedy-k1": "greedy",
             "modest-k1": "modest", "restart-k1": "restart"}
WARMUP_TIMEOUT_S = 120


KAFKA_OF = {"plain": "broker", "secured": "secure_broker", "cluster": "cluster"}


@pytest.fixture(scope="module", params=["plain", "secured"])
def stack(request, registry, tmp_path_factory):
    yield from stack_on(request, registry, tmp_path_factory)


def stack_on(request, registry, tmp_path_factory) -> Iterator[DevStack]:
    """A running stack on the Kafka ``request.param`` names (``KAFKA_OF``): a module
    whose tests must also hold on a cluster of three asks for ``cluster`` too."""
    kafka = request.getfixturevalue(KAFKA_OF[request.param])
    with running(_new_stack(kafka, registry, tmp_path_factory), _access(), _warm_up) as s:
        yield s


@pytest.fixture(scope="package")
def plain_stack(broker, registry, tmp_path_factory):
    """A stack on the plain broker only, shared by the modules that use it: for attacks a
    secured cluster's ACLs would stop before kip saw them (anyone may write any topic).
    Unsigned messages are answered, not shed, up to a burst of 1,000 (test_fuzz checks
    that each of its malformed messages ends once)."""
    stack = _new_stack(broker, registry, tmp_path_factory)
    stack.worker_env["KIP_ADMISSION"] = '{"unsigned_burst": 1000}'
    with running(stack, _access(), _warm_up) as s:
        yield s


def _new_stack(broker, registry, tmp_path_factory) -> DevStack:
    return DevStack(home=tmp_path_factory.mktemp("kip"), own_broker=broker,
                    prefix=f"e2e{uuid.uuid4().hex[:8]}", registry_dir=registry.root,
                    metrics_base_port=free_port_run(len(REFERENCE_MODELS) + 2))


def _access() -> AccessConfig:
    return AccessConfig(
        keys={k: ApiKey(tenant=TENANT_OF[k], secret=SECRETS[k]) for k in SECRETS},
        tenants={t: TenantPolicy(models=["digits"] if t == "limited" else ["*"])
                 for t in TENANT_OF.values()})


@contextmanager
def running(s: DevStack, access: AccessConfig, warm_up) -> Iterator[DevStack]:
    """``s`` prepared with ``access`` as its access file, its services started and
    ``warm_up`` passed; the services stop on exit. Then ``kip audit verify``'s check
    must hold over everything the stack's stages wrote to the audit topic."""
    s.home.mkdir(parents=True, exist_ok=True)
    s.access_file.write_text(access.to_json())
    s.prepare(log=lambda *_: None)
    s.start_services(log=lambda *_: None)
    try:
        asyncio.run(warm_up(s))
        yield s
    finally:
        s.stop_services()
    _audit_chains_hold(s)


def _audit_chains_hold(s: DevStack) -> None:
    from kip.audit.reading import verify
    from kip.runtime import keys

    trusted = keys.result_keys(s.settings.result_public_keys_file).verifier()
    summary = asyncio.run(verify(s.connection("audit-reader"), s.names, trusted, 0))
    assert summary.ok, [str(p) for p in summary.problems[:5]]
    assert summary.sealed > 0


async def _warm_up(s: DevStack) -> None:
    """Until both models answer; fails at once if a service process has exited."""
    async with client_for(s) as kip:
        for model, inputs in (("minilm", {"text": ["warm"]}),
                              ("digits", {"pixels": np.zeros((1, 64), np.float32)})):
            await _first_result(s, kip, model, inputs)


async def _first_result(s: DevStack, kip: KipClient, model: str, inputs: dict) -> None:
    for _ in range(WARMUP_TIMEOUT_S // 5):
        s.check_services()
        try:
            result = await kip.infer(model, inputs, timeout_s=5, retry_s=5)
        except TimeoutError:
            continue
        assert result.status == "ok", result
        return
    raise TimeoutError(f"{model} gave no result within {WARMUP_TIMEOUT_S}s")


def client_for(s: DevStack, tenant: str | None = None, key_id: str = "acme-k1",
               secret: str | None = None, reply_to: str | None = None) -> KipClient:
    """A client of a tenant, connected as that tenant's principal."""
    tenant = tenant or TENANT_OF.get(key_id, "acme")
    return KipClient(s.client_bootstrap, tenant=tenant, key_id=key_id,
                     secret=secret or SECRETS.get(key_id, "x"), topic_prefix=s.prefix,
                     reply_to=reply_to, result_keys=s.result_keys(),
                     **tenant_credentials(s, tenant))


async def publish_as(s: DevStack, user: str, topic: str, value: bytes | None,
                     key: bytes | None = None, headers: list | None = None,
                     partition: int | None = None):
    """Publish as ``user`` (a stage's principal): what only kip itself may write."""
    producer = s.connection(user).producer()
    await producer.start()
    try:
        return await producer.send_and_wait(topic, value, key=key, headers=headers,
                                            partition=partition)
    finally:
        await producer.stop()


def work_item(s: DevStack, request, stamp: bool = True, **fields) -> WorkItem:
    """A digits work item for ``request`` as the pipeline would write it to partition 0
    of its work topic (``fields`` override), stamped with the stack's key unless
    ``stamp`` is False."""
    version = s.registry.aliases()["digits"].split("@")[1]
    manifest = s.registry.get("digits", version).manifest
    item = WorkItem(**({"request": request, "routed_at_ms": now_ms(),
                        "deadline_ms": now_ms() + 30_000, "work_partition": 0,
                        "reply_to": s.names.reply_topic(request.tenant),
                        "request_sha256": request_sha256(encode(request)),
                        "route": Route(alias="digits", model_name="digits",
                                       model_version=version,
                                       artifact_sha256=manifest.artifact_sha256)} | fields))
    return stamped(item, s.settings.stamp_keys()) if stamp else item


async def read_topic(kafka: KafkaConnection, topic: str) -> list:
    """Every committed record of ``topic`` from the beginning to its current end."""
    consumer = reader_to_end(kafka)
    await consumer.start()
    try:
        tps = await assign_all(consumer, topic)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        records = []
        while not await reached(consumer, ends):
            for batch in (await consumer.getmany(timeout_ms=500)).values():
                records += batch
        return records
    finally:
        await consumer.stop()


async def outputs_of(s: DevStack, request_id: str, settle_s: float = 0.5) -> dict[str, list]:
    """Results, audit records and dead letters for ``request_id`` (after ``settle_s``)."""
    await asyncio.sleep(settle_s)
    names = s.names
    reply_topics = [names.results] + [names.reply_topic(t) for t in set(TENANT_OF.values())]
    out = {"results": [], "audit": [], "deadletter": []}
    for kind, cls, topics in (("results", InferenceResult, reply_topics),
                              ("audit", AuditRecord, [names.audit]),
                              ("deadletter", DeadLetterRecord, [names.deadletter])):
        for topic in topics:
            for record in await read_topic(s.kafka, topic):
                message = decode(cls, record.value)
                if getattr(message, "request_id", None) == request_id:
                    out[kind].append(message)
    return out


@contextmanager
def overloaded(s: DevStack, model: str) -> Iterator[None]:
    """``model`` looks overloaded to admission: telemetry of a fake worker of it with a
    huge interactive backlog, published as that model's workers would; gone on exit."""
    worker_id = f"fake-busy-{model}"
    fake = WorkerTelemetry(worker_id=worker_id, model=model, versions=["x"], provider="test",
                           requests_per_s=1.0, backlog={"interactive": 100_000},
                           memory_rss_bytes=0, at_ms=now_ms())

    async def publish(value: bytes | None) -> None:
        await publish_as(s, f"worker-{model}", s.names.telemetry, value,
                         key=worker_id.encode())
    asyncio.run(publish(encode(fake)))
    try:
        asyncio.run(asyncio.sleep(1))   # the pipeline follows the telemetry topic
        yield
    finally:
        asyncio.run(publish(None))   # the fake worker leaves


def explained(s: DevStack, request_id: str) -> str:
    """``kip audit explain``'s words for ``request_id`` (read as the audit reader)."""
    from kip.audit.reading import explain, trail

    found = asyncio.run(trail(s.connection("audit-reader"), s.names, request_id,
                              now_ms() - 600_000))
    return "\n".join(explain(found))


def publish_variant(s: DevStack, tmp_path, base: str, tag: str, name: str,
                    **manifest_fields) -> str:
    """The version ``base`` (an alias) points to, its graph under the doc string ``tag``
    and its files, published in the stack's registry as model ``name`` (with
    ``manifest_fields`` over its manifest) and signed: a new version of the same model."""
    import onnx

    source = s.registry.resolve(base)
    graph = onnx.load(str(source.artifact))
    graph.doc_string = tag
    path = tmp_path / f"{tag}.onnx"
    onnx.save(graph, str(path))
    manifest = source.manifest.model_dump(exclude={"version", "artifact_sha256",
                                                   "files_sha256"})
    files = {fname: source.file(fname) for fname in source.manifest.files_sha256}
    mv = s.registry.publish(path, manifest | {"name": name} | manifest_fields, files)
    target = f"{name}@{mv.manifest.version}"
    s.sign_models([target])
    return target

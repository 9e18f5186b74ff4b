"""Pure-logic fixtures: an access config, a router over a small registry, a context."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kip.client import KipClient
from kip.models.registry import Registry
from kip.pipeline.access import AccessConfig, ApiKey, TenantPolicy
from kip.pipeline.capacity import CapacityView
from kip.pipeline.decide import decide
from kip.pipeline.decisions import Context, Decision, Origin
from kip.pipeline.routing import Router
from kip.schemas.codec import REQUEST_ID_HEADER
from kip.schemas.deadletter import hints
from kip.schemas.envelopes import envelope
from kip.schemas.messages import WorkerTelemetry
from kip.schemas.result_signatures import request_sha256
from kip.topics.catalogue import catalogue
from kip.topics.names import TopicNames

NOW_MS = 1_800_000_000_000
DIGITS_MANIFEST = {
    "name": "digits", "inputs": [{"name": "pixels", "datatype": "FP32", "shape": [-1, 64]}],
    "outputs": [{"name": "label", "datatype": "INT64", "shape": [-1]}],
    "max_batch": 8, "memory_estimate_bytes": 1}


@pytest.fixture
def access() -> AccessConfig:
    return AccessConfig(
        keys={"acme-k1": ApiKey(tenant="acme", secret="acme-secret"),
              "lim-k1": ApiKey(tenant="limited", secret="lim-secret")},
        tenants={"acme": TenantPolicy(models=["*"]),
                 "limited": TenantPolicy(models=["minilm"], priorities=["batch"])})


@pytest.fixture
def small_registry(tmp_path) -> Registry:
    """A registry whose one version has a placeholder artifact: routing reads only
    manifests, so no ONNX file is needed to test decisions."""
    reg = Registry(tmp_path / "registry")
    artifact = tmp_path / "model.onnx"
    artifact.write_bytes(b"placeholder, never loaded by the pipeline")
    mv = reg.publish(artifact, DIGITS_MANIFEST, {})
    reg.set_alias("digits", f"digits@{mv.manifest.version}")
    return reg


@pytest.fixture
def ctx(access, small_registry) -> Context:
    """A context in which each of the catalogue's models has one live worker whose
    throughput is not yet known (so no wait estimate): admission fails closed without
    one (pipeline/decide.py)."""
    names = TopicNames("kip")
    models = ["digits", "digits-small", "tiny"]
    topics = {s.name for s in catalogue(names, models)}
    context = Context(access, Router(small_registry), names, NOW_MS, topics=frozenset(topics))
    for model in models:
        report_live(context.capacity, model)
    return context


def report_live(capacity: CapacityView, model: str, requests_per_s: float = 0.0,
                backlog: dict | None = None, worker: str = "w1") -> None:
    """One worker of ``model`` reporting at ``NOW_MS``."""
    capacity.update(f"{model}.{worker}", WorkerTelemetry(
        worker_id=f"{model}.{worker}", model=model, versions=[], provider="cpu",
        requests_per_s=requests_per_s, backlog=backlog or {}, memory_rss_bytes=1,
        at_ms=NOW_MS))


def signer(tenant: str = "acme", key_id: str = "acme-k1", secret: str = "acme-secret",
           **kw) -> KipClient:
    """A client used only to build signed requests (never started)."""
    return KipClient("unused:0", tenant=tenant, key_id=key_id, secret=secret, **kw)


KEYS = {"acme": ("acme-k1", "acme-secret"), "limited": ("lim-k1", "lim-secret")}


def sealed(payload: bytes, origin: Origin) -> Origin:
    """``origin`` with the headers its tenant's client sends: ``kip-request-id`` (the one
    given, else the payload's request id) and ``kip-envelope``, by the tenant its key
    names (schemas/envelopes.py)."""
    tenant = (origin.key or b"").decode("utf-8", "replace")
    key_id, secret = KEYS.get(tenant, KEYS["acme"])
    rid = origin.header(REQUEST_ID_HEADER) or hints(payload).get("request_id") or "no-id"
    kept = tuple(h for h in origin.headers if h[0] != REQUEST_ID_HEADER)
    return replace(origin, headers=(*kept, (REQUEST_ID_HEADER, rid.encode()), envelope(
        secret.encode(), key_id, origin.topic, tenant, rid, request_sha256(payload))))


def decide_sealed(payload: bytes, origin: Origin, ctx: Context) -> Decision:
    """``decide`` of a message sent as its tenant's client sends it."""
    return decide(payload, sealed(payload, origin), ctx)

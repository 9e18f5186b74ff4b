"""Prometheus metrics every kip process exposes (prometheus-client)."""

from __future__ import annotations

import collections
from collections.abc import Iterable, Sequence
from typing import Protocol

from prometheus_client import Counter, Gauge, Histogram

from kip.runtime import probes
from kip.runtime.prometheus_adapter import observe_all
from kip.schemas.messages import AuditRecord

_LATENCY_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                      2.5, 5.0, 10.0, 30.0)

REQUESTS = Counter(
    "kip_requests", "Requests leaving a stage, by outcome and error code",
    ["stage", "outcome", "code", "priority", "model"])
LATENCY = Histogram(
    "kip_latency_seconds", "Latency by kind: end_to_end (issued to result), queue "
    "(routed to pulled), batch_wait (pulled to inference start), inference",
    ["kind", "priority", "model"], buckets=_LATENCY_BUCKETS_S)
BATCH_SIZE = Histogram(
    "kip_batch_rows", "Rows per inference call", ["model"],
    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512))

PARTITIONS_REVOKED = Counter(
    "kip_partitions_revoked", "Partitions a consumer-group rebalance took from this "
    "process (a steady rise: members time out, e.g. starved heartbeats)", ["group"])

REBALANCE_PAUSE = Histogram(
    "kip_rebalance_pause_seconds", "From a revocation to the assignment after it: how long "
    "this member of the group fetched nothing (every member pauses in an eager "
    "rebalance)", ["group"], buckets=_LATENCY_BUCKETS_S)
TAKEOVER = Histogram(
    "kip_partitions_takeover_seconds", "From an assignment to the partitions it moved "
    "here being fetched from: their producers built, their answered ids read back",
    ["group"], buckets=_LATENCY_BUCKETS_S)

MODELS_LOADED = Gauge(
    "kip_models_loaded", "Model versions this worker has loaded, with the execution "
    "provider ONNX Runtime really gave them", ["model", "version", "provider"])

WORK_REFUSED = Counter(
    "kip_work_refused", "Work items a worker refused before inference (no valid stamp, "
    "another model's, a reply topic outside the results namespace, inputs the manifest "
    "does not take), by code", ["model", "code"])

MODELS_REFUSED = Counter(
    "kip_models_refused", "Model versions refused before they were routed to (pipeline) "
    "or loaded (worker): unsigned, signed by no trusted key, or bytes that do not match "
    "the manifest", ["stage", "model", "reason"])

SHED = Counter(
    "kip_messages_shed", "Request messages no tenant provably sent (no valid envelope), "
    "past their key's allowance: shed unanswered, one audit record a round names them",
    ["priority"])

ROLLBACKS = Counter(
    "kip_release_rollbacks", "Canary releases the health gate rolled back (the reason is "
    "on the release record: `kip models releases`)")

TELEMETRY_FAILURES = Counter(
    "kip_telemetry_failures", "Telemetry reports a worker could not write: while they fail, "
    "pipelines stop hearing it and send its model no work once no worker of it is heard")

UNUSABLE_RECORDS = Counter(
    "kip_unusable_records", "Records of a followed topic (control, telemetry, quota "
    "levels) that could not be applied and were skipped", ["topic"])


def serve(port: int, host: str = "127.0.0.1") -> None:
    """Serve /metrics, /healthz and /readyz on ``host``:``port`` (port 0: do nothing;
    runtime/probes.py)."""
    probes.serve(port, host)


def count_outcomes(stage: str, decided: Iterable[tuple[AuditRecord, str]]) -> None:
    """Count decisions of ``stage``, each by its audit record: every request a stage ends
    or forwards has exactly one, so both stages count the same way. The model of each
    pair is its label, a name the caller vouches for (a model it knows, or "unknown"):
    label values never come from what a sender wrote, or one sender could grow /metrics
    without bound."""
    count_decisions(stage, ((audit.decision, audit.error_code or "", audit.priority or "",
                             model) for audit, model in decided))


def count_decisions(stage: str, labels: Iterable[tuple[str, str, str, str]]) -> None:
    """Count decisions of ``stage`` by their labels (decision, code, priority, model):
    one counter update per label set, as a round of hundreds of decisions usually has a
    handful."""
    for values, n in collections.Counter(labels).items():
        REQUESTS.labels(stage, *values).inc(n)


def count_model_refused(stage: str, model: str, err) -> None:
    """One refusal of a version of ``model`` (a name from the registry, not a request)."""
    MODELS_REFUSED.labels(stage, model, err.reason).inc()


class Latencies(Protocol):
    """A terminal result's class and milliseconds (a worker's ``Ended``)."""

    priority: str | None
    total_ms: float
    queue_ms: float | None
    batch_wait_ms: float | None


def observe_latencies(results: Sequence[Latencies], model: str) -> None:
    """End-to-end, queue and batch-wait latency of terminal results of ``model``. Each
    label set is looked up once per call, not once per result (a worker batch's results
    have one or two classes), and takes its observations together (``observe_all``)."""
    for priority in {r.priority for r in results}:
        labels = (priority or "", model)
        timings = [r for r in results if r.priority == priority]
        observe_all(LATENCY.labels("end_to_end", *labels), [t.total_ms / 1000 for t in timings])
        observe_all(LATENCY.labels("queue", *labels),
                    [t.queue_ms / 1000 for t in timings if t.queue_ms is not None])
        observe_all(LATENCY.labels("batch_wait", *labels),
                    [t.batch_wait_ms / 1000 for t in timings if t.batch_wait_ms is not None])

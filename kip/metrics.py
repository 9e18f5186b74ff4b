"""Prometheus metrics every kip process exposes (prometheus-client)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram, start_http_server

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

MODELS_LOADED = Gauge(
    "kip_models_loaded", "Model versions this worker has loaded, with the execution "
    "provider ONNX Runtime really gave them", ["model", "version", "provider"])


def serve(port: int) -> None:
    """Serve /metrics on ``port`` (0: do nothing)."""
    if port:
        start_http_server(port, addr="0.0.0.0")


def count(stage: str, outcome: str, code: str | None, priority: str | None,
          model: str | None) -> None:
    REQUESTS.labels(stage, outcome, code or "", priority or "", model or "").inc()

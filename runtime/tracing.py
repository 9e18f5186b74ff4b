"""Traces: OpenTelemetry spans for each hop of a request, off unless the OTEL_* variables
ask for them. The one module that speaks to OpenTelemetry's API and SDK.

On where ``OTEL_TRACES_EXPORTER`` names ``otlp`` or ``console``, or an OTLP endpoint is
set (``OTEL_EXPORTER_OTLP_ENDPOINT``, ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``), and
``OTEL_SDK_DISABLED`` is not ``true``. Spans then go to an OTLP/HTTP exporter (it reads
the other ``OTEL_EXPORTER_OTLP_*`` variables itself) through a batching processor, so
no hop waits on the collector. Off, each function here returns at its first line.

The hops (docs/architecture.md, "Traces") follow OpenTelemetry's messaging conventions:
``send {topic}`` (KipClient), ``process {requests topic}`` (the pipeline's admission, a
child of the request's ``traceparent``), ``wait {work topic}`` (routed to pulled, a child
of the admission), and per pulled batch ``process {work topic}``, which links every
request it served and has ``inference {model}`` and ``commit {work topic}`` as children.
Spans are recorded with the times kip measured already (its stamps), so tracing adds no
clock reads to the hot path and needs no context carried across tasks.
"""

from __future__ import annotations

import atexit
import os
from collections.abc import Iterable, Mapping

ENABLED = False
_tracer = None
_propagator = None
_provider = None
Attributes = Mapping[str, str | int | float | bool]


def wanted(env: Mapping[str, str] = os.environ) -> bool:
    """Whether the environment asks for traces."""
    if env.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return False
    exporter = env.get("OTEL_TRACES_EXPORTER", "").lower()
    if exporter:
        return exporter in ("otlp", "console")
    return bool(env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
                or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))


def configure(service: str) -> bool:
    """Turn tracing on for this process where the environment asks (once; ``service`` is
    ``service.name`` unless ``OTEL_SERVICE_NAME`` says otherwise). Returns whether on."""
    global ENABLED, _tracer, _propagator, _provider
    if ENABLED or not wanted():
        return ENABLED
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    name = os.environ.get("OTEL_SERVICE_NAME") or service
    provider = TracerProvider(resource=Resource.create({"service.name": name}))
    provider.add_span_processor(BatchSpanProcessor(_exporter()))
    atexit.register(provider.shutdown)   # what is still batched goes out at exit
    _tracer, _provider = provider.get_tracer("kip"), provider
    _propagator = TraceContextTextMapPropagator()
    ENABLED = True
    return True


def shutdown() -> None:
    """Export what is batched and turn tracing off (a process that turned it on for a
    while: a test, a benchmark)."""
    global ENABLED, _tracer, _provider
    if _provider is not None:
        _provider.shutdown()
    ENABLED, _tracer, _provider = False, None, None


def flush(timeout_s: float = 5.0) -> None:
    """Export every span ended so far, now."""
    if _provider is not None:
        _provider.force_flush(int(timeout_s * 1000))


def _exporter():
    if os.environ.get("OTEL_TRACES_EXPORTER", "").lower() == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter
        return ConsoleSpanExporter()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    return OTLPSpanExporter()


def _context(traceparent: str | None):
    return _propagator.extract({"traceparent": traceparent}) if traceparent else None


def _links(traceparents: Iterable[str | None]) -> list:
    from opentelemetry.trace import Link, get_current_span
    links = []
    for traceparent in traceparents:
        context = get_current_span(_context(traceparent)).get_span_context()
        if context.is_valid:
            links.append(Link(context))
    return links


def _kind(name: str):
    from opentelemetry.trace import SpanKind
    return getattr(SpanKind, name.upper())


def _ns(ms: float) -> int:
    return int(ms * 1_000_000)


def trace_id(traceparent: str | None) -> str:
    """The trace id a request's log lines carry (``-`` for a message without one): a
    log line and a trace of one request are found by the same id, with tracing off too."""
    parts = (traceparent or "").split("-")
    return parts[1] if len(parts) == 4 and len(parts[1]) == 32 else "-"


def traceparent_of(span) -> str | None:
    """The W3C ``traceparent`` of ``span`` (None: none, or tracing off)."""
    if span is None:
        return None
    context = span.get_span_context()
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"


def start(name: str, start_ms: float, attributes: Attributes, *, parent: str | None = None,
          links: Iterable[str | None] = (), kind: str = "internal"):
    """A span begun at ``start_ms``, under the span ``parent`` names (a traceparent) and
    linked to ``links``; end it with ``end``. None while tracing is off."""
    if not ENABLED:
        return None
    return _tracer.start_span(name, context=_context(parent), kind=_kind(kind),
                              attributes=dict(attributes), links=_links(links),
                              start_time=_ns(start_ms))


def child(parent, name: str, start_ms: float, end_ms: float, attributes: Attributes,
          kind: str = "internal") -> None:
    """A finished span under the span ``parent`` (from ``start``; None: nothing)."""
    if parent is None:
        return
    from opentelemetry.trace import set_span_in_context
    span = _tracer.start_span(name, context=set_span_in_context(parent), kind=_kind(kind),
                              attributes=dict(attributes), start_time=_ns(start_ms))
    span.end(end_time=_ns(end_ms))


def end(span, end_ms: float, attributes: Attributes | None = None) -> None:
    if span is None:
        return
    if attributes:
        span.set_attributes(dict(attributes))
    span.end(end_time=_ns(end_ms))


def record(name: str, start_ms: float, end_ms: float, attributes: Attributes, *,
           parent: str | None = None, kind: str = "internal") -> str | None:
    """A finished span; returns its traceparent, for the hops after it (None: off)."""
    span = start(name, start_ms, attributes, parent=parent, kind=kind)
    end(span, end_ms)
    return traceparent_of(span)


def messaging(operation: str, topic: str, partition: int | None = None,
              offset: int | None = None, group: str | None = None,
              batch: int | None = None) -> dict:
    """The messaging conventions' attributes of a Kafka operation."""
    out: dict = {"messaging.system": "kafka", "messaging.operation.type": operation,
                 "messaging.destination.name": topic}
    if partition is not None:
        out["messaging.destination.partition.id"] = str(partition)
    if offset is not None:
        out["messaging.kafka.offset"] = offset
    if group is not None:
        out["messaging.consumer.group.name"] = group
    if batch is not None:
        out["messaging.batch.message_count"] = batch
    return out

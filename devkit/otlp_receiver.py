"""An OTLP/HTTP trace receiver on loopback, for the trace tests and ``kip bench cost``.

It takes what an OpenTelemetry SDK's OTLP/HTTP exporter sends (``POST /v1/traces``, an
``ExportTraceServiceRequest`` in protobuf, gzip or not), decodes it with OpenTelemetry's
own protobuf classes, and keeps every span, so a test reads the spans that left kip's
processes over the wire as a collector would receive them.
"""

from __future__ import annotations

import gzip
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from kip.devkit.broker import free_port_run


@dataclass(frozen=True)
class ReceivedSpan:
    service: str
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    kind: int
    start_ns: int
    end_ns: int
    attributes: dict
    links: tuple[tuple[str, str], ...] = field(default=())   # (trace id, span id)


class OtlpReceiver:
    def __init__(self) -> None:
        self.port = free_port_run(1)
        self.spans: list[ReceivedSpan] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    @property
    def endpoint(self) -> str:
        """What ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is set to."""
        return f"http://127.0.0.1:{self.port}/v1/traces"

    def env(self, schedule_delay_ms: int = 200) -> dict[str, str]:
        """The variables that make a kip process export its spans here, soon after each."""
        return {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": self.endpoint,
                "OTEL_BSP_SCHEDULE_DELAY": str(schedule_delay_ms)}

    def start(self) -> OtlpReceiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                receiver.take(body)
                answer = _response()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True,
                         name="otlp-receiver").start()
        return self

    def take(self, body: bytes) -> None:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest)
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        spans = [span for resource in request.resource_spans for span in _spans(resource)]
        with self._lock:
            self.spans.extend(spans)

    def received(self) -> list[ReceivedSpan]:
        with self._lock:
            return list(self.spans)

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


def _spans(resource_spans) -> list[ReceivedSpan]:
    service = _attributes(resource_spans.resource.attributes).get("service.name", "")
    return [ReceivedSpan(service, s.name, s.trace_id.hex(), s.span_id.hex(),
                         s.parent_span_id.hex(), s.kind, s.start_time_unix_nano,
                         s.end_time_unix_nano, _attributes(s.attributes),
                         tuple((link.trace_id.hex(), link.span_id.hex()) for link in s.links))
            for scope in resource_spans.scope_spans for s in scope.spans]


def _attributes(pairs) -> dict:
    out = {}
    for pair in pairs:
        value = pair.value
        kind = value.WhichOneof("value")
        out[pair.key] = getattr(value, kind) if kind else None
    return out


def _response() -> bytes:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceResponse)
    return ExportTraceServiceResponse().SerializeToString()


def tree(spans: list[ReceivedSpan], trace_id: str) -> list[str]:
    """The spans of one trace as an indented tree, each with its service, its duration and
    the attributes a reader follows it by; then the spans outside it that link into it."""
    mine = [s for s in spans if s.trace_id == trace_id]
    ids = {s.span_id for s in mine}
    children: dict[str, list[ReceivedSpan]] = {}
    for span in mine:
        children.setdefault(span.parent_span_id if span.parent_span_id in ids else "", []
                            ).append(span)
    lines: list[str] = []

    def walk(parent: str, depth: int) -> None:
        for span in sorted(children.get(parent, []), key=lambda s: s.start_ns):
            lines.append("  " * depth + _line(span))
            walk(span.span_id, depth + 1)
    walk("", 0)
    for span in spans:
        if span.trace_id != trace_id and any(t == trace_id for t, _ in span.links):
            lines.append(f"linked from another trace: {_line(span)}")
            for child in sorted((s for s in spans if s.parent_span_id == span.span_id),
                                key=lambda s: s.start_ns):
                lines.append(f"  {_line(child)}")
    return lines


def _line(span: ReceivedSpan) -> str:
    shown = {k: v for k, v in span.attributes.items() if k.startswith(("kip.", "messaging."))}
    return (f"{span.name} [{span.service}] {(span.end_ns - span.start_ns) / 1e6:.2f} ms "
            + " ".join(f"{k}={v}" for k, v in sorted(shown.items())))

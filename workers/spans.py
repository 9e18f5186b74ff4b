"""A worker's spans (runtime/tracing.py), from the times its stamps already hold.

Per request, ``wait {work topic}``: routed to pulled, a child of the pipeline's
admission span (whose context the work record's ``traceparent`` header carries). Per
class of a pulled batch, ``process {work topic}``, linking every request it holds, with
``inference {model}`` per inference call and ``commit {work topic}`` as children.
"""

from __future__ import annotations

from aiokafka.structs import ConsumerRecord

from kip.runtime import tracing
from kip.schemas.codec import TRACE_HEADER
from kip.schemas.messages import WorkItem


def trace_of(record: ConsumerRecord) -> str | None:
    for key, value in record.headers or ():
        if key == TRACE_HEADER and value:
            return value.decode("ascii", "replace")
    return None


def batch(records: list[ConsumerRecord], pulled_ms: float, group: str, model: str,
          priority: str):
    """The batch span of one class of a pulled batch (None while tracing is off)."""
    if not tracing.ENABLED or not records:
        return None
    topic = records[0].topic
    return tracing.start(f"process {topic}", pulled_ms, tracing.messaging(
        "process", topic, group=group, batch=len(records)) | {
            "kip.model": model, "kip.priority": priority},
        links=[trace_of(r) for r in records], kind="consumer")


def waits(pairs: list[tuple[ConsumerRecord, WorkItem]], pulled_ms: float, group: str) -> None:
    """Each request's wait in its work topic."""
    if not tracing.ENABLED:
        return
    for record, item in pairs:
        tracing.record(f"wait {record.topic}", item.routed_at_ms, pulled_ms,
                       tracing.messaging("receive", record.topic, record.partition,
                                         record.offset, group)
                       | {"kip.request_id": item.request.request_id,
                          "kip.model": item.route.model_name,
                          "kip.model_version": item.route.model_version,
                          "kip.artifact_sha256": item.route.artifact_sha256,
                          "kip.priority": item.request.priority.value},
                       parent=trace_of(record) or item.request.traceparent)


def inference(span, model: str, version: str, started_ms: float, finished_ms: float,
              requests: int, rows: int) -> None:
    tracing.child(span, f"inference {model}", started_ms, finished_ms,
                  {"kip.model": model, "kip.model_version": version,
                   "kip.batch_requests": requests, "kip.batch_rows": rows})


def committed(span, topic: str, started_ms: float, ended_ms: float, partitions: int,
              committed_partitions: int) -> None:
    """The commit under ``span``, and ``span`` ended with it."""
    tracing.child(span, f"commit {topic}", started_ms, ended_ms,
                  tracing.messaging("settle", topic) | {
                      "kip.partitions": partitions,
                      "kip.partitions_committed": committed_partitions})
    tracing.end(span, ended_ms)

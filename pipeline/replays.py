"""Replay protection: a tenant's request id is admitted at most once within the replay
window, however often its message arrives, across restarts and partition moves.

Authentication already refuses a message issued outside the window (``issued_at_ms``),
so only ids admitted within it need remembering. ``SeenRequests`` holds them per request
partition: requests are keyed by tenant, so every copy of a tenant's request in a class
arrives on one partition, and whoever owns that partition decides them all (a message
keyed by anything else is refused before this check). A copy of an admitted request is
rejected with DUPLICATE_REQUEST before any quota is charged and is never run.

What a round admits is written, in the same transaction as its outputs and input
offsets, to ``kip.admitted.<class>`` (same partition number as the request partition).
A process that is given a partition first fences the previous owner (its open
transaction is aborted), then reads that partition of the admitted topic over the
window; only then does it decide the partition's requests. Why not rebuild from the
request topic itself: it holds every message, admitted or not, and telling which were
admitted would mean deciding them all again (docs/architecture.md, "Replays").

Only admitted ids count: a rejected request (quota, overload) may be sent again under its
id, and an unauthenticated message never takes an id from its tenant.

Ids are forgotten a bucket at a time: each is filed under its ``issued_at_ms`` rounded
down to ``BUCKET_MS``, and a bucket goes once all of it is older than the window, so an
id is kept for the window and at most ``BUCKET_MS`` more. Forgetting costs the ids
forgotten, not all the window holds: a pass over every id of a busy window held the
event loop long enough for every request of the process to wait on it.
"""

from __future__ import annotations

import logging

from aiokafka import TopicPartition

from kip.runtime import metrics
from kip.schemas.errors import DuplicateRequest
from kip.schemas.messages import InferenceRequest
from kip.transport.clients import KafkaConnection
from kip.transport.outputs import Record
from kip.transport.id_records import id_records, parse_id_record
from kip.transport.reading import partition_since

log = logging.getLogger("kip.pipeline")
Key = tuple[str, str]   # (tenant, request id)
Seen = dict[Key, int]   # -> issued_at_ms
BUCKET_MS = 2000


class SeenRequests:
    """Ids admitted within the window, per request partition, plus what this round has
    admitted and not yet written."""

    def __init__(self, window_ms: int) -> None:
        self.window_ms = window_ms
        self.partitions: dict[TopicPartition, Seen] = {}
        self.unwritten: dict[TopicPartition, list[list]] = {}
        self._buckets: dict[TopicPartition, dict[int, list[Key]]] = {}
        self._kept_from = 0   # the oldest bucket kept at the last sweep

    def check(self, tp: TopicPartition, tenant: str, request_id: str) -> None:
        """Raise ``DuplicateRequest`` if ``tenant``'s ``request_id`` was admitted in the
        window (the pipeline asks before it parses: the envelope vouches for both)."""
        seen = self.partitions.setdefault(tp, {})
        if (tenant, request_id) in seen:
            raise DuplicateRequest(f"request {request_id} of tenant {tenant} was already "
                                   "admitted; its first result is its answer")

    def admit(self, tp: TopicPartition, request: InferenceRequest) -> None:
        self.admit_id(tp, request.tenant, request.request_id, request.issued_at_ms)

    def admit_id(self, tp: TopicPartition, tenant: str, message_id: str,
                 issued_at_ms: int) -> None:
        """Admit ``tenant``'s message ``message_id`` (a request's id, or a cancel's)."""
        self._remember(tp, (tenant, message_id), issued_at_ms)
        self.unwritten.setdefault(tp, []).append([tenant, message_id, issued_at_ms])

    def load(self, tp: TopicPartition, entries: list, now_ms: int) -> None:
        self.partitions.setdefault(tp, {})
        for tenant, request_id, issued_at_ms in entries:
            if issued_at_ms >= now_ms - self.window_ms:
                self._remember(tp, (tenant, request_id), issued_at_ms)

    def _remember(self, tp: TopicPartition, key: Key, issued_at_ms: int) -> None:
        self.partitions.setdefault(tp, {})[key] = issued_at_ms
        buckets = self._buckets.setdefault(tp, {})
        buckets.setdefault(issued_at_ms // BUCKET_MS, []).append(key)

    def drop(self, tp: TopicPartition) -> None:
        """Forget a partition this process no longer owns."""
        self.partitions.pop(tp, None)
        self.unwritten.pop(tp, None)
        self._buckets.pop(tp, None)

    def records(self, admitted_topic: str, tp: TopicPartition) -> list[Record]:
        """What ``tp``'s round admitted, as records for its transaction."""
        return id_records(admitted_topic, tp.partition, self.unwritten.pop(tp, []))

    def sweep(self, now_ms: int) -> None:
        """Forget the buckets of ids all issued before the window (their messages fail
        authentication); a no-op until another bucket has left it."""
        kept_from = (now_ms - self.window_ms) // BUCKET_MS
        if kept_from == self._kept_from:
            return
        self._kept_from = kept_from
        for tp, buckets in self._buckets.items():
            seen = self.partitions.get(tp, {})
            for bucket in [b for b in buckets if b < kept_from]:
                for key in buckets.pop(bucket):
                    issued_at_ms = seen.get(key)
                    # admitted again since, under a later time: that entry stays
                    if issued_at_ms is not None and issued_at_ms // BUCKET_MS == bucket:
                        del seen[key]


async def read_admitted(kafka: KafkaConnection, topic: str, partition: int, since_ms: int
                        ) -> list:
    """Every entry committed to ``topic``[``partition``] since ``since_ms`` (record time),
    up to its end now; an unusable record is skipped and counted."""
    return await partition_since(kafka, topic, partition, since_ms, parse_id_record,
                                 _skipped)


def _skipped(record) -> None:
    metrics.UNUSABLE_RECORDS.labels(record.topic).inc()
    log.warning("skipped an unusable record at %s[%d]@%d", record.topic, record.partition,
                record.offset)

"""Follow a compacted topic from its beginning, applying every record to a local view.

Used for ``kip.control`` (quotas, fallbacks) and ``kip.telemetry`` (worker capacity):
every pipeline process needs all of it, so this reads every partition without a
consumer group. ``caught_up`` is set once the records present at start are applied.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable


from kip.runtime import metrics
from kip.transport.clients import KafkaConnection
from kip.transport.fetch_waits import FOLLOWING_FETCH_MAX_WAIT_MS, wait_long_when_whole
from kip.transport.reading import assign_all, reached, reader_to_end

log = logging.getLogger("kip.follower")
Apply = Callable[[bytes | None, bytes | None], None]


class TopicFollower:
    """``skipped`` counts records that ``apply`` refused (also in the metric
    ``kip_unusable_records_total{topic}``): a bad record must not stop the view, and it
    is not only logged."""

    def __init__(self, kafka: KafkaConnection, topic: str, apply: Apply) -> None:
        self.kafka, self.topic, self.apply = kafka, topic, apply
        self.caught_up = asyncio.Event()
        self.skipped = 0
        metrics.UNUSABLE_RECORDS.labels(topic)   # 0 until one comes, not missing

    async def run(self) -> None:
        """Apply records until cancelled: catching up with short fetch waits (it ends
        on an empty fetch), then following with long ones."""
        consumer = reader_to_end(self.kafka)
        await consumer.start()
        try:
            tps = await assign_all(consumer, self.topic)
            await consumer.seek_to_beginning(*tps)
            ends = await consumer.end_offsets(tps)
            while True:
                batches = await consumer.getmany(timeout_ms=200, max_records=1000)
                for records in batches.values():
                    for record in records:
                        self._apply(record)
                if not self.caught_up.is_set() and await reached(consumer, ends):
                    log.info("caught up with %s (%s)", self.topic, ends)
                    self.caught_up.set()
                    wait_long_when_whole(consumer, FOLLOWING_FETCH_MAX_WAIT_MS)
        finally:
            await consumer.stop()

    def _apply(self, record) -> None:
        try:
            self.apply(record.key, record.value)
        except Exception as exc:   # a bad record must not stop the view
            self.skipped += 1
            metrics.UNUSABLE_RECORDS.labels(self.topic).inc()
            log.warning("skipped an unusable record at %s[%d]@%d: %s", record.topic,
                        record.partition, record.offset, str(exc)[:200])

"""Follow a compacted topic from its beginning, applying every record to a local view.

Used for ``kip.control`` (quotas, fallbacks) and ``kip.telemetry`` (worker capacity):
every pipeline process needs all of it, so this reads every partition without a
consumer group. ``caught_up`` is set once the records present at start are applied.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from aiokafka import AIOKafkaConsumer

from topics.reading import assign_all, reached

log = logging.getLogger("kip.pipeline")
Apply = Callable[[bytes | None, bytes | None], None]


class TopicFollower:
    def __init__(self, bootstrap: str, topic: str, apply: Apply) -> None:
        self.bootstrap, self.topic, self.apply = bootstrap, topic, apply
        self.caught_up = asyncio.Event()

    async def run(self) -> None:
        """Apply records until cancelled."""
        consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, group_id=None,
                                    enable_auto_commit=False, isolation_level="read_committed")
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
        finally:
            await consumer.stop()

    def _apply(self, record) -> None:
        try:
            self.apply(record.key, record.value)
        except Exception:   # a bad control record must not stop the view
            log.exception("ignored an unusable record at %s[%d]@%d", record.topic,
                          record.partition, record.offset)

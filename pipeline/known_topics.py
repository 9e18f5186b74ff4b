"""Which topics exist, and how many partitions each has, from cluster metadata, read
again every ``max_age_s``.

The pipeline must not produce to a topic that does not exist: with topic auto-creation
off, the send would wait for metadata, time out, and replay the same message forever.
Reply topics and work topics are checked against this view before a request is routed.

Only the first read is waited for: once, by every caller that comes before it ends (a
second caller would otherwise ask the admin client for the list before it has started).
After it a background task reads the list again every ``max_age_s``, and a round uses
the view it has: a metadata request takes milliseconds on a busy broker, and a round
that waited for one every ``max_age_s`` carried them. A topic created meanwhile is seen within
``max_age_s`` and one read, busy or idle; a read that fails keeps the view it had, and
the next one tries again.

A pipeline process keeps one view for all its agents, each of which takes it with
``shared()`` and closes it once: each read asks the broker for the metadata of every
topic, and three agents with a view each read it three times as often for one answer.
"""

from __future__ import annotations

import asyncio
import logging
import time

from aiokafka.admin import AIOKafkaAdminClient

from kip.transport.clients import KafkaConnection

log = logging.getLogger("kip.pipeline")


class KnownTopics:
    def __init__(self, kafka: KafkaConnection, max_age_s: float = 2.0) -> None:
        self.kafka = kafka
        self._users = 0   # those that took it with shared() and have not closed it
        self.max_age_s = max_age_s
        self._known: frozenset[str] | None = None
        self.partitions: dict[str, int] = {}   # as of the last read
        self._read_at = float("-inf")
        self._admin: AIOKafkaAdminClient | None = None
        self._reading: asyncio.Task | None = None
        self._first_read = asyncio.Lock()

    async def current(self) -> frozenset[str]:
        if self._known is None:
            async with self._first_read:   # callers at once read once
                if self._known is None:
                    await self._read()
                    self._reading = asyncio.create_task(self._keep_reading())
        return self._known

    async def _read(self) -> None:
        if self._admin is None:
            self._admin = self.kafka.admin(client_id="kip-pipeline-topics")
            await self._admin.start()
        topics = await self._admin.describe_topics()   # one metadata request, as a list
        self.partitions = _counted(topics, self.partitions)
        self._known = frozenset(self.partitions)
        self._read_at = time.monotonic()

    async def _keep_reading(self) -> None:
        while True:
            await asyncio.sleep(self.max_age_s)
            try:
                await self._read()
            except Exception as err:   # whatever it was, the next read must still come
                log.warning("reading the topic list failed (%r); keeping the one read "
                            "%.0f s ago", err, time.monotonic() - self._read_at)

    def shared(self) -> KnownTopics:
        """This view, for one more user that closes it once: the last close stops it and
        forgets what it read, so a user that comes after reads afresh."""
        self._users += 1
        return self

    async def close(self) -> None:
        self._users = max(0, self._users - 1)
        if self._users > 0:
            return
        reading, self._reading, self._known = self._reading, None, None
        if reading is not None:
            reading.cancel()
            await asyncio.gather(reading, return_exceptions=True)
        admin, self._admin = self._admin, None
        if admin is not None:
            await admin.close()


def _counted(topics: list[dict], before: dict[str, int]) -> dict[str, int]:
    """Partitions per topic from a description of every topic. A topic a broker
    describes with an error or no partitions (its leaders moving, a broker just back)
    keeps the count read before, or is left out until one is read: a work item placed
    on partition "unknown" would go where the producer's partitioner puts it, not where
    its stamp says, and its worker would refuse it as a copy."""
    out = {}
    for topic in topics:
        count = len(topic["partitions"]) if topic["error_code"] == 0 else 0
        count = count or before.get(topic["topic"], 0)
        if count:
            out[topic["topic"]] = count
    return out

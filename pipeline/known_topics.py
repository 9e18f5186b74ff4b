"""Which topics exist, from cluster metadata, read again once older than ``max_age_s``.

The pipeline must not produce to a topic that does not exist: with topic auto-creation
off, the send would wait for metadata, time out, and replay the same message forever.
Reply topics and work topics are checked against this view before a request is routed.

Only the first read is waited for. After it, a round uses the view it has and a stale
view is read again in the background: a metadata request costs a round 1-5 ms on a busy
broker, every ``max_age_s``. A topic created meanwhile is seen at most one read later,
as before; a read that fails keeps the view it had and is tried again on the next call.
"""

from __future__ import annotations

import asyncio
import logging
import time

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from topics.clients import KafkaConnection

log = logging.getLogger("kip.pipeline")


class KnownTopics:
    def __init__(self, kafka: KafkaConnection, max_age_s: float = 2.0) -> None:
        self.kafka = kafka
        self.max_age_s = max_age_s
        self._known: frozenset[str] | None = None
        self._read_at = float("-inf")
        self._admin: AIOKafkaAdminClient | None = None
        self._reading: asyncio.Task | None = None

    async def current(self) -> frozenset[str]:
        if self._known is None:
            await self._read()
        elif (time.monotonic() - self._read_at > self.max_age_s
              and (self._reading is None or self._reading.done())):
            self._reading = asyncio.create_task(self._read_quietly())
        return self._known

    async def _read(self) -> None:
        if self._admin is None:
            self._admin = self.kafka.admin(client_id="kip-pipeline-topics")
            await self._admin.start()
        self._known = frozenset(await self._admin.list_topics())
        self._read_at = time.monotonic()

    async def _read_quietly(self) -> None:
        try:
            await self._read()
        except (KafkaError, OSError) as err:
            log.warning("reading the topic list failed (%r); keeping the one read %.0f s ago",
                        err, time.monotonic() - self._read_at)

    async def close(self) -> None:
        if self._reading is not None:
            self._reading.cancel()
            await asyncio.gather(self._reading, return_exceptions=True)
        admin, self._admin = self._admin, None
        if admin is not None:
            await admin.close()

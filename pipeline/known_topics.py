"""Which topics exist, from cluster metadata, refreshed at most every ``max_age_s``.

The pipeline must not produce to a topic that does not exist: with topic auto-creation
off, the send would wait for metadata, time out, and replay the same message forever.
Reply topics and work topics are checked against this view before a request is routed.
"""

from __future__ import annotations

import time

from aiokafka.admin import AIOKafkaAdminClient

from topics.clients import KafkaConnection


class KnownTopics:
    def __init__(self, kafka: KafkaConnection, max_age_s: float = 2.0) -> None:
        self.kafka = kafka
        self.max_age_s = max_age_s
        self._known: frozenset[str] = frozenset()
        self._read_at = float("-inf")
        self._admin: AIOKafkaAdminClient | None = None

    async def current(self) -> frozenset[str]:
        if time.monotonic() - self._read_at > self.max_age_s:
            if self._admin is None:
                self._admin = self.kafka.admin(client_id="kip-pipeline-topics")
                await self._admin.start()
            self._known = frozenset(await self._admin.list_topics())
            self._read_at = time.monotonic()
        return self._known

    async def close(self) -> None:
        admin, self._admin = self._admin, None
        if admin is not None:
            await admin.close()

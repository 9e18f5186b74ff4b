"""A consumer group's committed offsets and the metadata committed with them, read
through an admin client: where a partition's new owner starts, and the audit chain's
head it continues (transport/transactions.py)."""

from __future__ import annotations

import asyncio

from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.structs import OffsetAndMetadata

from kip.transport.clients import KafkaConnection


class CommittedOffsets:
    """A group's committed offsets and their metadata, read through one admin client
    that starts on first use; callers at once (partitions claimed together) share it."""

    def __init__(self, kafka: KafkaConnection, group_id: str) -> None:
        self.kafka, self.group_id = kafka, group_id
        self._admin: AIOKafkaAdminClient | None = None
        self._starting = asyncio.Lock()

    async def position(self, tp: TopicPartition) -> OffsetAndMetadata:
        """The committed offset for ``tp`` (0 when it has none) and its metadata."""
        async with self._starting:
            if self._admin is None:
                self._admin = self.kafka.admin()   # before it starts: ``close`` sees it
                await self._admin.start()
        return await committed_position(self._admin, self.group_id, tp)

    async def close(self) -> None:
        if self._admin is not None:
            admin, self._admin = self._admin, None
            await admin.close()


async def committed_position(admin: AIOKafkaAdminClient, group_id: str, tp: TopicPartition
                             ) -> OffsetAndMetadata:
    """``group_id``'s committed offset for ``tp`` (0 when it has none), and the metadata
    committed with it."""
    offsets = await admin.list_consumer_group_offsets(group_id, partitions=[tp])
    found = offsets.get(tp)
    if found is None or found.offset < 0:
        return OffsetAndMetadata(0, "")
    return OffsetAndMetadata(found.offset, found.metadata or "")

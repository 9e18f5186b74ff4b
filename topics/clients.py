"""The one place that builds Kafka clients: every producer, consumer and admin client in
kip, and the faust app's broker settings, come from a ``KafkaConnection``.

Callers say what the client is for (a transactional id, a consumer group, a linger);
the connection adds where the cluster is and how to reach it, so that connection
settings (and security settings, once kip speaks TLS and SASL) live in one object.

Defaults are the safe ones, not aiokafka's (DESIGN.md, known traps): producers wait
for every in-sync replica and are idempotent; consumers never auto-commit and read
only committed records. Sizes follow the catalogue's ``MAX_MESSAGE_BYTES``.
"""

from __future__ import annotations

from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from pydantic import BaseModel, ConfigDict, Field

from topics.catalogue import MAX_MESSAGE_BYTES

# A fetch must hold at least one whole record of the largest size, plus its batch header.
FETCH_HEADROOM_BYTES = 1024 * 1024

PRODUCER_DEFAULTS: dict[str, Any] = {
    "acks": "all", "enable_idempotence": True, "max_request_size": MAX_MESSAGE_BYTES}
CONSUMER_DEFAULTS: dict[str, Any] = {
    "enable_auto_commit": False, "isolation_level": "read_committed",
    "max_partition_fetch_bytes": MAX_MESSAGE_BYTES + FETCH_HEADROOM_BYTES}


class KafkaConnection(BaseModel):
    """How to reach the Kafka cluster."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    bootstrap: str = Field("127.0.0.1:9092", description="Kafka bootstrap servers")

    def producer(self, **options: Any) -> AIOKafkaProducer:
        """A producer (not started): acks=all and idempotent unless ``options`` say else."""
        return AIOKafkaProducer(**self._connect(), **(PRODUCER_DEFAULTS | options))

    def consumer(self, *topics: str, **options: Any) -> AIOKafkaConsumer:
        """A consumer (not started) that reads committed records and never auto-commits.
        Without ``group_id`` it has no group: assign its partitions yourself."""
        return AIOKafkaConsumer(*topics, **self._connect(), **(CONSUMER_DEFAULTS | options))

    def admin(self, **options: Any) -> AIOKafkaAdminClient:
        """An admin client (not started)."""
        return AIOKafkaAdminClient(**self._connect(), **options)

    def faust_broker(self) -> dict[str, Any]:
        """The faust ``App`` settings that say where the cluster is and how to reach it."""
        return {"broker": f"kafka://{self.bootstrap}"}

    def _connect(self) -> dict[str, Any]:
        return {"bootstrap_servers": self.bootstrap}

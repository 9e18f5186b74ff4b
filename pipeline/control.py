"""The control topic: quotas and fallbacks, as compacted records keyed by entity.

    quota:<tenant>     TenantQuota JSON   (``kip tenants set``)
    fallback:<model>   {"fallback": "<alias>"}   (``kip models fallback``)

A record with no value (a tombstone) removes the entry.
"""

from __future__ import annotations

import orjson

from pipeline.capacity import CapacityView
from pipeline.quota import TenantQuota
from schemas.messages import WorkerTelemetry
from topics.clients import KafkaConnection


class ControlState:
    def __init__(self) -> None:
        self.quotas: dict[str, TenantQuota] = {}
        self.fallbacks: dict[str, str] = {}

    def apply(self, key: bytes | None, value: bytes | None) -> None:
        kind, _, name = (key or b"").decode().partition(":")
        if kind == "quota":
            _put(self.quotas, name, value and TenantQuota.model_validate_json(value))
        elif kind == "fallback":
            _put(self.fallbacks, name, value and orjson.loads(value)["fallback"])


def _put(table: dict, name: str, value) -> None:
    if value is None or value == b"":
        table.pop(name, None)
    else:
        table[name] = value


def apply_telemetry(capacity: CapacityView):
    def apply(key: bytes | None, value: bytes | None) -> None:
        worker_id = (key or b"").decode()
        capacity.update(worker_id, WorkerTelemetry.model_validate_json(value) if value else None)
    return apply


async def publish_control(kafka: KafkaConnection, topic: str, key: str,
                          value: bytes | None) -> None:
    producer = kafka.producer()
    await producer.start()
    try:
        await producer.send_and_wait(topic, value, key=key.encode())
    finally:
        await producer.stop()


def quota_record(quota: TenantQuota) -> tuple[str, bytes]:
    return f"quota:{quota.tenant}", quota.model_dump_json(exclude_none=True).encode()


def fallback_record(model: str, fallback: str | None) -> tuple[str, bytes | None]:
    return f"fallback:{model}", None if fallback is None else orjson.dumps({"fallback": fallback})

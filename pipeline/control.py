"""The control topic: quotas and fallbacks, as compacted records keyed by entity.

    quota:<tenant>     TenantQuota JSON   (``kip tenants set``)
    fallback:<model>   {"fallback": "<alias>"}   (``kip models fallback``)

A record with no value (a tombstone) removes the entry.
"""

from __future__ import annotations

from collections.abc import Callable

import orjson

from kip.pipeline.capacity import FUTURE_SKEW_MS, CapacityView
from kip.pipeline.quota import TenantQuota
from kip.schemas.codec import now_ms
from kip.schemas.deadletter import valid_model
from kip.schemas.messages import WorkerTelemetry
from kip.transport.clients import KafkaConnection


class ControlState:
    def __init__(self) -> None:
        self.quotas: dict[str, TenantQuota] = {}
        self.fallbacks: dict[str, str] = {}

    def apply(self, key: bytes | None, value: bytes | None) -> None:
        kind, _, name = (key or b"").decode().partition(":")
        if kind == "quota":
            _put(self.quotas, name, value and TenantQuota.model_validate_json(value))
        elif kind == "fallback":
            _put(self.fallbacks, name, value and _fallback(value))


def _fallback(value: bytes) -> str:
    target = orjson.loads(value).get("fallback")
    if not (isinstance(target, str) and valid_model(target)):
        raise ValueError("a fallback record names no model alias")
    return target


def _put(table: dict, name: str, value) -> None:
    if value is None or value == b"":
        table.pop(name, None)
    else:
        table[name] = value


def apply_telemetry(capacity: CapacityView, clock: Callable[[], int] = now_ms):
    """Apply telemetry records. A stale one is left out (the topic's history holds many);
    one dated ahead of the clock raises ``ValueError``: the follower counts it as
    unusable and goes on."""
    def apply(key: bytes | None, value: bytes | None) -> None:
        worker_id = (key or b"").decode()
        telemetry = WorkerTelemetry.model_validate_json(value) if value else None
        now = clock()
        if telemetry is not None and telemetry.at_ms > now + FUTURE_SKEW_MS:
            raise ValueError(f"telemetry of {worker_id[:64]} is dated "
                             f"{telemetry.at_ms - now} ms ahead of this clock")
        capacity.update(worker_id, telemetry, now)
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

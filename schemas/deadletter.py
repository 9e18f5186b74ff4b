"""Dead-letter records for messages kip could not use, and what can be read off them.

A record is built with the first 64 KiB of the payload; ``transport.outputs.Sealing`` drops
them before it is written unless the operator keeps payloads. Its size and sha256 stay.
"""

from __future__ import annotations

import base64
import hashlib
import re

import orjson

from kip.schemas.errors import KipError
from kip.schemas.messages import ID_PATTERN, MODEL_PATTERN, DeadLetterRecord

PAYLOAD_KEPT_BYTES = 64 * 1024
_ID = re.compile(ID_PATTERN)
_MODEL = re.compile(MODEL_PATTERN)


def dead_letter(payload: bytes, topic: str, partition: int, offset: int, err: KipError,
                now_ms: int) -> DeadLetterRecord:
    return DeadLetterRecord(
        origin_topic=topic, origin_partition=partition, origin_offset=offset,
        error_code=err.code, reason=err.message, request_id=hints(payload).get("request_id"),
        payload_b64=base64.b64encode(payload[:PAYLOAD_KEPT_BYTES]).decode(),
        payload_sha256=hashlib.sha256(payload).hexdigest(), payload_bytes=len(payload),
        at_ms=now_ms)


def hints(payload: bytes) -> dict[str, str]:
    """Identifier fields of an invalid message (top level or under ``request``), kept only
    when well-formed, so that its result can still be correlated."""
    try:
        doc = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return {}
    if isinstance(doc, dict) and isinstance(doc.get("request"), dict):
        doc = doc["request"]
    if not isinstance(doc, dict):
        return {}
    return {k: doc[k] for k in ("request_id", "tenant", "reply_to")
            if isinstance(doc.get(k), str) and _ID.match(doc[k])}


def valid_id(value: str) -> bool:
    return bool(_ID.match(value))


def valid_model(value: str) -> bool:
    return bool(_MODEL.match(value))


def fallback_request_id(topic: str, partition: int, offset: int) -> str:
    return f"undecodable.{topic}.{partition}.{offset}"

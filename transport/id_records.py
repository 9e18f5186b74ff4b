"""Records of request ids, one partition of a topic per input partition: the ids the
pipeline admitted (``kip.admitted.<class>``, pipeline/replays.py) and those a model's
workers answered (``kip.answered.<model>.<class>``, workers/single_use.py), each
``[tenant, request id, Unix ms]``, written in the input partition's transaction."""

from __future__ import annotations

import orjson

from kip.transport.outputs import Record

MAX_IDS_PER_RECORD = 5000


def id_records(topic: str, partition: int, entries: list[list]) -> list[Record]:
    """``entries`` as records for partition ``partition`` of ``topic``."""
    return [Record(topic, str(partition).encode(),
                   orjson.dumps({"ids": entries[i:i + MAX_IDS_PER_RECORD]}), [], partition)
            for i in range(0, len(entries), MAX_IDS_PER_RECORD)]


def parse_id_record(value: bytes | None) -> list:
    """The ``[tenant, request id, ms]`` entries of one record; a record that is not one
    raises ValueError."""
    doc = orjson.loads(value or b"null")
    entries = doc.get("ids") if isinstance(doc, dict) else None
    if not isinstance(entries, list) or not all(_entry_ok(e) for e in entries):
        raise ValueError("not a record of request ids")
    return entries


def _entry_ok(entry) -> bool:
    return (isinstance(entry, list) and len(entry) == 3 and isinstance(entry[0], str)
            and isinstance(entry[1], str) and isinstance(entry[2], int))

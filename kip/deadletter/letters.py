"""Reading the dead-letter topic, and what a replay of each letter would do.

A dead letter (``DeadLetterRecord``) is a message kip could not use: its origin (topic,
partition, offset), the code and reason, and, only where the operator keeps payloads
(``KIP_DEADLETTER_PAYLOADS``), the first 64 KiB of the payload. Letters are named here
by their offset in the dead-letter topic (it has one partition).

Only a message from a request topic can be replayed: the pipeline decides it again, with
every check it makes of any message (signature, freshness within the replay window, ids
already admitted). A letter from a work topic is a work item kip already answered with
a failed result; running it again would answer its request twice.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from dataclasses import dataclass

import orjson

from kip.schemas import DeadLetterRecord, decode
from kip.schemas.errors import InvalidRequest
from kip.transport.clients import KafkaConnection
from kip.topics.names import TopicNames
from kip.transport.reading import records_since


@dataclass(frozen=True)
class Letter:
    offset: int           # in the dead-letter topic
    at_ms: int            # when it was written
    record: DeadLetterRecord

    @property
    def origin(self) -> str:
        """The replay record's key: where the message came from."""
        r = self.record
        return f"{r.origin_topic}:{r.origin_partition}:{r.origin_offset}"

    def payload(self) -> bytes | None:
        """The message's bytes, where kept whole."""
        kept = self.record.payload_b64
        if kept is None:
            return None
        payload = base64.b64decode(kept)
        return payload if len(payload) == self.record.payload_bytes else None


@dataclass(frozen=True)
class Verdict:
    letter: Letter
    replayable: bool
    why: str


async def letters(kafka: KafkaConnection, names: TopicNames, since_ms: int = 0
                  ) -> AsyncIterator[Letter]:
    """The dead letters written from ``since_ms`` on, in order; a record that does not
    decode is skipped (the topic is written by kip's stages only)."""
    async for record in records_since(kafka, names.deadletter, since_ms,
                                      what="dead-letter topic"):
        try:
            yield Letter(record.offset, record.timestamp,
                         decode(DeadLetterRecord, record.value or b""))
        except InvalidRequest:
            continue


async def replayed(kafka: KafkaConnection, names: TopicNames) -> dict[str, dict]:
    """Every replay so far: origin -> what was recorded (when, by whom, where to)."""
    done = {}
    async for record in records_since(kafka, names.deadletter_replays, 0):
        if record.key is not None and record.value:
            done[record.key.decode()] = orjson.loads(record.value)
    return done


def verdict(letter: Letter, names: TopicNames, done: dict[str, dict]) -> Verdict:
    """Whether ``letter`` can be replayed now, and why (not)."""
    r, earlier = letter.record, done.get(letter.origin)
    if earlier is not None:
        return Verdict(letter, False, f"already replayed at {earlier['at_ms']} by "
                       f"{earlier['by']}: a letter is replayed once")
    if r.origin_topic not in names.all_requests():
        return Verdict(letter, False, f"from {r.origin_topic}: a work item kip already "
                       "answered (failed); running it again would answer its request twice. "
                       "The producer sends the request anew")
    if r.payload_b64 is None:
        return Verdict(letter, False, "its payload was not kept (KIP_DEADLETTER_PAYLOADS "
                       "was off): only its size and sha256 are")
    if letter.payload() is None:
        return Verdict(letter, False, f"its payload ({r.payload_bytes} bytes) was cut to "
                       "the first 64 KiB: it cannot be sent again whole")
    if r.envelope is None or r.tenant is None or r.request_id is None:
        return Verdict(letter, False, "no tenant vouched for it (no valid envelope): the "
                       "pipeline would take it for no tenant's again")
    return Verdict(letter, True, f"to {r.origin_topic}")


def describe(letter: Letter) -> dict:
    """One letter for ``kip deadletter show``: the record, and the payload as text where
    it is UTF-8 (cut at 2 KiB)."""
    shown = letter.record.model_dump(mode="json", exclude={"payload_b64"})
    payload = letter.payload()
    if payload is not None:
        shown["payload"] = payload[:2048].decode("utf-8", "replace")
    shown["deadletter_offset"], shown["written_at_ms"] = letter.offset, letter.at_ms
    return shown

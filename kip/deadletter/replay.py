"""``kip deadletter replay``: kept payloads back to their request topic, once each.

A replay and its record (on the compacted ``<prefix>.deadletter-replays``, keyed by the
letter's origin) are written in one Kafka transaction, so either both are visible or
neither. The replayer's transactional id is fixed: starting fences any other replayer
(its open transaction is aborted) before this one reads which letters were replayed, so
two operators replaying at once cannot both send a letter.
"""

from __future__ import annotations

import orjson

from kip.deadletter.letters import Letter, Verdict, replayed, verdict
from kip.schemas.codec import REQUEST_ID_HEADER, now_ms
from kip.schemas.envelopes import ENVELOPE_HEADER
from kip.transport.aiokafka_adapter import wait_for_producer_id
from kip.transport.clients import KafkaConnection
from kip.topics.names import TopicNames


async def replay(kafka: KafkaConnection, names: TopicNames, chosen: list[Letter], by: str,
                 dry_run: bool = False) -> list[Verdict]:
    """What became of each of ``chosen``: replayed, or why not."""
    producer = kafka.producer(transactional_id=names.deadletter_replayer)
    await producer.start()
    try:
        await wait_for_producer_id(producer)   # InitProducerId: the fence
        done = await replayed(kafka, names)
        verdicts = [verdict(letter, names, done) for letter in chosen]
        sending = [v.letter for v in verdicts if v.replayable]
        if sending and not dry_run:
            async with producer.transaction():
                for letter in sending:
                    await _send(producer, names, letter, by)
        return verdicts
    finally:
        await producer.stop()


async def _send(producer, names: TopicNames, letter: Letter, by: str) -> None:
    """The letter's payload as its sender sent it: keyed by its tenant, with its request
    id and its envelope, so that the pipeline takes it for that tenant's again."""
    r = letter.record
    await producer.send(r.origin_topic, letter.payload(), key=r.tenant.encode(), headers=[
        (REQUEST_ID_HEADER, r.request_id.encode()), (ENVELOPE_HEADER, r.envelope.encode())])
    note = {"at_ms": now_ms(), "by": by, "to": letter.record.origin_topic,
            "deadletter_offset": letter.offset, "request_id": letter.record.request_id,
            "payload_sha256": letter.record.payload_sha256}
    await producer.send(names.deadletter_replays, orjson.dumps(note),
                        key=letter.origin.encode())

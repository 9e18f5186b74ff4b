"""What a stage writes, and where: messages addressed to topics, and the Kafka records
they become inside a transaction (``transport.transactions``).

``Sealing`` is how a stage's messages become records: every result signed
(schemas/result_signatures.py), and dead letters without the payload they report unless
the operator keeps payloads (``KIP_DEADLETTER_PAYLOADS``: they may hold prompts).
``Chaining`` links the audit records of each transaction into their writer's hash chain
(schemas/audit_chain.py).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import NamedTuple

import orjson

from kip.schemas.audit_chain import SEAL_HEADER, ChainHead, seal_message
from kip.schemas.codec import encode, headers, type_headers
from kip.schemas.messages import (AuditRecord, CancelNotice, DeadLetterRecord,
                                  InferenceResult, Message, WorkItem)
from kip.schemas.pseudonyms import KINDS, PseudonymKey
from kip.schemas.result_signatures import ResultSigner
from kip.topics.names import TopicNames


class Record(NamedTuple):
    """One Kafka record, ready to send."""

    topic: str
    key: bytes | None
    value: bytes | None
    headers: list
    partition: int | None = None   # None: by key, or any (``any_partition``)

    def with_header(self, header: tuple[str, bytes]) -> Record:
        """This record with one more header (its own list of them: a retried
        transaction links the same records again)."""
        topic, key, value, headers, partition = self
        return Record(topic, key, value, [*headers, header], partition)


@dataclass(frozen=True)
class Output:
    """One message for one topic, with the trace context of the request it belongs to."""

    topic: str
    message: Message
    traceparent: str | None = None

    def record(self, sealing: Sealing) -> Record:
        """The record, unsigned: ``signed_records`` signs the results among a batch's."""
        message = sealing.kept(self.message)
        return Record(self.topic, key_of(message), encode(message),
                      headers(message, self.traceparent))

    @property
    def is_result(self) -> bool:
        return isinstance(self.message, InferenceResult)


@dataclass(frozen=True)
class Encoded:
    """A message its stage has already encoded (the pipeline's work items:
    schemas/work_items.py), with its Kafka key and headers. Nothing of ``Sealing``
    applies to it: that signs results and trims audit records and dead letters."""

    topic: str
    key: bytes
    value: bytes
    headers: list
    partition: int | None = None

    is_result = False

    def record(self, sealing: Sealing) -> Record:
        return Record(self.topic, self.key, self.value, self.headers, self.partition)


@dataclass(frozen=True)
class Document:
    """A message of ``kind`` as the JSON document of its fields (in declared order,
    absent ones left out) instead of a model: a worker's served results and their audit
    records (workers/endings.py ``served``), every field read off a validated work item,
    taken from its clocks or from outputs its session checked. orjson writes the same
    bytes ``encode`` writes for the validated message (tests/transport/test_outputs.py), for
    a third of the CPU or less, and no model is built only to be encoded."""

    topic: str
    kind: type[Message]
    fields: dict
    traceparent: str | None = None

    def record(self, sealing: Sealing) -> Record:
        fields = sealing.kept_fields(self.kind, self.fields)
        key = fields["origin_topic" if self.kind is DeadLetterRecord else "request_id"]
        return Record(self.topic, key.encode(), orjson.dumps(fields),
                      type_headers(self.kind, self.traceparent))

    @property
    def is_result(self) -> bool:
        return self.kind is InferenceResult


@dataclass(frozen=True)
class Sealing:
    """What every record of a stage gets: results a signature; dead letters their payload
    only where ``keep_payloads``; audit records pseudonyms for their identities where
    there is a ``pseudonym_key`` (schemas/pseudonyms.py)."""

    signer: ResultSigner
    keep_payloads: bool = False
    pseudonym_key: PseudonymKey | None = None

    def kept(self, message: Message) -> Message:
        if isinstance(message, DeadLetterRecord) and not self.keep_payloads:
            return message.model_copy(update={"payload_b64": None})
        if isinstance(message, AuditRecord) and self.pseudonym_key is not None:
            return message.model_copy(update={
                kind: self.pseudonym_key.of(kind, value) for kind in KINDS
                if (value := getattr(message, kind)) is not None})
        return message

    def kept_fields(self, kind: type[Message], fields: dict) -> dict:
        """``kept`` for a message of ``kind`` given as the document of its fields."""
        if kind is DeadLetterRecord and not self.keep_payloads:
            return {k: v for k, v in fields.items() if k != "payload_b64"}
        if kind is AuditRecord and self.pseudonym_key is not None:
            return fields | {k: self.pseudonym_key.of(k, value) for k in KINDS
                             if (value := fields.get(k)) is not None}
        return fields

    def chaining(self, audit_topic: str) -> Chaining:
        """The audit records' chains, sealed with the key that signs results."""
        return Chaining(audit_topic, self.signer)


@dataclass(frozen=True)
class Chaining:
    """Links the records of ``topic`` (the audit topic) into a writer's chain, the last
    of each transaction sealed by ``signer``."""

    topic: str
    signer: ResultSigner

    def link(self, head: ChainHead, records: list[Record]) -> tuple[list[Record], ChainHead]:
        """``records``, those of ``topic`` with their chain headers, and the head after
        them. Call it once per transaction, on every record it carries, in order."""
        linked, last = [], None
        for record in records:
            if record.topic == self.topic:
                header, head = head.link(record.value or b"")
                record = record.with_header(header)
                last = len(linked)
            linked.append(record)
        if last is not None:
            seal = self.signer.signature(seal_message(head.chain_id, head.seq - 1, head.last))
            linked[last] = linked[last].with_header((SEAL_HEADER, seal.encode()))
            head = replace(head, seal=seal)
        return linked, head


def key_of(message: Message) -> bytes:
    """Dead letters are keyed by origin topic, cancel notices by tenant and request id;
    everything else by request id."""
    if isinstance(message, DeadLetterRecord):
        return message.origin_topic.encode()
    if isinstance(message, CancelNotice):
        return f"{message.tenant}/{message.request_id}".encode()
    if isinstance(message, WorkItem):
        return message.request.request_id.encode()
    return message.request_id.encode()


def ending(names: TopicNames, reply_to: str, result: InferenceResult, audit: AuditRecord,
           deadletter: DeadLetterRecord | None = None) -> list[Output]:
    """A request's terminal outputs: the result on its reply topic, the final audit
    record, and the dead letter of input kip could not use; each with the request's trace
    context (``traceparent``), so an operator follows a dead letter to its trace."""
    trace = audit.traceparent
    outputs = [Output(reply_to, result, trace), Output(names.audit, audit, trace)]
    if deadletter is not None:
        outputs.append(Output(names.deadletter, deadletter, trace))
    return outputs


def signed_records(groups: list[list[Output | Encoded | Document]], sealing: Sealing
                   ) -> list[list[Record]]:
    """The records of each group of outputs (a worker batch's answers, one group per
    request), every result among all of them under one signature: one signing for the
    batch, and one check of it for each client that reads some of its results."""
    built = [[o.record(sealing) for o in group] for group in groups]
    results = [(g, i) for g, group in enumerate(groups) for i, o in enumerate(group)
               if o.is_result]
    signatures = sealing.signer.headers([built[g][i].value for g, i in results])
    for (g, i), header in zip(results, signatures):
        built[g][i] = built[g][i].with_header(header)
    return built

"""What a stage writes, and where: messages addressed to topics, and the Kafka records
they become inside a transaction (``topics.transactions``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from schemas.codec import encode, headers
from schemas.messages import (AuditRecord, DeadLetterRecord, InferenceResult, Message,
                              WorkItem)
from topics.names import TopicNames


class Record(NamedTuple):
    """One Kafka record, ready to send."""

    topic: str
    key: bytes | None
    value: bytes | None
    headers: list


@dataclass(frozen=True)
class Output:
    """One message for one topic, with the trace context of the request it belongs to."""

    topic: str
    message: Message
    traceparent: str | None = None

    def record(self) -> Record:
        return Record(self.topic, key_of(self.message), encode(self.message),
                      headers(self.message, self.traceparent))


def key_of(message: Message) -> bytes:
    """Dead letters are keyed by origin topic; everything else by request id."""
    if isinstance(message, DeadLetterRecord):
        return message.origin_topic.encode()
    if isinstance(message, WorkItem):
        return message.request.request_id.encode()
    return message.request_id.encode()


def ending(names: TopicNames, reply_to: str, result: InferenceResult, audit: AuditRecord,
           deadletter: DeadLetterRecord | None = None) -> list[Output]:
    """A request's terminal outputs: the result on its reply topic, the final audit
    record, and the dead letter of input kip could not use."""
    trace = audit.traceparent
    outputs = [Output(reply_to, result, trace), Output(names.audit, audit, trace)]
    if deadletter is not None:
        outputs.append(Output(names.deadletter, deadletter))
    return outputs


def records(outputs: list[Output]) -> list[Record]:
    return [o.record() for o in outputs]

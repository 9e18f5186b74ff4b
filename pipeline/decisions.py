"""What the pipeline's decision for a message reads and what it may be: the context of a
round, where a message came from, and the three decisions (``Forward`` to a worker,
``Reject`` with a result, or ``Shed`` unanswered), with where each result goes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property, lru_cache

from aiokafka import TopicPartition

from kip.pipeline.access import DEFAULT_REPLAY_WINDOW_MS, AccessConfig
from kip.pipeline.admission import AdmissionPolicy
from kip.pipeline.capacity import CapacityView
from kip.pipeline.intake import CheckedEnvelopes, UnsignedAllowance
from kip.pipeline.quota import Ledger
from kip.pipeline.replays import SeenRequests
from kip.pipeline.routing import Router
from kip.pipeline.work_placement import WorkPlacement
from kip.schemas.codec import decode, type_headers
from kip.schemas.envelopes import Sender
from kip.schemas.errors import InvalidRequest
from kip.schemas.messages import (AuditRecord, CancelNotice, DeadLetterRecord,
                                  InferenceRequest, InferenceResult, Priority, WorkItem)
from kip.schemas.endings import Coordinates
from kip.schemas.stamps import StampKeys
from kip.topics.names import TopicNames
from kip.transport.outputs import Encoded, Output, ending

STAGE = "pipeline"


@dataclass(frozen=True)
class Origin(Coordinates):
    """Where a message came from: its coordinates, Kafka key and headers."""

    key: bytes | None = None
    headers: tuple[tuple[str, bytes], ...] = ()

    def header(self, name: str) -> str | None:
        for k, v in self.headers:
            if k == name:
                return v.decode("utf-8", "replace") if v is not None else None
        return None

    @cached_property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


@dataclass(frozen=True)
class Context:
    """Everything a decision reads. ``ledger``, ``capacity``, ``seen`` and ``allowance``
    are the only mutable parts: quota spent, requests forwarded, ids admitted and unsigned
    messages answered by this round's earlier decisions."""

    access: AccessConfig
    router: Router
    names: TopicNames
    now_ms: int
    replay_window_ms: int = DEFAULT_REPLAY_WINDOW_MS
    topics: frozenset[str] | None = None   # topics that exist; None: not checked
    policy: AdmissionPolicy = field(default_factory=AdmissionPolicy)
    ledger: Ledger = field(default_factory=Ledger)
    capacity: CapacityView = field(default_factory=CapacityView)
    fallbacks: Mapping[str, str] = field(default_factory=dict)   # model -> fallback alias
    stamp_keys: StampKeys = field(default_factory=StampKeys.generate)
    seen: SeenRequests = field(default_factory=lambda: SeenRequests(DEFAULT_REPLAY_WINDOW_MS))
    allowance: UnsignedAllowance = field(default_factory=UnsignedAllowance)
    partitions: Mapping[str, int] | None = None   # topic -> partitions; None: not known
    placement: WorkPlacement = field(default_factory=WorkPlacement)
    envelopes: CheckedEnvelopes = field(default_factory=CheckedEnvelopes)   # by the drain


@dataclass(frozen=True)
class Message:
    """A decoded request with what is known of the message that carried it."""

    request: InferenceRequest
    origin: Origin
    payload: bytes
    sha256: str   # of the message bytes: what the result names
    sender: Sender   # who sent it, by its envelope

    @property
    def size(self) -> int:
        return len(self.payload)


@dataclass(frozen=True)
class Forward:
    topic: str
    work: bytes   # the stamped work item, encoded (schemas/work_items.py)
    audit: AuditRecord
    partition: int | None = None   # the one its stamp names (pipeline/work_placement.py)
    span: str | None = None   # the admission span's traceparent, where tracing is on

    @property
    def work_item(self) -> WorkItem:
        """The work item as a worker decodes it."""
        return decode(WorkItem, self.work)

    def outputs(self, names: TopicNames) -> list[Output | Encoded]:
        trace = self.audit.traceparent
        # keyed by its request id, as key_of keys work items (transport/outputs.py)
        # the work record carries the admission span's context: the worker's spans are
        # its children (runtime/tracing.py)
        work = Encoded(self.topic, self.audit.request_id.encode(), self.work,
                       type_headers(WorkItem, self.span or trace), self.partition)
        return [work, Output(names.audit, self.audit, trace)]


@dataclass(frozen=True)
class Reject:
    reply_to: str
    result: InferenceResult
    audit: AuditRecord
    deadletter: DeadLetterRecord | None = None

    def outputs(self, names: TopicNames) -> list[Output]:
        return ending(names, self.reply_to, self.result, self.audit, self.deadletter)


@dataclass(frozen=True)
class Shed:
    """A message no tenant provably sent, past its key's allowance: no result of its
    own; counted, and named in its round's shed record (pipeline/app.py)."""

    key: str   # the allowance it drew on (pipeline/intake.py)

    def outputs(self, names: TopicNames) -> list:
        return []


@dataclass(frozen=True)
class Cancel:
    """An accepted cancel: its notice for the workers (kip.cancels), its acknowledgement
    on its sender's reply topic and its final audit record (pipeline/cancels.py)."""

    notice: CancelNotice
    reply_to: str
    result: InferenceResult
    audit: AuditRecord

    def outputs(self, names: TopicNames) -> list[Output]:
        trace = self.audit.traceparent
        return [Output(names.cancels, self.notice, trace),
                Output(self.reply_to, self.result, trace),
                Output(names.audit, self.audit, trace)]


Decision = Forward | Reject | Shed | Cancel


def class_of(topic: str, ctx: Context) -> Priority:
    """The class of a request topic (BATCH, the most generous limit, for any other: the
    topic check rejects it later)."""
    return _request_classes(ctx.names).get(topic, Priority.BATCH)


@lru_cache(maxsize=16)
def _request_classes(names: TopicNames) -> dict[str, Priority]:
    """Request topic -> its class (built once: this runs for every message)."""
    return {names.requests(priority): priority for priority in Priority}


def check_reply_to(reply_to: str | None, ctx: Context) -> None:
    """``reply_to`` must be the results topic or an existing ``<results>.<suffix>`` topic:
    kip never writes where it was not meant to, and never waits on a missing topic."""
    results = ctx.names.results
    if reply_to is None or reply_to == results:
        return
    if not reply_to.startswith(results + "."):
        raise InvalidRequest(f"reply_to must be {results} or {results}.<suffix>")
    if ctx.topics is not None and reply_to not in ctx.topics:
        raise InvalidRequest(f"reply_to topic {reply_to} does not exist; create it before "
                             "sending requests that name it")


def reply_topic_for(reply_to: str | None, tenant: str | None, ctx: Context) -> str:
    """Where a result goes: the ``reply_to`` a request names, if it is the tenant's and
    exists; else its tenant's own reply topic (``<results>.<tenant>``), where that
    exists; else the shared results topic. No tenant (a message no tenant provably
    sent): the shared results topic."""
    if tenant is None:
        return ctx.names.results
    if reply_to is not None and ctx.names.owned_reply_topic(reply_to, tenant) \
            and _reply_to_ok(reply_to, ctx):
        return reply_to
    own = ctx.names.reply_topic(tenant)
    if ctx.topics is None or own in ctx.topics:
        return own
    return ctx.names.results


def _reply_to_ok(reply_to: str, ctx: Context) -> bool:
    try:
        check_reply_to(reply_to, ctx)
    except InvalidRequest:
        return False
    return True

"""What the pipeline knows of a request message before it parses it, cheapest first.

A valid tenant must not be able to harm another through the front door: not by
flooding, not by sending under another tenant's name. So before any JSON is parsed or
any tensor decoded, a message is screened:

1. its value's sha256 (the digest every result names) and its envelope
   (schemas/envelopes.py): who sent it, if anyone provably did;
2. a message without a valid envelope is no tenant's: it is answered on the shared
   results topic, never on the reply topic of the tenant its key names, and only
   within an allowance per Kafka key (``AdmissionPolicy.unsigned_per_s`` and
   ``unsigned_burst``; keys that are no tenant's share one); beyond it, it is *shed*:
   no result, a count, and one audit record per round and partition naming the
   offsets shed (pipeline/decisions.py ``Shed``);
3. a message whose envelope checks is charged to its tenant's quota (the tenant-wide
   limit of ``kip tenants set``) before anything else: a flood's excess ends
   ``QUOTA_EXCEEDED`` for the price of a hash, an HMAC and a bucket;
4. it must be on its tenant's request partition (``placement``): the partition the
   access file gives the tenant, else the one its key hashes to, as Kafka's default
   partitioner places it. A tenant's messages are then one ordered queue, owned by one
   pipeline at a time (replays: pipeline/replays.py), and an operator can give a
   noisy tenant a partition of its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kip.pipeline.access import AccessConfig
from kip.pipeline.admission import AdmissionPolicy
from kip.pipeline.quota import Bucket
from kip.runtime import metrics
from kip.schemas.codec import REQUEST_ID_HEADER
from kip.schemas.envelopes import Sender, sender
from kip.schemas.errors import Unauthenticated
from kip.schemas.messages import AuditRecord
from kip.schemas.result_signatures import request_sha256
from kip.transport.partitioning import key_partition

NO_TENANT = ""   # the allowance shared by keys that name no tenant
MAX_GRANTED = 100_000   # answers the allowance remembers per message, at most
MAX_SHED_RANGES = 24   # offset ranges one shed record lists (it counts them all)


@dataclass
class UnsignedAllowance:
    """Token buckets of unsigned messages still answered, per Kafka key; each message
    (by its coordinates, ``at``) is charged once, whether the drain's screen or the
    decision asks first."""

    buckets: dict[str, Bucket] = field(default_factory=dict)
    granted: dict[tuple, bool] = field(default_factory=dict)   # at -> what it got

    def take(self, key: str, per_s: float, burst: float, now_ms: int,
             at: tuple | None = None) -> bool:
        if at is not None and at in self.granted:
            return self.granted.pop(at)
        bucket = self.buckets.get(key)
        if bucket is None:
            bucket = self.buckets[key] = Bucket(burst, now_ms)
        ok = bucket.take(1, per_s, burst, now_ms) == 0
        if at is not None:
            if len(self.granted) >= MAX_GRANTED:   # left by a partition that moved
                self.granted.clear()
            self.granted[at] = ok
        return ok


@dataclass
class CheckedEnvelopes:
    """The senders whose envelopes the drain's screen verified, with their messages'
    digests, by the messages' coordinates: the decision takes them instead of hashing
    and verifying again (the record at an offset never changes)."""

    checked: dict[tuple[str, int, int], tuple[str, Sender]] = field(default_factory=dict)

    def note(self, at: tuple[str, int, int], digest: str, sender: Sender) -> None:
        if len(self.checked) >= MAX_GRANTED:   # left by events a rebalance dropped
            self.checked.clear()
        self.checked[at] = (digest, sender)

    def take(self, at: tuple[str, int, int]) -> tuple[str, Sender] | None:
        return self.checked.pop(at, None)


@dataclass
class Screen:
    """What the pipeline's drain asks of each message before faust's stream takes it
    (pipeline/faust_adapter.py): a message no tenant provably sent, past its key's allowance, is
    shed right there, for a hash and an HMAC, instead of costing the stream's per-event
    machinery and a round's place, which cost more than all of this. A flood of tiny
    unsigned messages aimed at a victim's request partition otherwise queued thousands
    in front of its requests. What it sheds is counted, and named in the shed record
    of its partition's next round (``take_shed``)."""

    access: AccessConfig
    policy: AdmissionPolicy
    allowance: UnsignedAllowance
    envelopes: CheckedEnvelopes = field(default_factory=CheckedEnvelopes)
    shed: dict[tuple[str, int], ShedTally] = field(default_factory=dict)

    def keep(self, topic: str, partition: int, offset: int, key: bytes | None,
             value: bytes | None, headers, now_ms: int) -> bool:
        """Whether the stream takes the message (else it is shed here)."""
        request_id = [v for k, v in headers or () if k == REQUEST_ID_HEADER]
        rid = request_id[0].decode("utf-8", "replace") if len(request_id) == 1 else None
        digest = request_sha256(value or b"")
        sent = sent_by(headers or (), topic, key, digest, rid, self.access)
        if sent is not None:
            self.envelopes.note((topic, partition, offset), digest, sent)
            return True
        allowance = allowance_key(key, self.access)
        if self.allowance.take(allowance, self.policy.unsigned_per_s,
                               self.policy.unsigned_burst, now_ms,
                               at=(topic, partition, offset)):
            return True
        self.note_shed(topic, partition, offset, allowance)
        return False

    def note_shed(self, topic: str, partition: int, offset: int, key: str) -> None:
        self.shed.setdefault((topic, partition), ShedTally()).add(offset, key)
        metrics.SHED.labels(topic.rpartition(".")[2]).inc()

    def take_shed(self, topic: str, partition: int) -> ShedTally | None:
        """What the partition shed since this was last asked (None: nothing)."""
        return self.shed.pop((topic, partition), None)


def allowance_key(key: bytes | None, access: AccessConfig) -> str:
    """The allowance a message's key draws on: its tenant's, or the one of all keys
    that name no tenant (so made-up keys cannot grow the table)."""
    tenant = key.decode("utf-8", "replace") if key else NO_TENANT
    return tenant if tenant in access.tenants else NO_TENANT


def sent_by(headers, topic: str, key: bytes | None, digest: str, request_id: str | None,
            access: AccessConfig) -> Sender | None:
    """Who sent the message, by its envelope; None where that does not check."""
    return sender(headers, topic, key, digest, request_id, access.secret_of)


def placement(tenant: str, partitions: int, access: AccessConfig) -> int:
    """The request partition of ``tenant``'s messages, of ``partitions``: the one its
    policy names (modulo the count), else where Kafka's default partitioner puts its
    key."""
    policy = access.tenants.get(tenant)
    if policy is not None and policy.request_partition is not None:
        return policy.request_partition % partitions
    return key_partition(tenant.encode(), list(range(partitions)))


@dataclass
class ShedTally:
    """What a partition shed since its last shed record, in bounded memory: the count,
    the first offsets as ranges (``MAX_SHED_RANGES``), the allowance keys (a few)."""

    count: int = 0
    ranges: list[list[int]] = field(default_factory=list)
    keys: set[str] = field(default_factory=set)
    more: bool = False   # ranges past MAX_SHED_RANGES were not listed

    def add(self, offset: int, key: str) -> None:
        self.count += 1
        if len(self.keys) < 8:
            self.keys.add(key or "(no tenant)")
        if self.ranges and offset == self.ranges[-1][1] + 1:
            self.ranges[-1][1] = offset
        elif len(self.ranges) < MAX_SHED_RANGES:
            self.ranges.append([offset, offset])
        else:
            self.more = True


def shed_record(topic: str, partition: int, tally: ShedTally, now_ms: int) -> AuditRecord:
    """The one audit record of the messages of a partition shed since the last: their
    count, keys and offsets, so that an audit reader can account for every offset
    without a record for each."""
    ranges = ",".join(f"{a}-{b}" if a != b else str(a) for a, b in tally.ranges)
    return AuditRecord(
        request_id=f"shed.{topic}.{partition}.{tally.ranges[0][0]}", stage="pipeline",
        decision="shed", final=True, error_code=Unauthenticated.code,
        reason=(f"{tally.count} messages without a valid envelope, keyed "
                f"{', '.join(k[:64] for k in sorted(tally.keys))}, shed past their key's "
                f"allowance: offsets {ranges}{',...' if tally.more else ''}")[:500],
        payload_bytes=0, at_ms=now_ms)

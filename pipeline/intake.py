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

from pipeline.access import AccessConfig
from pipeline.quota import Bucket
from schemas.envelopes import Sender, sender
from schemas.errors import Unauthenticated
from schemas.messages import AuditRecord
from topics.partitioning import key_partition

NO_TENANT = ""   # the allowance shared by keys that name no tenant
MAX_SHED_RANGES = 24   # offset ranges one shed record lists (it counts them all)


@dataclass
class UnsignedAllowance:
    """Token buckets of unsigned messages still answered, per Kafka key."""

    buckets: dict[str, Bucket] = field(default_factory=dict)

    def take(self, key: str, per_s: float, burst: float, now_ms: int) -> bool:
        bucket = self.buckets.get(key)
        if bucket is None:
            bucket = self.buckets[key] = Bucket(burst, now_ms)
        return bucket.take(1, per_s, burst, now_ms) == 0


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


def shed_record(topic: str, partition: int, shed: list[tuple[int, str]], now_ms: int
                ) -> AuditRecord:
    """The one audit record of the messages of a partition one round shed (``(offset,
    allowance key)`` each): their count, keys and offsets, so that an audit reader can
    account for every offset without a record for each."""
    offsets = [offset for offset, _ in shed]
    keys = sorted({key or "(no tenant)" for _, key in shed})
    return AuditRecord(
        request_id=f"shed.{topic}.{partition}.{offsets[0]}", stage="pipeline",
        decision="shed", final=True, error_code=Unauthenticated.code,
        reason=(f"{len(offsets)} messages without a valid envelope, keyed "
                f"{', '.join(k[:64] for k in keys[:8])}, shed past their key's allowance: "
                f"offsets {shed_ranges(offsets)}")[:500],
        payload_bytes=0, at_ms=now_ms)


def shed_ranges(offsets: list[int]) -> str:
    """``offsets`` (ascending) as ranges, ``3-5,9``, the first ``MAX_SHED_RANGES``."""
    ranges: list[list[int]] = []
    for offset in offsets:
        if ranges and offset == ranges[-1][1] + 1:
            ranges[-1][1] = offset
        else:
            ranges.append([offset, offset])
    text = ",".join(f"{a}-{b}" if a != b else str(a) for a, b in ranges[:MAX_SHED_RANGES])
    return text + (",..." if len(ranges) > MAX_SHED_RANGES else "")

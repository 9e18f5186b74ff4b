"""What the fault harness counts: every result, final audit record and dead letter, read
with read_committed, set against the requests it sent; and whether the audit records'
hash chains hold through the faults (``kip audit verify``'s check)."""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from aiokafka import AIOKafkaConsumer, TopicPartition

from kip.audit.chains import ChainCheck
from kip.devkit.availability import FaultCost, Timeline
from kip.schemas.codec import decode
from kip.schemas.deadletter import fallback_request_id
from kip.schemas.errors import InvalidRequest, ModelUnavailable, Overloaded
from kip.schemas.messages import AuditRecord, DeadLetterRecord, InferenceResult, Status
from kip.schemas.messages import PRIORITIES
from kip.schemas.result_signatures import ResultVerifier
from kip.transport.clients import KafkaConnection
from kip.topics.names import TopicNames
from kip.transport.reading import assign_all, reached, reader_to_end


REPLAY_REFUSED = "rejected DUPLICATE_REQUEST"


class Tally:
    """Reads results (the shared topic and ``tenants``' own), audit and dead-letter topics
    from the beginning, incrementally."""

    def __init__(self, kafka: KafkaConnection, names: TopicNames, verifier: ResultVerifier,
                 tenants: list[str] = (), timeline: Timeline | None = None) -> None:
        self.kafka = kafka
        self.timeline = timeline or Timeline()   # when each result was first seen
        self.names = names
        self.result_topics = [names.results] + [names.reply_topic(t) for t in tenants]
        self.results: dict[str, list[InferenceResult]] = defaultdict(list)
        self.final_audit: dict[str, int] = Counter()
        self.audited: set[str] = set()
        self.deadletters: dict[str, list[DeadLetterRecord]] = defaultdict(list)
        self.undecodable = 0
        self.chains = ChainCheck(verifier)
        self._consumer: AIOKafkaConsumer | None = None

    async def start(self) -> None:
        self._consumer = self.kafka.consumer(group_id=None, auto_offset_reset="earliest")
        await self._consumer.start()
        tps = []
        for topic in (*self.result_topics, self.names.audit, self.names.deadletter):
            tps += await assign_all(self._consumer, topic)
        self._consumer.assign(tps)
        await self._consumer.seek_to_beginning(*tps)

    async def stop(self) -> None:
        if self._consumer is not None:
            await self._consumer.stop()
            self._consumer = None

    async def poll(self, seconds: float) -> None:
        batches = await self._consumer.getmany(timeout_ms=int(seconds * 1000),
                                               max_records=100_000)
        for tp, records in batches.items():
            for record in records:
                self._count(tp.topic, record.value)
                if tp.topic == self.names.audit:
                    self.chains.add(tp.partition, record.offset, record.value,
                                    record.headers)

    def _count(self, topic: str, value: bytes) -> None:
        try:
            if topic in self.result_topics:
                result = decode(InferenceResult, value)
                self.results[result.request_id].append(result)
                self.timeline.arrived.setdefault(result.request_id, time.time())
                if result.status != Status.OK:
                    self.timeline.failed.add(result.request_id)
            elif topic == self.names.audit:
                audit = decode(AuditRecord, value)
                self.audited.add(audit.request_id)
                self.final_audit[audit.request_id] += audit.final
            else:
                dead = decode(DeadLetterRecord, value)
                self.deadletters[dead.request_id or ""].append(dead)
                coordinates = fallback_request_id(dead.origin_topic, dead.origin_partition,
                                                  dead.origin_offset)
                if coordinates != dead.request_id:   # what an unvouched-for input ends as
                    self.deadletters[coordinates].append(dead)
        except InvalidRequest:
            self.undecodable += 1

    def report(self, sent: dict[str, str], failed_sends: int) -> FaultReport:
        r = FaultReport(sent=len(sent), failed_sends=failed_sends)
        for request_id, kind in sent.items():
            results = self.results.get(request_id, [])
            finals = self.final_audit.get(request_id, 0)
            r.lost += not results
            if len(results) > 1 or finals > 1:
                r.duplicated += 1
                if len(r.duplicate_examples) < 5:
                    r.duplicate_examples.append(
                        f"{request_id}: " + ", ".join(
                            f"{x.status.value} {x.error.code if x.error else ''}".strip()
                            for x in results) + f"; {finals} final audit records")
            r.unseen += request_id not in self.audited and not results
            r.orphaned += bool(results) != bool(finals)
            for result in results[:1]:
                code = result.error.code if result.error else ""
                r.outcomes[f"{result.status.value} {code}".strip()] += 1
            if kind != "normal":
                r.poison += 1
                letters = self.deadletters.get(request_id, [])
                if _turned_away(results):   # no check ran on it: no dead letter is due
                    r.poison_turned_away += not letters
                else:
                    r.poison_deadlettered_once += (len(letters) == 1
                                                   and _has_origin(letters[0]))
        r.deadletters_not_poison = sum(len(v) for k, v in self.deadletters.items()
                                       if sent.get(k, "normal") == "normal" and k in sent)
        r.deadletter_examples = [f"{k}: {letters[0].error_code} {letters[0].reason[:160]}"
                                 for k, letters in self.deadletters.items()
                                 if k in sent and sent[k] == "normal"][:3]
        r.undecodable_outputs = self.undecodable
        chains = self.chains.finish()
        r.audit_chains = (f"{chains.records} records, {chains.chains} chains, {chains.sealed} "
                          f"seals, {chains.heads} committed heads")
        r.audit_chain_problems = [str(p) for p in chains.problems]
        return r


def _turned_away(results: list[InferenceResult]) -> bool:
    """Ended by admission's capacity check: overloaded (a worker outage makes the
    estimated wait pass the class's budget) or no live worker (all of the model's down or
    restarting: it fails closed). A designed ending, before the request reached a worker."""
    return bool(results) and results[0].status == Status.REJECTED and (
        results[0].error is not None
        and results[0].error.code in (Overloaded.code, ModelUnavailable.code))


def _has_origin(dead: DeadLetterRecord) -> bool:
    return bool(dead.origin_topic) and dead.origin_partition >= 0 and dead.origin_offset >= 0


@dataclass
class FaultReport:
    sent: int
    failed_sends: int = 0
    lost: int = 0
    duplicated: int = 0
    duplicate_examples: list[str] = field(default_factory=list)   # how a few ended
    unseen: int = 0
    orphaned: int = 0
    outcomes: Counter = field(default_factory=Counter)
    poison: int = 0
    poison_deadlettered_once: int = 0
    poison_turned_away: int = 0   # rejected by admission's capacity check: no dead letter
    deadletters_not_poison: int = 0
    deadletter_examples: list[str] = field(default_factory=list)   # good requests' letters
    undecodable_outputs: int = 0
    audit_chains: str = ""
    audit_chain_problems: list[str] = field(default_factory=list)
    leftover: dict[str, int] = field(default_factory=dict)   # group -> records not consumed
    faults: dict[str, int] = field(default_factory=dict)
    unplanned: dict[str, int] = field(default_factory=dict)
    elapsed_s: float = 0.0
    replay: str = "not tried"   # how a copy of an admitted request sent afterwards ended
    costs: list[FaultCost] = field(default_factory=list)   # per fault, to interactive

    @property
    def passed(self) -> bool:
        return (self.lost == self.duplicated == self.unseen == self.orphaned == 0
                and self.poison_deadlettered_once + self.poison_turned_away == self.poison
                and self.deadletters_not_poison == 0 and self.failed_sends == 0
                and not any(self.leftover.values()) and not self.audit_chain_problems
                and self.replay in ("not tried", REPLAY_REFUSED))

    def lines(self) -> list[str]:
        leftover = sum(self.leftover.values())
        return [
            f"requests sent (acknowledged by Kafka): {self.sent}   not taken by Kafka: "
            f"{self.failed_sends}",
            f"faults: {_join(self.faults)}",
            f"unplanned restarts: {_join(self.unplanned) or 'none'}",
            f"lost (no result): {self.lost}",
            f"duplicated (more than one result or final audit record): {self.duplicated}"
            + "".join(f"\n  {e}" for e in self.duplicate_examples),
            f"unseen (no result and no audit record at all): {self.unseen}",
            f"orphaned (result without final audit record, or the reverse): {self.orphaned}",
            f"outcomes: {_join(self.outcomes)}",
            f"poison: {self.poison_deadlettered_once}/{self.poison - self.poison_turned_away} "
            f"dead-lettered exactly once with their origin{self._turned_away_line()}; dead "
            f"letters for good requests: {self.deadletters_not_poison}"
            + "".join(f"\n  {e}" for e in self.deadletter_examples),
            f"records left unconsumed (stalled partitions): {leftover} "
            f"({_join(self.leftover)})",
            f"audit chains (kip audit verify): {self.audit_chains}; broken links: "
            f"{len(self.audit_chain_problems)}"
            + "".join(f"\n  {p}" for p in self.audit_chain_problems[:5]),
            f"a copy of an admitted request sent after the faults: {self.replay}",
            *(["what each fault cost interactive requests:"]
              + [f"  {cost.line()}" for cost in self.costs] if self.costs else []),
            f"elapsed: {self.elapsed_s:.0f}s",
            f"verdict: {'PASS' if self.passed else 'FAIL'}"]

    def _turned_away_line(self) -> str:
        if not self.poison_turned_away:
            return ""
        return (f" ({self.poison_turned_away} more rejected OVERLOADED or MODEL_UNAVAILABLE by "
                "admission, before any check, and not dead-lettered)")


def _join(counts: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))


async def leftover_records(kafka: KafkaConnection, names: TopicNames, models: list[str]
                           ) -> dict[str, int]:
    """Per consumer group, the committed records past its committed offsets: all zero
    when no partition stalled. (Counting records, not offsets: transaction markers take
    offsets too.)"""
    groups = {names.pipeline_group(): names.all_requests()}
    for m in models:
        groups[names.worker_group(m, "interactive")] = [names.work(m, PRIORITIES[0])]
        groups[names.worker_group(m, "")] = [names.work(m, p) for p in PRIORITIES[1:]]
    admin = kafka.admin()
    await admin.start()
    try:
        return {group: await _past_committed(kafka, admin, group, topics)
                for group, topics in groups.items()}
    finally:
        await admin.close()


async def _past_committed(kafka: KafkaConnection, admin, group: str, topics: list[str]
                          ) -> int:
    consumer = reader_to_end(kafka)
    await consumer.start()
    try:
        return await _count_past(consumer, admin, group, topics)
    finally:
        await consumer.stop()


async def _count_past(consumer, admin, group: str, topics: list[str]) -> int:
    tps: list[TopicPartition] = []
    for topic in topics:
        tps += await assign_all(consumer, topic)
    consumer.assign(tps)
    committed = await admin.list_consumer_group_offsets(group, partitions=tps)
    for tp in tps:
        found = committed.get(tp)
        consumer.seek(tp, max(found.offset, 0) if found else 0)
    ends = await consumer.end_offsets(tps)
    count, deadline = 0, time.monotonic() + 30
    while not await reached(consumer, ends):
        if time.monotonic() > deadline:   # an open transaction holds the stable offset
            raise RuntimeError(f"{group}: could not read to the end of {topics} in 30s")
        for records in (await consumer.getmany(timeout_ms=500)).values():
            count += len(records)
    return count

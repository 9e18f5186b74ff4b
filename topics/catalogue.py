"""The declarative catalogue: every topic kip needs, with its settings and its key."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from kip.schemas.messages import PRIORITIES
from kip.topics.names import TopicNames

DAY_MS = 24 * 3600 * 1000
# How long a cancel holds: workers read this much of the cancels topic when they start,
# and forget a cancel this long after it (a request still queued past it would run).
CANCEL_RETENTION_MS = 3600 * 1000
# Kept well past any replay window a deployment would set (the default is 5 minutes).
ADMITTED_RETENTION_MS = 6 * 3600 * 1000
# The largest record on any kip topic. The broker's message.max.bytes, the producers'
# max_request_size and the consumers' fetch sizes are all derived from it, so that they agree.
MAX_MESSAGE_BYTES = 8 * 1024 * 1024
# A work item's record time is the broker's: when it was appended, which no producer
# sets, so a worker can tell a copy written later (workers/single_use.py).
APPEND_TIME = {"message.timestamp.type": "LogAppendTime"}


@dataclass(frozen=True)
class Replication:
    """How many brokers keep a copy of each partition (``factor``), and how many of them
    must hold a record before an ``acks=all`` producer is told it is written
    (``min_insync``). With fewer copies in sync than that, writes are refused rather than
    kept on too few disks (docs/deploy.md)."""

    factor: int = 1
    min_insync: int = 1

    @classmethod
    def for_cluster(cls, brokers: int, factor: int | None = None,
                    min_insync: int | None = None) -> Replication:
        """What a cluster of ``brokers`` can hold, where not given: a factor of 3 (Kafka's
        guidance) or every broker where fewer, and ``min_insync`` one less than the
        factor, at most 2: one broker may be down and writes go on."""
        factor = factor or min(3, brokers)
        chosen = cls(factor, min_insync or max(1, min(2, factor - 1)))
        chosen.check(brokers)
        return chosen

    def broker_properties(self) -> list[str]:
        """A broker's settings for Kafka's own topics (consumer offsets, transaction
        state) and for any topic created without its own, replicated as kip's are; and
        never an unclean leader election: a replica that is behind never becomes leader,
        at the price of waiting for one that is not (docs/deploy.md)."""
        return [f"offsets.topic.replication.factor={self.factor}",
                f"transaction.state.log.replication.factor={self.factor}",
                f"transaction.state.log.min.isr={self.min_insync}",
                f"default.replication.factor={self.factor}",
                f"min.insync.replicas={self.min_insync}",
                "unclean.leader.election.enable=false"]

    def check(self, brokers: int) -> None:
        if self.factor > brokers:
            raise ValueError(f"replication factor {self.factor} on a cluster of {brokers} "
                             f"broker{'s' if brokers != 1 else ''}: a topic cannot have more "
                             "copies than brokers")
        if not 1 <= self.min_insync <= self.factor:
            raise ValueError(f"min.insync.replicas {self.min_insync} with replication factor "
                             f"{self.factor}: it must be between 1 and the factor")


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    key: str
    purpose: str
    config: dict[str, str] = field(default_factory=dict)
    replicas: int = 1


def _delete(retention_ms: int) -> dict[str, str]:
    return {"cleanup.policy": "delete", "retention.ms": str(retention_ms),
            "max.message.bytes": str(MAX_MESSAGE_BYTES)}


def _compact() -> dict[str, str]:
    return {"cleanup.policy": "compact"}


def catalogue(names: TopicNames, models: list[str], partitions: int = 3,
              tenants: list[str] = (), replication: Replication = Replication()
              ) -> list[TopicSpec]:
    """The full topic list for a deployment serving ``models`` to ``tenants`` (each gets
    a reply topic of its own, where its results go by default), every topic replicated
    as ``replication`` says."""
    return [replace(spec, replicas=replication.factor,
                    config=spec.config | {"min.insync.replicas": str(replication.min_insync)})
            for spec in _unreplicated(names, models, partitions, tenants)]


def _unreplicated(names: TopicNames, models: list[str], partitions: int,
                  tenants: list[str]) -> list[TopicSpec]:
    specs = [TopicSpec(names.requests(p), partitions, "tenant",
                       f"inference requests of class {p.value}", _delete(DAY_MS))
             for p in PRIORITIES]
    specs += [TopicSpec(names.admitted(p), partitions, "input partition",
                        f"request ids admitted from {names.requests(p)}, partition by "
                        "partition (replay protection)", _delete(ADMITTED_RETENTION_MS))
              for p in PRIORITIES]
    specs += [TopicSpec(names.work(m, p), partitions, "request id",
                        f"admitted {p.value} requests routed to model {m}",
                        _delete(DAY_MS) | APPEND_TIME)
              for m in models for p in PRIORITIES]
    specs += [TopicSpec(names.answered(m, p), partitions, "input partition",
                        f"request ids {m}'s workers answered from {names.work(m, p)}, "
                        "partition by partition (single use)", _delete(DAY_MS))
              for m in models for p in PRIORITIES]
    specs += [reply_topic(names, partitions=partitions)] + _shared(names, partitions)
    specs += [reply_topic(names, tenant, partitions, f"results of tenant {tenant} (its own)")
              for tenant in tenants]
    return specs


def _shared(names: TopicNames, partitions: int) -> list[TopicSpec]:
    """The topics every model and tenant share, beside the results topic."""
    return [
        TopicSpec(names.audit, partitions, "request id",
                  "governance records, one final record per request", _delete(30 * DAY_MS)),
        TopicSpec(names.deadletter, 1, "origin topic",
                  "messages kip could not use, with their origin", _delete(30 * DAY_MS)),
        TopicSpec(names.releases, 1, "alias",
                  "every release of every alias: versions, weights, who, when, why",
                  _delete(-1)),
        TopicSpec(names.cancels, 1, "tenant/request id",
                  "accepted cancels, which workers follow to skip what was cancelled",
                  _delete(CANCEL_RETENTION_MS)),
        TopicSpec(names.deadletter_replays, 1, "origin (topic:partition:offset)",
                  "dead letters replayed to their origin, once each", _compact()),
        TopicSpec(names.control, 1, "entity (route, tenant)",
                  "model routes, tenant policies, rollout state", _compact()),
        TopicSpec(names.telemetry, 1, "worker id",
                  "loaded models, queue depth, throughput per worker", _compact()),
        TopicSpec(names.quota_levels, 1, "tenant",
                  "token-bucket levels, so quotas survive a pipeline restart", _compact()),
    ]


def reply_topic(names: TopicNames, suffix: str = "", partitions: int = 3,
                purpose: str = "terminal results (default reply topic)") -> TopicSpec:
    """The results topic, or with ``suffix`` a reply topic of its own that requests name
    in ``reply_to`` (``<results>.<suffix>``), set up the same way."""
    name = f"{names.results}.{suffix}" if suffix else names.results
    return TopicSpec(name, partitions, "request id", purpose, _delete(7 * DAY_MS))

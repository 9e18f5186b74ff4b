"""The declarative catalogue: every topic kip needs, with its settings and its key."""

from __future__ import annotations

from dataclasses import dataclass, field

from kip.schemas.messages import PRIORITIES
from kip.topics.names import TopicNames

DAY_MS = 24 * 3600 * 1000
# Kept well past any replay window a deployment would set (the default is 5 minutes).
ADMITTED_RETENTION_MS = 6 * 3600 * 1000
# The largest record on any kip topic. The broker's message.max.bytes, the producers'
# max_request_size and the consumers' fetch sizes are all derived from it, so that they agree.
MAX_MESSAGE_BYTES = 8 * 1024 * 1024
# A work item's record time is the broker's: when it was appended, which no producer
# sets, so a worker can tell a copy written later (workers/single_use.py).
APPEND_TIME = {"message.timestamp.type": "LogAppendTime"}


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    key: str
    purpose: str
    config: dict[str, str] = field(default_factory=dict)


def _delete(retention_ms: int) -> dict[str, str]:
    return {"cleanup.policy": "delete", "retention.ms": str(retention_ms),
            "max.message.bytes": str(MAX_MESSAGE_BYTES), "min.insync.replicas": "1"}


def _compact() -> dict[str, str]:
    return {"cleanup.policy": "compact", "min.insync.replicas": "1"}


def catalogue(names: TopicNames, models: list[str], partitions: int = 3,
              tenants: list[str] = ()) -> list[TopicSpec]:
    """The full topic list for a deployment serving ``models`` to ``tenants`` (each gets
    a reply topic of its own, where its results go by default)."""
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
    specs += [
        reply_topic(names, partitions=partitions),
        TopicSpec(names.audit, partitions, "request id",
                  "governance records, one final record per request", _delete(30 * DAY_MS)),
        TopicSpec(names.deadletter, 1, "origin topic",
                  "messages kip could not use, with their origin", _delete(30 * DAY_MS)),
        TopicSpec(names.releases, 1, "alias",
                  "every release of every alias: versions, weights, who, when, why",
                  _delete(-1)),
        TopicSpec(names.deadletter_replays, 1, "origin (topic:partition:offset)",
                  "dead letters replayed to their origin, once each", _compact()),
        TopicSpec(names.control, 1, "entity (route, tenant)",
                  "model routes, tenant policies, rollout state", _compact()),
        TopicSpec(names.telemetry, 1, "worker id",
                  "loaded models, queue depth, throughput per worker", _compact()),
        TopicSpec(names.quota_levels, 1, "tenant",
                  "token-bucket levels, so quotas survive a pipeline restart", _compact()),
    ]
    specs += [reply_topic(names, tenant, partitions, f"results of tenant {tenant} (its own)")
              for tenant in tenants]
    return specs


def reply_topic(names: TopicNames, suffix: str = "", partitions: int = 3,
                purpose: str = "terminal results (default reply topic)") -> TopicSpec:
    """The results topic, or with ``suffix`` a reply topic of its own that requests name
    in ``reply_to`` (``<results>.<suffix>``), set up the same way."""
    name = f"{names.results}.{suffix}" if suffix else names.results
    return TopicSpec(name, partitions, "request id", purpose, _delete(7 * DAY_MS))

"""``kip topics apply``: create missing topics, report drift, warn where a topic can lose
data; change nothing else."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import TopicAlreadyExistsError, for_code

from kip.topics.catalogue import TopicSpec
from kip.transport.clients import KafkaConnection


@dataclass
class ApplyReport:
    created: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    drift: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)   # topics that can lose data

    def lines(self) -> list[str]:
        out = [f"created   {n}" for n in self.created]
        out += [f"ok        {n}" for n in self.unchanged]
        out += [f"DRIFT     {d}" for d in self.drift]
        out += [f"WARNING   {w}" for w in self.warnings]
        return out


async def cluster_brokers(kafka: KafkaConnection) -> int:
    """How many brokers the cluster has (from metadata, which any client may read)."""
    admin = kafka.admin(client_id="kip-topics")
    await admin.start()
    try:
        return len((await admin.describe_cluster())["brokers"])
    finally:
        await admin.close()


async def apply(kafka: KafkaConnection, specs: list[TopicSpec]) -> ApplyReport:
    """Create what is missing with each spec's replicas; compare partitions, replication
    and config of what exists; warn of any topic that one lost broker would lose."""
    admin = kafka.admin(client_id="kip-topics")
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        report = ApplyReport()
        new = [s for s in specs if s.name not in existing]
        if new:
            # The broker that listed topics may not know one the controller has already
            # made (each broker learns of it a moment later): the controller's answer
            # says which were created and which existed.
            existed = await _create(admin, new)
            existing |= existed
            report.created = [s.name for s in new if s.name not in existed]
            await _until_served(admin, report.created)
        old = [s for s in specs if s.name in existing]
        if old:
            await _compare(admin, old, report)
        brokers = len((await admin.describe_cluster())["brokers"])
        report.warnings = await _fragile(admin, [s.name for s in specs], brokers)
        return report
    finally:
        await admin.close()


async def _create(admin: AIOKafkaAdminClient, specs: list[TopicSpec]) -> set[str]:
    """Create ``specs``; return those that existed already. Any other refusal (too few
    brokers for the factor, a config the broker rejects) raises, naming the topic."""
    response = await admin.create_topics([
        NewTopic(s.name, s.partitions, s.replicas, topic_configs=s.config) for s in specs])
    existed = set()
    for topic, code, *rest in response.topic_errors:
        if code == TopicAlreadyExistsError.errno:
            existed.add(topic)
        elif code:
            message = rest[0] if rest and rest[0] else for_code(code).__name__
            raise TopicCreationError(f"{topic}: the controller refused it: {message}")
    return existed


class TopicCreationError(RuntimeError):
    """A topic kip needs could not be created."""


async def _compare(admin: AIOKafkaAdminClient, specs: list[TopicSpec], report: ApplyReport
                   ) -> None:
    described = {t["topic"]: t for t in await _until_served(admin, [s.name for s in specs],
                                                              leaders=False)}
    actual_config = await _configs(admin, [s.name for s in specs])
    for spec in specs:
        problems = []
        partitions = len(described[spec.name]["partitions"])
        if partitions != spec.partitions:
            problems.append(f"partitions {partitions} (catalogue: {spec.partitions})")
        replicas = _replication_factor(described[spec.name])
        if replicas != spec.replicas:
            problems.append(f"replication factor {replicas} (catalogue: {spec.replicas})")
        for key, want in spec.config.items():
            have = actual_config.get(spec.name, {}).get(key)
            if have != want:
                problems.append(f"{key}={have} (catalogue: {want})")
        if problems:
            report.drift.append(f"{spec.name}: " + ", ".join(problems))
        else:
            report.unchanged.append(spec.name)


async def _until_served(admin: AIOKafkaAdminClient, names: list[str],
                        timeout_s: float = 30.0, leaders: bool = True) -> list[dict]:
    """Wait until the broker's metadata names every partition of ``names``, each with
    a leader unless ``leaders`` is False; return that description. A created topic reaches the controller first and
    the broker that serves metadata a moment later; a client started in between would
    find no such topic."""
    give_up = time.monotonic() + timeout_s
    while True:
        topics = await admin.describe_topics(names)
        waiting = [t["topic"] for t in topics if not _served(t, leaders)]
        if not waiting:
            return topics
        if time.monotonic() > give_up:
            raise TimeoutError(f"created, but after {timeout_s:.0f} s the broker still "
                               f"serves no leader for {', '.join(sorted(waiting))}: check "
                               "the broker's log")
        await asyncio.sleep(0.05)


async def _fragile(admin: AIOKafkaAdminClient, names: list[str], brokers: int) -> list[str]:
    """The topics among ``names`` that one lost broker's disk would lose records of: a
    single copy on a cluster that could keep more."""
    if brokers < 2:
        return []
    # Each describe may reach another broker; one that has not yet learnt of a topic
    # just made would describe it with no partitions, so wait until it is served.
    return [f"{t['topic']}: replication factor 1 on a cluster of {brokers} brokers: "
            "losing one broker's disk loses its records"
            for t in await _until_served(admin, names, leaders=False)
            if _replication_factor(t) == 1]


def _replication_factor(topic: dict) -> int:
    """The fewest copies any partition of ``topic`` has."""
    return min((len(p["replicas"]) for p in topic["partitions"]), default=0)


def _served(topic: dict, leaders: bool = True) -> bool:
    return (topic["error_code"] == 0 and bool(topic["partitions"])
            and (not leaders or all(p["leader"] >= 0 for p in topic["partitions"])))


async def _configs(admin: AIOKafkaAdminClient, names: list[str], timeout_s: float = 30.0
                   ) -> dict[str, dict[str, str]]:
    """Each topic's configuration, once a broker describes every one of them: the
    broker asked may not know a topic just made (it describes it with an error, no
    entries), and its settings would read as drift."""
    give_up = time.monotonic() + timeout_s
    while True:
        configs = _config_by_topic(await admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, name) for name in names]))
        if all(configs.get(name) for name in names) or time.monotonic() > give_up:
            return configs
        await asyncio.sleep(0.05)


def _config_by_topic(responses) -> dict[str, dict[str, str]]:
    """Topic -> its settings; a topic described with an error gets none."""
    out: dict[str, dict[str, str]] = {}
    for response in responses:
        for resource in response.resources:
            err, _msg, _type, name, entries = resource[:5]
            out[name] = {} if err else {e[0]: e[1] for e in entries}
    return out

"""``kip topics apply``: create missing topics, report drift, change nothing else."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from kip.topics.catalogue import TopicSpec
from kip.transport.clients import KafkaConnection


@dataclass
class ApplyReport:
    created: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    drift: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        out = [f"created   {n}" for n in self.created]
        out += [f"ok        {n}" for n in self.unchanged]
        out += [f"DRIFT     {d}" for d in self.drift]
        return out


async def apply(kafka: KafkaConnection, specs: list[TopicSpec], replication_factor: int = 1
                ) -> ApplyReport:
    """Create what is missing; compare partitions and config of what exists."""
    admin = kafka.admin(client_id="kip-topics")
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        report = ApplyReport()
        new = [s for s in specs if s.name not in existing]
        if new:
            await admin.create_topics([
                NewTopic(s.name, s.partitions, replication_factor, topic_configs=s.config)
                for s in new])
            report.created = [s.name for s in new]
            await _until_served(admin, report.created)
        old = [s for s in specs if s.name in existing]
        if old:
            await _compare(admin, old, report)
        return report
    finally:
        await admin.close()


async def _compare(admin: AIOKafkaAdminClient, specs: list[TopicSpec], report: ApplyReport
                   ) -> None:
    described = {t["topic"]: t for t in await admin.describe_topics([s.name for s in specs])}
    configs = await admin.describe_configs(
        [ConfigResource(ConfigResourceType.TOPIC, s.name) for s in specs])
    actual_config = _config_by_topic(configs)
    for spec in specs:
        problems = []
        partitions = len(described[spec.name]["partitions"])
        if partitions != spec.partitions:
            problems.append(f"partitions {partitions} (catalogue: {spec.partitions})")
        for key, want in spec.config.items():
            have = actual_config.get(spec.name, {}).get(key)
            if have != want:
                problems.append(f"{key}={have} (catalogue: {want})")
        if problems:
            report.drift.append(f"{spec.name}: " + ", ".join(problems))
        else:
            report.unchanged.append(spec.name)


async def _until_served(admin: AIOKafkaAdminClient, names: list[str],
                        timeout_s: float = 30.0) -> None:
    """Wait until the broker's metadata names every partition of ``names`` with a
    leader. A created topic reaches the controller first and the broker that serves
    metadata a moment later; a client started in between would find no such topic."""
    give_up = time.monotonic() + timeout_s
    while True:
        topics = await admin.describe_topics(names)
        waiting = [t["topic"] for t in topics if not _served(t)]
        if not waiting:
            return
        if time.monotonic() > give_up:
            raise TimeoutError(f"created, but after {timeout_s:.0f} s the broker still "
                               f"serves no leader for {', '.join(sorted(waiting))}: check "
                               "the broker's log")
        await asyncio.sleep(0.05)


def _served(topic: dict) -> bool:
    return (topic["error_code"] == 0 and bool(topic["partitions"])
            and all(p["leader"] >= 0 for p in topic["partitions"]))


def _config_by_topic(responses) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for response in responses:
        for resource in response.resources:
            _err, _msg, _type, name, entries = resource[:5]
            out[name] = {e[0]: e[1] for e in entries}
    return out

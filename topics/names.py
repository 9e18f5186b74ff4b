"""Every topic name kip uses comes from here, never from a literal elsewhere.

``TopicNames(prefix)`` lets several kip deployments (or test runs) share one cluster.
"""

from __future__ import annotations

from dataclasses import dataclass

from kip.schemas.messages import PRIORITIES, Priority, priority_of


@dataclass(frozen=True)
class TopicNames:
    prefix: str = "kip"

    def requests(self, priority: Priority | str) -> str:
        return f"{self.prefix}.requests.{priority_of(priority)}"

    def work(self, model: str, priority: Priority | str) -> str:
        return f"{self.prefix}.work.{model}.{priority_of(priority)}"

    @property
    def results(self) -> str:
        return f"{self.prefix}.results"

    def reply_topic(self, tenant: str) -> str:
        """A tenant's own reply topic: its results by default, readable by it alone."""
        return f"{self.results}.{tenant}"

    def is_reply_topic(self, name: str | None) -> bool:
        """Whether ``name`` is inside the results namespace (``<results>`` or
        ``<results>.<suffix>``): the only topics kip writes results to."""
        results = self.results
        return name is not None and (name == results or (
            name.startswith(results + ".") and len(name) > len(results) + 1))

    def owned_reply_topic(self, name: str, tenant: str) -> bool:
        """Whether reply topic ``name`` belongs to ``tenant``: its own reply topic, or one
        below it (``<results>.<tenant>.<suffix>``). The shared results topic belongs to
        every tenant (it is where results go when a tenant has no topic of its own)."""
        own = self.reply_topic(tenant)
        return name in (self.results, own) or name.startswith(own + ".")

    @property
    def audit(self) -> str:
        return f"{self.prefix}.audit"

    @property
    def deadletter(self) -> str:
        return f"{self.prefix}.deadletter"

    @property
    def control(self) -> str:
        return f"{self.prefix}.control"

    def admitted(self, priority: Priority | str) -> str:
        """The ids the pipeline admitted from ``requests(priority)``, partition by
        partition: what replay protection rebuilds from (pipeline/replays.py)."""
        return f"{self.prefix}.admitted.{priority_of(priority)}"

    def answered(self, model: str, priority: Priority | str) -> str:
        """The request ids ``model``'s workers answered from ``work(model, priority)``,
        partition by partition: what single use rebuilds from (workers/single_use.py)."""
        return f"{self.prefix}.answered.{model}.{priority_of(priority)}"

    @property
    def releases(self) -> str:
        """Every release of every alias (schemas/releases.py): the release record."""
        return f"{self.prefix}.releases"

    @property
    def cancels(self) -> str:
        """Accepted cancels (schemas/messages.py ``CancelNotice``), which every worker
        follows to skip what was cancelled before it runs."""
        return f"{self.prefix}.cancels"

    @property
    def deadletter_replays(self) -> str:
        """Which dead letters were replayed (``kip deadletter replay``), once each."""
        return f"{self.prefix}.deadletter-replays"

    @property
    def deadletter_replayer(self) -> str:
        """The transactional id of ``kip deadletter replay``: one replayer at a time."""
        return f"{self.prefix}-operator.deadletter-replay"

    @property
    def quota_levels(self) -> str:
        return f"{self.prefix}.quota-levels"

    @property
    def telemetry(self) -> str:
        return f"{self.prefix}.telemetry"

    def owns(self, name: str) -> bool:
        """Whether a topic, group or transactional id belongs to this deployment."""
        return name.startswith((f"{self.prefix}.", f"{self.prefix}-"))

    def any_partition(self, topic: str) -> bool:
        """Work items and results: one record per request, read in no key order, so a
        producer may put them in any partition (audit records keep key order: a
        request's records stay in one partition)."""
        results = self.results
        return (topic.startswith(f"{self.prefix}.work.") or topic == results
                or topic.startswith(results + "."))

    # Consumer groups: named here too, so that tools can find a stage's offsets.

    def pipeline_group(self, classes: tuple[Priority, ...] = PRIORITIES) -> str:
        """One pipeline for every class, or one per set of classes (``--classes``)."""
        if tuple(classes) == PRIORITIES:
            return f"{self.prefix}-pipeline"
        return f"{self.prefix}-pipeline-" + "-".join(Priority(c).value for c in classes)

    def tenant_groups(self, tenant: str) -> str:
        """The prefix of the consumer groups a tenant's clients may use to read their
        reply topics (``<prefix>.tenants.<tenant>.``): kip's client reads without a
        group, but some clients read only through one."""
        return f"{self.prefix}.tenants.{tenant}."

    def worker_group(self, model: str, lane: str = "") -> str:
        """``lane`` "interactive", or "" for the standard/batch lane."""
        return f"{self.prefix}.workers.{model}" + (f".{lane}" if lane else "")

    def all_requests(self) -> list[str]:
        return [self.requests(p) for p in PRIORITIES]

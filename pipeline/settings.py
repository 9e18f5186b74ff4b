"""Pipeline process settings (env prefix ``KIP_``)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator, model_validator

from kip.pipeline.access import DEFAULT_REPLAY_WINDOW_MS
from kip.pipeline.admission import AdmissionPolicy
from kip.pipeline.health import HealthLimits
from kip.runtime.settings import KipSettings
from kip.schemas.messages import PRIORITIES, Priority

# A round closes this long after its first event (or when full): an interactive round
# takes what has arrived and goes (under load one fetch brings many at once anyway); a
# batch request can spare 200 ms, and longer rounds cut the pipeline's and the broker's
# transaction work (docs/architecture.md, "Rounds").
DEFAULT_ROUND_MS = {Priority.INTERACTIVE: 0.0, Priority.STANDARD: 20.0, Priority.BATCH: 200.0}
# A round also closes when it holds this many events. Each round costs the pipeline and
# the broker one transaction per input partition, and each of those costs the broker as
# much CPU as hundreds of requests' records; the workers' pulls follow the rounds, so
# their transactions too. Standard and batch rounds are decided in slices, each
# followed by a turn of the event loop (``DECIDE_SLICE`` in pipeline/app.py), so a long
# one holds an interactive agent in the same process back no longer than a short one.
DEFAULT_TAKE_MAX = {Priority.INTERACTIVE: 200, Priority.STANDARD: 600, Priority.BATCH: 1000}
# A round takes from each request partition in turn (pipeline/rounds.py): an interactive
# request waits behind at most this many of another partition's (a flooding tenant's)
# in each round; the other classes take for throughput.
DEFAULT_TAKE_PER_PARTITION = {Priority.INTERACTIVE: 32, Priority.STANDARD: 600,
                              Priority.BATCH: 1000}


class PipelineSettings(KipSettings):
    access_file: Path = Field(None, description="keys and tenant policies (default "
                              "$KIP_HOME/access.json)", validate_default=False)
    replay_window_ms: int = Field(DEFAULT_REPLAY_WINDOW_MS,
                                  description="accepted |now - issued_at_ms|")
    take_max: dict[Priority, int] = Field(
        default_factory=lambda: dict(DEFAULT_TAKE_MAX),
        description="most requests per round, per class (JSON; one number: every class)")
    take_per_partition: dict[Priority, int] = Field(
        default_factory=lambda: dict(DEFAULT_TAKE_PER_PARTITION),
        description="most requests of one request partition per round, per class (JSON; "
        "one number: every class)")
    round_ms: dict[Priority, float] = Field(
        default_factory=lambda: dict(DEFAULT_ROUND_MS),
        description="longest wait to fill a round after its first event, per class "
        "(JSON). Each round costs one transaction per input partition: short rounds keep "
        "interactive latency low, longer ones let batch traffic through in fewer "
        "transactions")
    admission: AdmissionPolicy = Field(
        default_factory=AdmissionPolicy,
        description="payload limits, default deadlines, wait budgets per class (JSON)")
    request_partitions: int = Field(3, description="partitions of faust's own topics; keep "
                                    "equal to the request topics' partition count")
    classes: tuple[Priority, ...] = Field(
        PRIORITIES, description="the request classes this process admits; run one process "
        "for interactive and another for standard and batch to keep batch admission from "
        "delaying interactive requests")
    nice: int = Field(0, ge=0, le=19, description="lower this process's CPU priority by "
                      "this much (e.g. 19 for a standard/batch pipeline sharing a "
                      "host with workers)")

    health_gate: HealthLimits = Field(
        HealthLimits(), description="when a canary is rolled back by itself: failure rate "
        "and p99 inference ratio against the stable version, after a least number of "
        "requests (JSON)")
    session_timeout_ms: int = Field(
        10_000, description="consumer-group session timeout: how soon a dead pipeline "
        "process's partitions move to another")

    def rounds_of(self, priority: Priority) -> tuple[int, float, int]:
        """A class's rounds (pipeline/rounds.py): most events, longest wait to fill (s),
        most events of one partition."""
        return (self.take_max[priority], self.round_ms[priority] / 1000,
                self.take_per_partition[priority])

    @field_validator("round_ms")
    @classmethod
    def _every_class(cls, rounds: dict[Priority, float]) -> dict[Priority, float]:
        """Classes the setting leaves out keep their defaults."""
        return DEFAULT_ROUND_MS | rounds

    @field_validator("take_max", "take_per_partition", mode="before")
    @classmethod
    def _take_max_per_class(cls, take: object) -> object:
        """One number is every class's; classes a mapping leaves out keep their
        defaults."""
        if isinstance(take, int):
            return {p: take for p in PRIORITIES}
        return take

    @field_validator("take_max", "take_per_partition")
    @classmethod
    def _every_class_takes(cls, take: dict[Priority, int], info) -> dict[Priority, int]:
        if any(n < 1 for n in take.values()):
            raise ValueError(f"{info.field_name}: at least 1 per class")
        defaults = DEFAULT_TAKE_MAX if info.field_name == "take_max" else DEFAULT_TAKE_PER_PARTITION
        return defaults | take

    @model_validator(mode="after")
    def _access_under_home(self) -> PipelineSettings:
        if self.access_file is None:
            self.access_file = self.home / "access.json"
        return self

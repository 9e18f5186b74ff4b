"""``kip scaling`` settings (env prefix ``KIP_``)."""

from __future__ import annotations

from pydantic import Field

from kip.runtime.settings import KipSettings
from kip.scaling.estimate import Sizing


class ScalingSettings(KipSettings):
    scaling_interval_s: float = Field(2.0, gt=0, description="how often lag is read")
    scaling_window_s: float = Field(30.0, gt=0, description="arrivals are measured over "
                                    "this window")
    scaling_drain_s: float = Field(30.0, gt=0, description="a backlog should be gone "
                                   "this soon: it adds backlog / drain_s to the demand")
    scaling_utilization: float = Field(0.8, gt=0, le=1, description="the share of a "
                                       "worker's measured capacity the estimate plans on")
    scaling_requests_per_worker: float = Field(
        0.0, ge=0, description="one worker's requests per second before any has "
        "reported (0: unknown; demand then asks for one worker more than are live)")

    def sizing(self) -> Sizing:
        return Sizing(self.scaling_drain_s, self.scaling_utilization,
                      self.scaling_requests_per_worker)

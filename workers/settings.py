"""Worker process settings (env prefix ``KIP_``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from kip.runtime.settings import KipSettings


class WorkerSettings(KipSettings):
    model: str = Field("minilm", description="alias whose model this worker serves")
    device: Literal["auto", "cuda", "cpu"] = Field(
        "auto", description="auto: CUDA when a GPU is present; cuda: refuse CPU fallback")
    assume_gpu: bool = Field(
        False, description="with device=auto, ask for CUDA even where /dev/nvidia0 is "
        "missing (a container that exposes the GPU under another device node)")
    max_batch: int = Field(0, description="the most requests per inference call, and the "
                           "records one interactive pull takes; 0 = manifest max_batch")
    max_delay_ms: float = Field(5.0, description="longest wait to fill a standard or batch "
                                "class batch")
    interactive_max_delay_ms: float = Field(
        0.0, description="longest wait to fill an interactive batch: every ms of it is a "
        "ms of latency when requests trickle in, and under load a fetch returns many at once")
    session_timeout_ms: int = Field(30_000, description="the standard/batch lane's "
                                    "consumer group session timeout; transactions time out "
                                    "at two thirds of it")
    interactive_session_timeout_ms: int = Field(
        6_000, description="the interactive lane's: how long a worker host cut off keeps "
        "its interactive partitions from the others (the broker's least by default)")
    heartbeat_interval_ms: int = Field(
        250, gt=0, description="how often each lane's consumer heartbeats: how soon a "
        "member hears of a rebalance, so about the longest a join or leave stops the group")
    group_instance_id: str | None = Field(
        None, max_length=200, description="static group membership (KIP-345), one per "
        "worker (a pod's name): a worker back within its session timeout takes its "
        "partitions again with no rebalance; a stop leaves the groups at once")
    drain_timeout_s: float = Field(
        20.0, gt=0, description="on SIGTERM, how long the batches already pulled get to "
        "finish and commit before the worker stops anyway (inside the termination grace)")
    max_poll_interval_ms: int = Field(
        300_000, description="longest one batch (inference and commit) may take before the "
        "group gives its partitions away; heartbeats flow meanwhile, inference runs in a thread")
    max_class_wait_ms: float = Field(
        2_000, description="aging: longest a lower class waits while higher ones have backlog")
    telemetry_interval_s: float = Field(1.0, description="how often capacity is reported")
    memory_budget_bytes: int = Field(0, ge=0, description="host memory the loaded versions' "
                                     "estimates may add up to; a version that does not fit "
                                     "is refused MODEL_UNAVAILABLE (0: no budget)")
    unload_after_s: float = Field(300.0, gt=0, description="a loaded version unused this "
                                  "long is unloaded (not the one the worker started with)")
    health_window_s: float = Field(30.0, gt=0, description="the window each version's "
                                   "failures and p99 inference time are reported over")
    intra_op_threads: int = Field(
        0, description="ONNX Runtime threads per inference; 0 = one per core")
    intra_op_spinning: bool = Field(
        False, description="let ONNX Runtime's threads spin between calls: a little less "
        "latency for small models, CPU taken from every other process on the host")
    background_call_ms: float = Field(
        10.0, gt=0, description="about how long one inference call for standard and batch "
        "requests may take (the longest an interactive request waits for a call already "
        "running): requests per call follow from the measured time per row")
    background_min_batch: int = Field(
        4, ge=1, description="at least this many standard or batch requests per inference "
        "call, however long calls take: on a contended host calls slow down, and smaller "
        "calls would cost more per row and slow them further")
    background_max_batch: int = Field(
        256, ge=1, description="at most this many standard or batch requests per inference "
        "call")
    background_pull: int = Field(
        0, ge=0, description="standard/batch records pulled, answered and committed "
        "together (one transaction per input partition), in calls sized as above; 0 = "
        "max_batch. More than one call's worth costs the broker fewer transactions per "
        "request, and results wait for the whole pull")

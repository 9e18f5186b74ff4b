"""The GPU gauges: without NVML (this machine has no GPU driver) a worker exports none
and the sampler returns at once; with NVML's answers they are set per device."""

import asyncio
from types import SimpleNamespace

from prometheus_client import REGISTRY

from kip.workers import gpu_metrics


def test_without_nvml_the_sampler_returns_and_exports_nothing():
    if gpu_metrics.open_nvml() is not None:
        return   # a GPU host: the gauges are real there
    asyncio.run(asyncio.wait_for(gpu_metrics.keep_sampling(0.01), 5))
    assert REGISTRY.get_sample_value("kip_gpu_memory_used_bytes", {"gpu": "0"}) is None


class _OneDevice:
    """NVML's answers for one device, in the shapes pynvml returns them."""

    def nvmlDeviceGetCount(self):
        return 1

    def nvmlDeviceGetHandleByIndex(self, index):
        return index

    def nvmlDeviceGetUtilizationRates(self, handle):
        return SimpleNamespace(gpu=37, memory=12)

    def nvmlDeviceGetMemoryInfo(self, handle):
        return SimpleNamespace(used=3 << 30, total=80 << 30, free=77 << 30)


def test_a_sample_sets_each_gauge_per_device():
    gpu_metrics.sample(_OneDevice())
    assert REGISTRY.get_sample_value("kip_gpu_utilization_ratio", {"gpu": "0"}) == 0.37
    assert REGISTRY.get_sample_value("kip_gpu_memory_used_bytes", {"gpu": "0"}) == 3 << 30
    assert REGISTRY.get_sample_value("kip_gpu_memory_total_bytes", {"gpu": "0"}) == 80 << 30

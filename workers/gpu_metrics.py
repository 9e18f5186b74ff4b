"""GPU utilisation and memory per worker, read through NVML (nvidia-ml-py), as gauges.

Only where a worker runs on CUDA and NVML answers: a CPU host (or one without the
``gpu`` extra) exports no GPU series, and the dashboard's GPU row stays empty there. The
readings are of the whole device, as ``nvidia-smi`` shows them: several workers sharing
one GPU each report the same device.
"""

from __future__ import annotations

import asyncio
import logging

from prometheus_client import Gauge

log = logging.getLogger("kip.worker")
UTILIZATION = Gauge("kip_gpu_utilization_ratio", "Share of the last sample period the "
                    "GPU ran a kernel (NVML), 0 to 1", ["gpu"])
MEMORY_USED = Gauge("kip_gpu_memory_used_bytes", "GPU memory in use (NVML)", ["gpu"])
MEMORY_TOTAL = Gauge("kip_gpu_memory_total_bytes", "GPU memory in all (NVML)", ["gpu"])


def open_nvml():
    """NVML's module, initialised, or None where there is no NVML (no driver, no GPU, no
    nvidia-ml-py)."""
    try:
        import pynvml
        pynvml.nvmlInit()
    except Exception as err:   # ImportError or any NVMLError: no GPU gauges here
        log.info("no GPU gauges: %r", err)
        return None
    return pynvml


def sample(nvml) -> None:
    """Set the gauges from every GPU NVML sees."""
    for index in range(nvml.nvmlDeviceGetCount()):
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        rates = nvml.nvmlDeviceGetUtilizationRates(handle)
        memory = nvml.nvmlDeviceGetMemoryInfo(handle)
        gpu = str(index)
        UTILIZATION.labels(gpu).set(rates.gpu / 100)
        MEMORY_USED.labels(gpu).set(memory.used)
        MEMORY_TOTAL.labels(gpu).set(memory.total)


async def keep_sampling(interval_s: float) -> None:
    """Sample every ``interval_s`` until cancelled; return at once without NVML."""
    nvml = await asyncio.to_thread(open_nvml)
    if nvml is None:
        return
    try:
        while True:
            await asyncio.to_thread(sample, nvml)
            await asyncio.sleep(interval_s)
    finally:
        nvml.nvmlShutdown()

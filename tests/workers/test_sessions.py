"""A worker's loaded versions: a version over the memory budget is refused with a clear
error while the others keep serving, and an unused version is unloaded, its memory given
back (the process's RSS falls)."""

from __future__ import annotations

import asyncio
import gc

import numpy as np
import pytest

from kip.runtime.allocator import give_back
from kip.schemas.errors import ModelUnavailable
from kip.schemas.tensors import Tensor
from kip.workers.sessions import Sessions
from kip.workers.telemetry import rss_bytes


def _version(registry, alias: str) -> tuple[str, str]:
    m = registry.resolve(alias).manifest
    return m.name, m.version


def test_a_version_over_the_budget_is_refused_and_the_others_keep_serving(registry):
    digits, minilm = _version(registry, "digits"), _version(registry, "minilm")
    budget = registry.resolve("digits").manifest.memory_estimate_bytes + 1024

    async def go():
        sessions = Sessions(registry, device="cpu", budget_bytes=budget)
        await sessions.get(*digits)
        with pytest.raises(ModelUnavailable, match="needs an estimated .* MiB; this "
                           "worker's budget is"):
            await sessions.get(*minilm)
        with pytest.raises(ModelUnavailable):   # remembered: not tried again
            await sessions.get(*minilm)
        session = await sessions.get(*digits)
        pixels = Tensor.from_array("pixels", np.zeros((1, 64), np.float32))
        assert session.run([[pixels]])[0]
        sessions.close()
        return sessions
    sessions = asyncio.run(go())
    assert list(sessions.loaded) == ["@".join(digits)]
    assert list(sessions.refused) == ["@".join(minilm)]
    sessions.refused["@".join(minilm)] = (sessions.refused["@".join(minilm)][0], -1e9)
    with pytest.raises(ModelUnavailable):   # tried again after REFUSAL_RETRY_S: still over
        asyncio.run(sessions.get(*minilm))


def test_an_unused_version_is_unloaded_and_its_memory_given_back(registry):
    minilm = _version(registry, "minilm")

    async def go():
        sessions = Sessions(registry, device="cpu")
        await sessions.get(*minilm)   # warmed up as it loads
        sessions.close()
        return sessions
    gc.collect()   # what earlier tests freed but the allocator kept, the load would reuse
    give_back()
    before = rss_bytes()
    sessions = asyncio.run(go())
    loaded = rss_bytes()
    assert sessions.unload_idle(grace_s=60, keep=set()) == []   # just used: kept
    assert sessions.unload_idle(grace_s=0, keep=set()) == ["@".join(minilm)]
    unloaded = rss_bytes()
    print(f"RSS before {before / 2**20:.0f} MiB, minilm loaded {loaded / 2**20:.0f} MiB, "
          f"unloaded {unloaded / 2**20:.0f} MiB")
    assert loaded - before > 80 * 2**20
    assert loaded - unloaded > 0.6 * (loaded - before)

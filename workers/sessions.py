"""The model versions one worker has loaded, by ``name@version``.

- **Staging**: with a model store, a version this host's cache lacks is staged in the
  background (models/staging.py); until it is there its requests end MODEL_UNAVAILABLE
  at once, and the versions already loaded go on serving whatever the store does.
- **Loading**: once per version, in a loader thread of its own (never a lane's: an
  interactive batch never waits behind another version's load), from the bytes
  ``Registry.load`` checked (files against the manifest, the manifest's signature), and
  warmed up with one inference before any request runs on it.
- **Memory budget** (``KIP_MEMORY_BUDGET_BYTES``): a version whose memory estimate
  (``memory_estimate_bytes``), added to those loaded, does not fit is refused with
  MODEL_UNAVAILABLE; the worker goes on serving the others instead of running out of
  memory.
- **Refusals** (over the budget, or MODEL_UNVERIFIED) are remembered for
  ``REFUSAL_RETRY_S`` and reported in telemetry, so admission stops routing to a version
  every worker refuses; after that the version is tried again (the files may have been
  fixed, or memory freed).
- **Unloading**: a version no request has used for ``unload_after_s`` (other than the
  one the worker started with) is dropped; its session goes once a batch still running
  on it is done, and glibc is asked to give the freed memory back.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from concurrent.futures import ThreadPoolExecutor

from kip.models.registry import Registry
from kip.models.signing import ModelTrust
from kip.models.staging import Stager
from kip.runtime import allocator, metrics
from kip.schemas.errors import KipError, ModelUnavailable, ModelUnverified
from kip.workers.session import ModelSession

log = logging.getLogger("kip.worker")
MIB = 1024 * 1024
REFUSAL_RETRY_S = 60.0


class Sessions:
    def __init__(self, registry: Registry, device: str = "auto", intra_op_threads: int = 0,
                 assume_gpu: bool = False, spinning: bool = False,
                 trust: ModelTrust = ModelTrust(), budget_bytes: int = 0,
                 stager: Stager | None = None) -> None:
        self.registry = registry
        self.stager = stager or Stager(registry, trust=trust)
        self.loader = ThreadPoolExecutor(1, thread_name_prefix="kip-load")
        self.trust = trust
        self.budget_bytes = budget_bytes
        self.options = (device, intra_op_threads, assume_gpu, spinning)
        self.loaded: dict[str, ModelSession] = {}
        self.refused: dict[str, tuple[KipError, float]] = {}   # key -> (error, when)
        self.last_used: dict[str, float] = {}
        self._loading = asyncio.Lock()

    async def get(self, name: str, version: str) -> ModelSession:
        """The session of ``name@version``, verified, loaded and warmed up on first use
        (or ahead of it: workers/preload.py); raises the registry's ``KipError`` for a
        version it refuses, or ``ModelUnavailable`` for one over the budget."""
        key = f"{name}@{version}"
        self.last_used[key] = time.monotonic()
        session = self.loaded.get(key)
        if session is not None:   # never wait on the lock while another version loads
            return session
        refused = self.refused.get(key)
        if refused is not None and time.monotonic() - refused[1] < REFUSAL_RETRY_S:
            raise refused[0]
        self.stager.available(name, version)   # not on this host: being staged, ask again
        async with self._loading:   # both lanes may ask for a new version at once
            if key not in self.loaded:
                try:
                    self._check_budget(name, version)
                    self.loaded[key] = await self._load(name, version)
                except (ModelUnavailable, ModelUnverified) as err:
                    self.refused[key] = (err, time.monotonic())
                    raise
                self.refused.pop(key, None)
        return self.loaded[key]

    async def prepare(self, name: str, version: str) -> ModelSession:
        """``get``, once the version is staged (waiting for its stage): a release names it."""
        await self.stager.staged(name, version)
        return await self.get(name, version)

    def _check_budget(self, name: str, version: str) -> None:
        if not self.budget_bytes:
            return
        needed = self.registry.get(name, version).manifest.memory_estimate_bytes
        in_use = sum(s.manifest.memory_estimate_bytes for s in self.loaded.values())
        if in_use + needed > self.budget_bytes:
            err = ModelUnavailable(
                f"{name}@{version} needs an estimated {needed / MIB:.0f} MiB; this worker's "
                f"budget is {self.budget_bytes / MIB:.0f} MiB, {in_use / MIB:.0f} MiB of it "
                f"taken by {', '.join(self.loaded) or 'nothing'}: refused")
            log.error("worker refuses %s", err.message)
            raise err

    async def _load(self, name: str, version: str) -> ModelSession:
        loop = asyncio.get_running_loop()
        try:
            loaded = await loop.run_in_executor(self.loader, self.registry.load, name,
                                                version, self.trust)
        except ModelUnverified as err:
            metrics.count_model_refused("worker", name, err)
            log.error("worker refuses %s@%s: %s", name, version, err.message)
            raise
        session = await loop.run_in_executor(self.loader, ModelSession, loaded, *self.options)
        await loop.run_in_executor(self.loader, session.warm_up)
        metrics.MODELS_LOADED.labels(name, version, session.provider).set(1)
        signer = loaded.signature.key_id if loaded.signature else "nobody (not required)"
        log.warning("worker serves %s@%s on %s, signed by %s", name, version,
                    session.provider, signer)
        return session

    def unload_idle(self, grace_s: float, keep: set[str], now: float | None = None
                    ) -> list[str]:
        """Drop the versions unused for ``grace_s`` (but those in ``keep``)."""
        now = time.monotonic() if now is None else now
        idle = [key for key in self.loaded
                if key not in keep and now - self.last_used.get(key, now) >= grace_s]
        for key in idle:
            session = self.loaded.pop(key)
            metrics.MODELS_LOADED.labels(*key.split("@"), session.provider).set(0)
            log.warning("worker unloads %s: unused for %.0f s", key, grace_s)
        if idle:
            del session
            gc.collect()
            allocator.give_back()
        return idle

    def close(self) -> None:
        self.loader.shutdown(wait=True)
        self.stager.close()

    @property
    def max_batch(self) -> int:
        return max(s.manifest.max_batch for s in self.loaded.values())

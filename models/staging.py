"""Versions staged from the model store into a host's cache, without a request waiting.

A pipeline or worker that meets a version its cache lacks asks ``Stager.available``:
the cached version where it is there; otherwise the answer is ``MODEL_UNAVAILABLE`` at
once, with the reason (being staged, or the store's last error), while one background
thread stages it (models/store.py checks every byte on the way in). Serving never waits
on the store: a slow store delays only the versions it has not yet delivered, and a
store that is down costs only the versions no host has cached. A failed stage is tried
again after ``RETRY_S``, or at once by ``stage`` (a release naming the version).

After each stage the cache is brought within its size bound (models/cache.py), keeping
what ``keep()`` names: the versions releases route to and the ones loaded.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from kip.models.cache import evict
from kip.models.registry import ModelVersion, Registry
from kip.models.signing import ModelTrust
from kip.models.store import ModelStore, serving_options
from kip.runtime.settings import KipSettings
from kip.schemas.errors import KipError, ModelNotFound, ModelUnavailable

log = logging.getLogger("kip.models")
RETRY_S = 5.0


class Stager:
    """Stages into ``cache`` from ``store`` (None: the cache is the registry, as on one
    host); ``files=False`` stages manifests and signatures only (what routing reads)."""

    def __init__(self, cache: Registry, store: ModelStore | None = None,
                 trust: ModelTrust = ModelTrust(), files: bool = True, max_bytes: int = 0,
                 keep: Callable[[], set[str]] = set) -> None:
        self.cache, self.store, self.trust, self.files = cache, store, trust, files
        self.max_bytes, self.keep = max_bytes, keep
        self.pending: dict[str, Future] = {}
        self.failed: dict[str, tuple[KipError, float]] = {}   # target -> (error, when)
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="kip-stage")

    def available(self, name: str, version: str) -> ModelVersion:
        """The cached version; else start staging it and raise ``ModelUnavailable`` (or
        the store's ``ModelNotFound``/``ModelUnverified``) without waiting."""
        try:
            return self.cache.get(name, version)
        except ModelNotFound:
            if self.store is None:
                raise
        target = f"{name}@{version}"
        failed = self.failed.get(target)
        if failed is not None and time.monotonic() - failed[1] < RETRY_S:
            raise failed[0]
        self.stage(name, version)
        raise ModelUnavailable(f"{target} is not on this host yet: it is being staged "
                               f"from the model store {self.store.url}; ask again shortly")

    def stage(self, name: str, version: str) -> Future:
        """Stage in the background (one stage per version at a time)."""
        target = f"{name}@{version}"
        future = self.pending.get(target)
        if future is None or future.done():
            future = self.pending[target] = self._pool.submit(self._stage, name, version)
        return future

    async def staged(self, name: str, version: str) -> ModelVersion:
        """The cached version, waiting for its stage where it is not there (a release
        names it: worth staging before any request asks)."""
        try:
            return self.cache.get(name, version)
        except ModelNotFound:
            if self.store is None:
                raise
        return await asyncio.wrap_future(self.stage(name, version))

    def stage_now(self, name: str, version: str) -> ModelVersion:
        """Stage in the caller's thread (a worker's start: it has nothing to serve yet)."""
        try:
            return self.cache.get(name, version)
        except ModelNotFound:
            if self.store is None:
                raise
        return self.stage(name, version).result()

    def _stage(self, name: str, version: str) -> ModelVersion:
        target, started = f"{name}@{version}", time.monotonic()
        try:
            staged = self.store.stage(name, version, self.cache, self.trust, self.files)
        except KipError as err:
            self.failed[target] = (err, time.monotonic())
            log.error("staging %s from the model store failed: %s", target, err.message)
            raise
        self.failed.pop(target, None)
        log.warning("staged %s from the model store in %.1f s", target,
                    time.monotonic() - started)
        if self.max_bytes:
            for removed in evict(self.cache, self.keep() | {target}, self.max_bytes):
                log.warning("evicted %s from the model cache (bound %d bytes)", removed,
                            self.max_bytes)
        return staged

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


def serving_stager(settings: KipSettings, cache: Registry, trust: ModelTrust,
                   files: bool = True, keep: Callable[[], set[str]] = set) -> Stager:
    """The stager of a pipeline (``files=False``) or worker with these settings."""
    store = None
    if settings.model_store:
        store = ModelStore(settings.model_store,
                           serving_options(settings.model_store, settings.model_store_timeout_s))
    return Stager(cache, store, trust, files, settings.model_cache_bytes, keep)

"""Route: model alias -> immutable model version, read from the registry with a short cache.

A version is routed to only once its manifest verifies (``ModelTrust``: a trusted
signature, where the deployment requires one); a refusal is ``MODEL_UNVERIFIED``,
counted, and asked again next time (a signature may be added meanwhile)."""

from __future__ import annotations

import time

from models.manifest import Manifest
from models.registry import Registry
from models.signing import ModelTrust, signatures
from runtime import metrics
from schemas.errors import ModelNotFound, ModelUnverified
from schemas.messages import Route


class Router:
    """Resolves aliases through ``aliases.json``; re-reads it every ``refresh_s``."""

    def __init__(self, registry: Registry, refresh_s: float = 2.0,
                 trust: ModelTrust = ModelTrust()) -> None:
        self.registry = registry
        self.refresh_s = refresh_s
        self.trust = trust
        self._aliases: dict[str, str] = {}
        self._read_at = float("-inf")
        self._manifests: dict[str, Manifest] = {}

    def route(self, alias: str) -> tuple[Route, Manifest]:
        target = alias if "@" in alias else self._alias_target(alias)
        if target is None:
            raise ModelNotFound(f"no model or alias named '{alias[:128]}'")
        manifest = self._manifests.get(target)
        if manifest is None:
            manifest = self._verified(target)
            self._manifests[target] = manifest
        route = Route(alias=alias, model_name=manifest.name, model_version=manifest.version,
                      artifact_sha256=manifest.artifact_sha256)
        return route, manifest

    def _verified(self, target: str) -> Manifest:
        mv = self.registry.get(*target.split("@", 1))
        try:
            self.trust.signer(mv.manifest, signatures(mv.path))
        except ModelUnverified as err:
            metrics.count_model_refused("pipeline", mv.manifest.name, err)
            raise
        return mv.manifest

    def known(self, alias: str | None) -> str:
        """The model name ``alias`` routes to, or "unknown": a metrics label, which must
        not take arbitrary values from requests."""
        target = alias if alias and "@" in alias else alias and self._alias_target(alias)
        if not target:
            return "unknown"
        cached = self._manifests.get(target)   # verified; else the registry's word
        try:
            return (cached or self.registry.get(*target.split("@", 1)).manifest).name
        except ModelNotFound:
            return "unknown"

    def _alias_target(self, alias: str) -> str | None:
        now = time.monotonic()
        if now - self._read_at > self.refresh_s:
            self._aliases, self._read_at = self.registry.aliases(), now
        return self._aliases.get(alias)

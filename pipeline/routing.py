"""Route: model alias -> immutable model version, read from the registry with a short cache."""

from __future__ import annotations

import time

from models.manifest import Manifest
from models.registry import Registry
from schemas.errors import ModelNotFound
from schemas.messages import Route


class Router:
    """Resolves aliases through ``aliases.json``; re-reads it every ``refresh_s``."""

    def __init__(self, registry: Registry, refresh_s: float = 2.0) -> None:
        self.registry = registry
        self.refresh_s = refresh_s
        self._aliases: dict[str, str] = {}
        self._read_at = float("-inf")
        self._manifests: dict[str, Manifest] = {}

    def route(self, alias: str) -> tuple[Route, Manifest]:
        target = alias if "@" in alias else self._alias_target(alias)
        if target is None:
            raise ModelNotFound(f"no model or alias named '{alias[:128]}'")
        manifest = self._manifests.get(target)
        if manifest is None:
            manifest = self.registry.get(*target.split("@", 1)).manifest
            self._manifests[target] = manifest
        route = Route(alias=alias, model_name=manifest.name, model_version=manifest.version,
                      artifact_sha256=manifest.artifact_sha256)
        return route, manifest

    def known(self, alias: str | None) -> str:
        """The model name ``alias`` routes to, or "unknown": a metrics label, which must
        not take arbitrary values from requests."""
        try:
            return self.route(alias)[0].model_name if alias else "unknown"
        except ModelNotFound:
            return "unknown"

    def _alias_target(self, alias: str) -> str | None:
        now = time.monotonic()
        if now - self._read_at > self.refresh_s:
            self._aliases, self._read_at = self.registry.aliases(), now
        return self._aliases.get(alias)

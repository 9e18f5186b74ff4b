"""Route: model alias -> immutable model version, read from the registry with a short cache.

With a model store (``KIP_MODEL_STORE``) the manifests come from the pipeline's own
cache, staged in the background (models/staging.py): a version not staged yet ends
``MODEL_UNAVAILABLE`` at once and the pipeline never waits on the store.

A version is routed to only once its manifest verifies (``ModelTrust``: a trusted
signature, where the deployment requires one); a refusal is ``MODEL_UNVERIFIED``,
counted, and asked again next time (a signature may be added meanwhile)."""

from __future__ import annotations

import time

from kip.models.manifest import Manifest
from kip.models.registry import Registry
from kip.models.signing import ModelTrust, signatures
from kip.models.staging import Stager, serving_stager
from kip.models.signing import configured_trust
from kip.runtime.settings import KipSettings
from kip.schemas.releases import Releases
from kip.runtime import metrics
from kip.schemas.errors import ModelNotFound, ModelUnverified
from kip.schemas.messages import Route


class Router:
    """Resolves an alias by its latest release (``releases``, followed from the releases
    topic), else through ``aliases.json``, which it re-reads every ``refresh_s``."""

    def __init__(self, registry: Registry, refresh_s: float = 2.0,
                 trust: ModelTrust = ModelTrust(), releases: Releases | None = None,
                 stager: Stager | None = None) -> None:
        self.registry = registry   # aliases.json; and the versions, where no stager
        self.stager = stager or Stager(registry, trust=trust)
        self.refresh_s = refresh_s
        self.trust = trust
        self.releases = releases or Releases()
        self._aliases: dict[str, str] = {}
        self._read_at = float("-inf")
        self._manifests: dict[str, Manifest] = {}
        self._routes: dict[tuple[str, str, int | None], Route] = {}

    def route(self, alias: str, request_id: str = "", tenant: str = ""
              ) -> tuple[Route, Manifest]:
        """The version a request for ``alias`` goes to (by its id and tenant, where a
        release splits the alias), and that version's manifest."""
        release = self.releases.latest.get(alias)
        chosen = release.choose(request_id, tenant) if release is not None else None
        target = (chosen if isinstance(chosen, str) else chosen.version if chosen else
                  alias if "@" in alias else self._alias_target(alias))
        if target is None:
            raise ModelNotFound(f"no model or alias named '{alias[:128]}'")
        manifest = self._manifests.get(target)
        if manifest is None:
            manifest = self._verified(target)
            self._manifests[target] = manifest
        if chosen is not None and not isinstance(chosen, str) and \
                chosen.artifact_sha256 != manifest.artifact_sha256:
            raise ModelUnverified(f"release {release.revision} of {alias} names artifact "
                                  f"{chosen.artifact_sha256[:12]} for {target}, the registry "
                                  f"holds {manifest.artifact_sha256[:12]}")
        revision = release.revision if release is not None else None
        route = self._routes.get((alias, target, revision))
        if route is None:   # built once per alias, version and revision: it is immutable
            route = self._routes[(alias, target, revision)] = Route(
                alias=alias, model_name=manifest.name, model_version=manifest.version,
                artifact_sha256=manifest.artifact_sha256, revision=revision)
        return route, manifest

    def _verified(self, target: str) -> Manifest:
        mv = self.stager.available(*target.split("@", 1))
        try:
            self.trust.signer(mv.manifest, signatures(mv.path))
        except ModelUnverified as err:
            metrics.count_model_refused("pipeline", mv.manifest.name, err)
            raise
        return mv.manifest

    def known(self, alias: str | None) -> str:
        """The model name ``alias`` routes to, or "unknown": a metrics label, which must
        not take arbitrary values from requests."""
        release = self.releases.latest.get(alias or "")
        if release is not None:
            return release.routes[0].version.partition("@")[0]
        target = alias if alias and "@" in alias else alias and self._alias_target(alias)
        if not target:
            return "unknown"
        cached = self._manifests.get(target)   # verified; else the registry's word
        try:
            return (cached or self.stager.cache.get(*target.split("@", 1)).manifest).name
        except ModelNotFound:
            return "unknown"

    def _alias_target(self, alias: str) -> str | None:
        now = time.monotonic()
        if now - self._read_at > self.refresh_s:
            self._aliases, self._read_at = self.registry.aliases(), now
        return self._aliases.get(alias)

    def released(self) -> set[str]:
        """Every ``name@version`` a latest release routes to: what the cache keeps."""
        return {route.version for release in self.releases.latest.values()
                for route in release.routes}


def serving_router(settings: KipSettings, releases: Releases) -> Router:
    """A pipeline's router: versions from its registry folder, or, with a model store,
    manifests staged from the store into ``$KIP_HOME/manifests`` (never a worker's cache:
    a version there has no model files)."""
    registry, trust = Registry(settings.registry_dir), configured_trust(settings)
    router = Router(registry, trust=trust, releases=releases)
    if settings.model_store:
        router.stager = serving_stager(settings, Registry(settings.home / "manifests"), trust,
                                       files=False, keep=releases.targets)
    return router

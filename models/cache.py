"""A host's staged versions kept within a size bound.

The local registry a host stages into (models/store.py) is a cache of the store: what
it holds can be staged again. ``evict`` removes whole versions, least recently staged
first, until the folder fits ``max_bytes``; a version a release still names (the
routes' targets, passed as ``keep``) is never removed, even where that leaves the cache
over its bound: serving beats the bound.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from kip.models.registry import Registry


@dataclass(frozen=True)
class Staged:
    name: str
    version: str
    path: Path
    size: int
    staged_at: float   # the manifest's mtime: it is written last

    @property
    def target(self) -> str:
        return f"{self.name}@{self.version}"


def staged(registry: Registry) -> list[Staged]:
    """Every whole version under the registry's root, oldest first."""
    found = []
    for manifest in registry.root.glob("*/*/manifest.json"):
        path = manifest.parent
        if path.name.startswith("."):
            continue   # a staging folder, not a version
        size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
        found.append(Staged(path.parent.name, path.name, path, size, manifest.stat().st_mtime))
    return sorted(found, key=lambda s: s.staged_at)


def evict(registry: Registry, keep: set[str], max_bytes: int) -> list[str]:
    """Remove versions not in ``keep``, oldest first, until the rest fit ``max_bytes``;
    return the ``name@version`` of each removed."""
    versions = staged(registry)
    total = sum(s.size for s in versions)
    removed = []
    for s in versions:
        if total <= max_bytes:
            break
        if s.target in keep:
            continue
        shutil.rmtree(s.path, ignore_errors=True)
        total -= s.size
        removed.append(s.target)
    return removed

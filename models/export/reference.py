"""``kip models build-reference``: both reference models, exported and aliased."""

from __future__ import annotations

from models.registry import Registry
from schemas.errors import ModelNotFound


def missing(registry: Registry) -> list[str]:
    """Reference aliases that do not resolve to a loadable version."""
    out = []
    for alias in ("minilm", "digits"):
        try:
            registry.load(*registry.aliases()[alias].split("@"))
        except (KeyError, ModelNotFound):
            out.append(alias)
    return out


def build_reference(registry: Registry, log=print, force: bool = False) -> None:
    from models.export import digits, minilm

    todo = ["minilm", "digits"] if force else missing(registry)
    for alias in todo:
        log(f"building reference model '{alias}' (torch export, checked by ONNX Runtime)...")
        module = minilm if alias == "minilm" else digits
        mv = module.export(registry, log)
        registry.set_alias(alias, f"{mv.manifest.name}@{mv.manifest.version}")
        log(f"  {alias} -> {mv.manifest.name}@{mv.manifest.version} in {mv.path}")
    if not todo:
        log(f"reference models already in {registry.root}")

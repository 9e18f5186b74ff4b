"""``kip models build-reference``: both reference models, exported and aliased."""

from __future__ import annotations

from kip.models.registry import Registry
from kip.schemas.errors import ModelNotFound, ModelUnverified


def missing(registry: Registry, aliases: list[str] = ("minilm", "digits")) -> list[str]:
    """Reference aliases that do not resolve to a loadable version."""
    out = []
    for alias in aliases:
        try:
            registry.load_alias(alias)
        except (KeyError, ModelNotFound, ModelUnverified):
            out.append(alias)
    return out


def build_reference(registry: Registry, log=print, force: bool = False,
                    fp16: bool = False) -> None:
    """The reference models that are missing (all with ``force``); with ``fp16`` also
    MiniLM's fp16 variant, ``minilm-fp16``, for GPUs."""
    from kip.models.export import digits, minilm

    exporters = {"minilm": minilm.export, "digits": digits.export}
    if fp16:
        exporters[minilm.FP16_NAME] = minilm.export_fp16
    todo = list(exporters) if force else missing(registry, list(exporters))
    for alias in todo:
        log(f"building reference model '{alias}' (torch export, checked by ONNX Runtime)...")
        mv = exporters[alias](registry, log)
        registry.set_alias(alias, f"{mv.manifest.name}@{mv.manifest.version}")
        log(f"  {alias} -> {mv.manifest.name}@{mv.manifest.version} in {mv.path}")
    if not todo:
        log(f"reference models already in {registry.root}")

"""``kip models build-reference --fp16``: MiniLM in fp16, checked against torch, served
by a worker's session like the fp32 one."""

from __future__ import annotations

import numpy as np

from kip.models.export import minilm
from kip.models.registry import Registry
from kip.schemas.tensors import Tensor
from kip.workers.session import ModelSession


def test_the_fp16_minilm_is_exported_checked_and_served(tmp_path, registry):
    published = minilm.export_fp16(Registry(tmp_path / "registry"), log=lambda *_: None)
    fp16 = Registry(tmp_path / "registry").load(published.manifest.name,
                                                published.manifest.version)
    fp32 = registry.load_alias("minilm")
    assert len(fp16.artifact) < 0.6 * len(fp32.artifact)
    texts = [Tensor.text("text", ["A man is eating food.", "kip serves it."])]
    [[a]], [[b]] = ModelSession(fp32, "cpu").run([texts]), ModelSession(fp16, "cpu").run([texts])
    cosine = (a.array * b.array).sum(1) / (np.linalg.norm(a.array, axis=1)
                                           * np.linalg.norm(b.array, axis=1))
    assert b.datatype == "FP32" and b.shape == [2, 384] and cosine.min() >= 0.999


def test_build_reference_adds_the_fp16_variant_only_when_asked(registry):
    from kip.models.export.reference import missing
    assert "minilm-fp16" not in missing(registry)   # not asked for: not a reference
    assert missing(registry, ["minilm-fp16"]) == ["minilm-fp16"]

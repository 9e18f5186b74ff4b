"""A host's staged versions within a size bound: the oldest unnamed go first; what a
release names stays, whatever the bound."""

from __future__ import annotations

import os

from kip.models.cache import evict, staged
from kip.models.registry import Registry


def _version(root, name: str, version: str, size: int, age_s: float) -> None:
    path = root / name / version
    path.mkdir(parents=True)
    (path / "model.onnx").write_bytes(bytes(size))
    (path / "manifest.json").write_text("{}")
    then = 1_700_000_000 - age_s
    os.utime(path / "manifest.json", (then, then))


def test_the_oldest_versions_no_release_names_are_evicted_until_the_rest_fit(tmp_path):
    _version(tmp_path, "digits", "aaaa", 1000, age_s=300)
    _version(tmp_path, "digits", "bbbb", 1000, age_s=200)
    _version(tmp_path, "minilm", "cccc", 1000, age_s=100)
    (tmp_path / "minilm" / ".dddd.staging").mkdir()   # half-staged: not a version
    registry = Registry(tmp_path)
    assert [s.target for s in staged(registry)] == ["digits@aaaa", "digits@bbbb",
                                                     "minilm@cccc"]
    removed = evict(registry, keep={"digits@aaaa"}, max_bytes=2100)
    assert removed == ["digits@bbbb"]
    assert [s.target for s in staged(registry)] == ["digits@aaaa", "minilm@cccc"]


def test_what_a_release_names_stays_even_over_the_bound(tmp_path):
    _version(tmp_path, "digits", "aaaa", 1000, age_s=300)
    _version(tmp_path, "minilm", "cccc", 1000, age_s=100)
    registry = Registry(tmp_path)
    assert evict(registry, keep={"digits@aaaa", "minilm@cccc"}, max_bytes=10) == []
    assert len(staged(registry)) == 2
    assert evict(registry, keep=set(), max_bytes=10_000) == []

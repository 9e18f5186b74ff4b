"""Staging in the background (models/staging.py) against a real S3-compatible server: a
version the cache lacks is MODEL_UNAVAILABLE at once while it stages, then served; with
the server stopped, cached versions stay and an uncached one fails at once with the
store's reason; a pipeline's stage holds manifests only; the cache keeps its bound."""

from __future__ import annotations

import time

import pytest

from kip.devkit.s3_server import S3Server, S3Unavailable
from kip.models.cache import staged
from kip.models.registry import Registry
from kip.models.staging import Stager
from kip.models.store import ModelStore, serving_options
from kip.pipeline.routing import Router
from kip.schemas.errors import ModelUnavailable
from tests.models.test_store import TRUST

pytest.importorskip("s3fs")
AT_ONCE_S = 0.2


def _variants(registry, tmp_path, count: int):
    """``count`` signed digits versions of their own (a different doc string each)."""
    import onnx
    from kip.models.signing import sign
    from tests.models.test_store import KEY

    digits = registry.resolve("digits")
    out, release = [], Registry(tmp_path / "release")
    for n in range(count):
        graph = onnx.load(str(digits.artifact))
        graph.doc_string = f"variant {n}"
        path = tmp_path / f"v{n}.onnx"
        onnx.save(graph, str(path))
        mv = release.publish(path, digits.manifest.model_dump(
            exclude={"version", "artifact_sha256", "files_sha256"}), {})
        sign(mv.path, mv.manifest, KEY, "release", 1)
        out.append(mv)
    return out


def _available_at_once(stager: Stager, name: str, version: str):
    started = time.monotonic()
    try:
        return stager.available(name, version)
    finally:
        assert time.monotonic() - started < AT_ONCE_S


def test_an_uncached_version_is_unavailable_at_once_then_served_and_survives_the_store(
        registry, tmp_path, prefix):
    try:
        server = S3Server(tmp_path / "data").start()
    except S3Unavailable as err:
        pytest.skip(str(err))
    first, second = _variants(registry, tmp_path, 2)
    url = f"s3://models/{prefix}"
    store = ModelStore(url, server.storage_options() | serving_options(url, 1.0))
    store.push(first)
    stager = Stager(Registry(tmp_path / "cache"), store, TRUST)
    m = first.manifest
    try:
        with pytest.raises(ModelUnavailable, match="being staged"):
            _available_at_once(stager, m.name, m.version)
        stager.pending[f"{m.name}@{m.version}"].result(timeout=30)
        assert _available_at_once(stager, m.name, m.version).manifest == m
        server.stop()
        assert _available_at_once(stager, m.name, m.version).manifest == m   # cached
        n = second.manifest
        with pytest.raises(ModelUnavailable, match="being staged"):
            _available_at_once(stager, n.name, n.version)
        with pytest.raises(ModelUnavailable, match="cannot be read"):
            stager.pending[f"{n.name}@{n.version}"].result(timeout=10)
        with pytest.raises(ModelUnavailable, match="cannot be read"):   # the reason, at once
            _available_at_once(stager, n.name, n.version)
    finally:
        server.stop()
        stager.close()


def test_a_pipeline_stages_manifests_only_and_routes_once_staged(s3, registry, tmp_path,
                                                                  prefix):
    (version,) = _variants(registry, tmp_path, 1)
    store = ModelStore(f"s3://models/{prefix}", s3.storage_options())
    store.push(version)
    cache = Registry(tmp_path / "manifests")
    router = Router(Registry(tmp_path / "empty"), trust=TRUST,
                    stager=Stager(cache, store, TRUST, files=False))
    target = f"{version.manifest.name}@{version.manifest.version}"
    try:
        with pytest.raises(ModelUnavailable, match="being staged"):
            router.route(target)
        router.stager.pending[target].result(timeout=30)
        route, manifest = router.route(target)
        assert manifest == version.manifest and route.model_version == manifest.version
        assert not (cache.root / manifest.name / manifest.version / "model.onnx").exists()
    finally:
        router.stager.close()


def test_the_cache_keeps_its_bound_and_what_releases_name(s3, registry, tmp_path, prefix):
    versions = _variants(registry, tmp_path, 3)
    store = ModelStore(f"s3://models/{prefix}", s3.storage_options())
    for mv in versions:
        store.push(mv)
    size = sum(f.stat().st_size for f in versions[0].path.rglob("*") if f.is_file())
    named = f"{versions[0].manifest.name}@{versions[0].manifest.version}"
    stager = Stager(Registry(tmp_path / "cache"), store, TRUST, max_bytes=2 * size + size // 2,
                    keep=lambda: {named})
    try:
        for mv in versions:
            stager.stage(mv.manifest.name, mv.manifest.version).result(timeout=30)
            time.sleep(0.02)   # staged_at is the manifest's mtime
        kept = {s.target for s in staged(stager.cache)}
        last = f"{versions[2].manifest.name}@{versions[2].manifest.version}"
        assert kept == {named, last}   # the middle one, named by no release, went
    finally:
        stager.close()

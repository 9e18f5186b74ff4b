"""Releases: weights split an alias's requests by a stable hash of the request id, pins
win, the latest revision counts, and the router names the revision in every route."""

from __future__ import annotations

from collections import Counter

import orjson
import pytest
from pydantic import ValidationError

from kip.schemas.releases import Release, Releases, WeightedVersion
from kip.pipeline.routing import Router
from kip.schemas.errors import ModelUnverified
from tests.pipeline.conftest import DIGITS_MANIFEST


def _release(revision: int, routes: list[tuple[str, float, str]], **kw) -> Release:
    return Release(alias="digits", revision=revision, action="start", by="t", at_ms=1,
                   routes=[WeightedVersion(version=v, weight=w, artifact_sha256=d)
                           for v, w, d in routes], **kw)


@pytest.fixture
def two_versions(small_registry, tmp_path):
    stable = small_registry.resolve("digits").manifest
    artifact = tmp_path / "canary.onnx"
    artifact.write_bytes(b"the canary")
    canary = small_registry.publish(artifact, DIGITS_MANIFEST, {}).manifest
    return small_registry, stable, canary


def _routes(stable, canary, canary_weight: float):
    return [(f"digits@{stable.version}", 100 - canary_weight, stable.artifact_sha256),
            (f"digits@{canary.version}", canary_weight, canary.artifact_sha256)]


def test_a_split_is_by_request_id_reproducible_and_near_its_weights(two_versions):
    registry, stable, canary = two_versions
    releases = Releases()
    releases.apply(b"digits", _release(3, _routes(stable, canary, 10)).model_dump_json().encode())
    router = Router(registry, releases=releases)
    served = Counter(router.route("digits", f"r-{i}", "acme")[0].model_version
                     for i in range(10_000))
    assert 850 <= served[canary.version] <= 1150
    route, _ = router.route("digits", "r-7", "acme")
    assert route.revision == 3 and router.route("digits", "r-7", "bob")[0] == route


def test_pins_win_and_the_latest_revision_counts(two_versions):
    registry, stable, canary = two_versions
    releases = Releases()
    pinned = _release(2, _routes(stable, canary, 50), pins={"acme": f"digits@{canary.version}"})
    releases.apply(b"digits", pinned.model_dump_json().encode())
    releases.apply(b"digits", _release(1, _routes(stable, canary, 0)).model_dump_json().encode())
    router = Router(registry, releases=releases)
    assert {router.route("digits", f"r-{i}", "acme")[0].model_version
            for i in range(50)} == {canary.version}
    assert releases.latest["digits"].revision == 2


def test_a_release_naming_another_digest_is_refused(two_versions):
    registry, stable, canary = two_versions
    releases = Releases()
    wrong = [(f"digits@{stable.version}", 100, canary.artifact_sha256)]
    releases.apply(b"digits", _release(1, wrong).model_dump_json().encode())
    with pytest.raises(ModelUnverified, match="release 1 of digits names artifact"):
        Router(registry, releases=releases).route("digits", "r-1", "acme")


def test_weights_must_add_up_and_versions_be_versions():
    with pytest.raises(ValidationError, match="add up to 100"):
        _release(1, [("digits@ab", 90, "a" * 64)])
    with pytest.raises(ValidationError):
        _release(1, [("../etc", 100, "a" * 64)])
    assert orjson.loads(_release(1, [("digits@ab", 100, "a" * 64)]).model_dump_json())

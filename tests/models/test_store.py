"""The model store on a real S3-compatible server (versitygw, devkit/s3_server.py) and over
plain HTTP: a signed version pushed, then staged into an empty cache and checked; an
object altered in the store refused with nothing of it staged; a stopped store answering
MODEL_UNAVAILABLE at once while what is cached still serves."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from kip.devkit.broker import free_port
from kip.models.registry import Registry
from kip.models.signing import ModelTrust, sign
from kip.devkit.s3_server import S3Server, S3Unavailable
from kip.models.store import ModelStore, serving_options
from kip.schemas.errors import ModelNotFound, ModelUnavailable, ModelUnverified
from kip.schemas.result_signatures import ResultKeys, ResultSigningKey

pytest.importorskip("s3fs")
KEY = ResultSigningKey.generate("m1")
TRUST = ModelTrust(ResultKeys(keys={"m1": KEY.public()}).verifier(), required=True)


@pytest.fixture
def unsigned(tmp_path, registry):
    """The reference digits version in a registry of its own (other tests sign the
    session's)."""
    digits = registry.resolve("digits")
    return Registry(tmp_path / "release").publish(digits.artifact, digits.manifest.model_dump(
        exclude={"version", "artifact_sha256", "files_sha256"}), {})


@pytest.fixture
def signed(unsigned):
    sign(unsigned.path, unsigned.manifest, KEY, "release", 1)
    return unsigned


def _store(s3, prefix: str) -> ModelStore:
    return ModelStore(f"s3://models/{prefix}", s3.storage_options())


def test_a_pushed_version_stages_into_an_empty_cache_checked(s3, signed, tmp_path, prefix):
    store = _store(s3, prefix)
    name, version = signed.manifest.name, signed.manifest.version
    assert store.push(signed) and not store.push(signed)   # the second finds it there
    assert store.versions() == [f"{name}@{version}"]
    cache = Registry(tmp_path / "cache")
    staged = store.stage(name, version, cache, TRUST)
    loaded = cache.load(name, version, TRUST)
    assert staged.path == cache.root / name / version
    assert loaded.artifact == signed.artifact.read_bytes()
    assert loaded.signature.key_id == "m1"


def test_an_object_altered_in_the_store_is_refused_and_nothing_is_staged(
        s3, signed, tmp_path, prefix):
    store = _store(s3, prefix)
    store.push(signed)
    m = signed.manifest
    path = f"models/{prefix}/{m.name}/{m.version}/model.onnx"
    data = bytearray(signed.artifact.read_bytes())
    data[len(data) // 2] ^= 0xFF
    store.fs.pipe_file(path, bytes(data))   # as one with write access to the bucket would
    cache = Registry(tmp_path / "cache")
    with pytest.raises(ModelUnverified, match="does not match its manifest") as refused:
        store.stage(m.name, m.version, cache, TRUST)
    assert refused.value.reason == "digest"
    assert not (cache.root / m.name).exists() or not any((cache.root / m.name).iterdir())


def test_an_object_changed_on_the_servers_disk_is_refused(s3, signed, tmp_path, prefix):
    store = _store(s3, prefix)
    store.push(signed)
    m = signed.manifest
    stored = s3.data_dir / "models" / prefix / m.name / m.version / "model.onnx"
    data = bytearray(stored.read_bytes())
    data[len(data) // 2] ^= 0xFF
    stored.write_bytes(bytes(data))
    with pytest.raises(ModelUnverified):
        store.stage(m.name, m.version, Registry(tmp_path / "cache"), TRUST)


def test_an_unsigned_version_is_refused_before_its_model_is_fetched(
        s3, unsigned, tmp_path, prefix):
    store = _store(s3, prefix)
    store.push(unsigned)
    with pytest.raises(ModelUnverified, match="not signed"):
        store.stage(unsigned.manifest.name, unsigned.manifest.version,
                    Registry(tmp_path / "cache"), TRUST)


def test_a_stopped_store_is_unavailable_at_once_and_the_cache_still_serves(
        tmp_path, signed, prefix):
    try:
        server = S3Server(tmp_path / "data").start()
    except S3Unavailable as err:
        pytest.skip(str(err))
    store = ModelStore(f"s3://models/{prefix}", server.storage_options()
                       | serving_options("s3://", 1.0))
    m = signed.manifest
    store.push(signed)
    cache = Registry(tmp_path / "cache")
    store.stage(m.name, m.version, cache, TRUST)
    server.stop()
    assert store.stage(m.name, m.version, cache, TRUST).path.exists()   # from the cache
    started = time.monotonic()
    with pytest.raises(ModelUnavailable, match="cannot be read"):
        store.stage(m.name, "0123456789abcdef", cache, TRUST)
    assert time.monotonic() - started < 5


def test_a_version_not_in_the_store_is_not_found(s3, tmp_path, prefix):
    with pytest.raises(ModelNotFound, match="not in the store"):
        _store(s3, prefix).stage("digits", "0123456789abcdef", Registry(tmp_path / "c"))
    with pytest.raises(ModelNotFound, match="no model version named"):
        _store(s3, prefix).stage("../etc", "0123", Registry(tmp_path / "c"))


def test_a_version_stages_over_plain_http(signed, tmp_path):
    ModelStore(f"file://{tmp_path / 'served'}").push(signed)
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind",
                               "127.0.0.1", "--directory", str(tmp_path / "served")],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        store = ModelStore(f"http://127.0.0.1:{port}")
        m = signed.manifest
        for _ in range(50):   # until it listens
            try:
                staged = store.stage(m.name, m.version, Registry(tmp_path / "cache"), TRUST)
                break
            except ModelUnavailable:
                time.sleep(0.1)
        assert staged.manifest == m
        assert (staged.path / "model.onnx").read_bytes() == signed.artifact.read_bytes()
    finally:
        server.terminate()
        server.wait()


def test_kip_models_push_list_and_pull_through_the_s3_server(s3, signed, tmp_path, prefix):
    """The operator's commands, with the endpoint and keys where every S3 client reads
    them: push from a release registry, list the store, pull into an empty host's."""
    options = s3.storage_options()
    env = os.environ | {"KIP_MODEL_STORE": f"s3://models/{prefix}",
                        "AWS_ENDPOINT_URL": s3.endpoint, "AWS_ACCESS_KEY_ID": options["key"],
                        "AWS_SECRET_ACCESS_KEY": options["secret"],
                        "AWS_DEFAULT_REGION": "us-east-1",
                        "KIP_HOME": str(tmp_path / "home")}
    target = f"{signed.manifest.name}@{signed.manifest.version}"

    def kip(registry, *args):
        done = subprocess.run([sys.executable, "-m", "kip.cli", "models", *args],
                              env=env | {"KIP_REGISTRY_DIR": str(registry)},
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert f"pushed  {target}" in kip(signed.path.parents[1], "push", target)
    assert kip(tmp_path / "empty", "list", "--store").split() == [target]
    assert "staged" in kip(tmp_path / "empty", "pull", target)
    staged = Registry(tmp_path / "empty").load(*target.split("@"))
    assert staged.artifact == signed.artifact.read_bytes()


def test_a_store_manifest_naming_a_path_outside_its_version_is_refused(unsigned, tmp_path):
    """Unsigned versions may run where signatures are not required: the store's manifest
    is then all that names the files, and a name must not be a way out of the cache."""
    store = ModelStore(f"file://{tmp_path / 'store'}")
    store.push(unsigned)
    m = unsigned.manifest
    evil = m.model_copy(update={"files_sha256": {"../../escape": "0" * 64}})
    (tmp_path / "store" / m.name / m.version / "manifest.json").write_text(
        evil.model_dump_json())
    cache = Registry(tmp_path / "cache")
    with pytest.raises(ModelUnverified, match="cannot be one of a version's"):
        store.stage(m.name, m.version, cache)
    assert not (tmp_path / "escape").exists() and not (cache.root / "escape").exists()
    assert not (cache.root / m.name / m.version).exists()

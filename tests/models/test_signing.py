"""Signed model versions, as an attacker with write access to the registry folder would try
them: a flipped byte, a swapped model file, a manifest changed to match the swapped file,
a signature by a key the deployment does not trust, no signature. Each is refused where
the issue says: the pipeline's router (what the manifest claims) or the worker's load
(the bytes that would run); a true version passes both and runs."""

from __future__ import annotations

import hashlib
import json
import shutil

import numpy as np
import pytest

from kip.models.registry import Registry
from kip.models.signing import SIGNATURES, ModelTrust, sign
from kip.pipeline.routing import Router
from kip.schemas.errors import ModelUnverified
from kip.schemas.result_signatures import ResultKeys, ResultSigningKey
from kip.schemas.tensors import Tensor
from kip.workers.session import ModelSession

KEY = ResultSigningKey.generate("m1")
TRUST = ModelTrust(ResultKeys(keys={"m1": KEY.public()}).verifier(), required=True)


@pytest.fixture
def signed(tmp_path, registry):
    """The reference digits version, signed, in a registry of its own; and minilm's
    artifact, the file an attacker swaps in."""
    own = Registry(tmp_path / "registry")
    digits = registry.resolve("digits")
    mv = own.publish(digits.artifact, digits.manifest.model_dump(
        exclude={"version", "artifact_sha256", "files_sha256"}), {})
    own.set_alias("digits", f"digits@{mv.manifest.version}")
    sign(mv.path, mv.manifest, KEY, "release", 1)
    return own, mv, registry.resolve("minilm").artifact


def _flip_a_byte(mv, other) -> None:
    data = bytearray(mv.artifact.read_bytes())
    data[len(data) // 2] ^= 0x01
    mv.artifact.write_bytes(bytes(data))


def _swap_the_file(mv, other) -> None:
    shutil.copyfile(other, mv.artifact)


def _swap_and_fix_the_manifest(mv, other) -> None:
    _swap_the_file(mv, other)
    path = mv.path / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["artifact_sha256"] = hashlib.sha256(other.read_bytes()).hexdigest()
    path.write_text(json.dumps(manifest))


def _sign_with_another_key(mv, other) -> None:
    shutil.rmtree(mv.path / SIGNATURES)
    sign(mv.path, mv.manifest, ResultSigningKey.generate("m1"), "someone else", 1)


def _remove_the_signature(mv, other) -> None:
    shutil.rmtree(mv.path / SIGNATURES)


def test_a_signed_version_is_routed_loaded_and_run(signed):
    own, mv, _ = signed
    route, _ = Router(own, trust=TRUST).route("digits")
    loaded = own.load("digits", mv.manifest.version, TRUST)
    assert loaded.signature.key_id == "m1" and loaded.artifact_sha256 == route.artifact_sha256
    session = ModelSession(loaded, device="cpu")
    [outputs] = session.run([[Tensor.from_array("pixels", np.zeros((1, 64), np.float32))]])
    assert outputs and session.artifact_sha256 == route.artifact_sha256


@pytest.mark.parametrize("tamper, refused_by_router", [
    (_flip_a_byte, False), (_swap_the_file, False), (_swap_and_fix_the_manifest, True),
    (_sign_with_another_key, True), (_remove_the_signature, True)])
def test_each_tampering_is_refused_before_anything_runs(signed, tamper, refused_by_router):
    own, mv, other = signed
    tamper(mv, other)
    router = Router(own, trust=TRUST)
    if refused_by_router:
        with pytest.raises(ModelUnverified):
            router.route("digits")
    else:   # the manifest is the signed one: only the bytes tell, and the worker reads them
        router.route("digits")
    with pytest.raises(ModelUnverified) as refused:
        own.load("digits", mv.manifest.version, TRUST)
    assert refused.value.reason in ("digest", "unsigned", "untrusted")


def test_unsigned_versions_run_where_signatures_are_not_required(signed):
    own, mv, _ = signed
    _remove_the_signature(mv, None)
    assert own.load("digits", mv.manifest.version, ModelTrust()).signature is None
    with pytest.raises(ModelUnverified, match="kip models sign digits@"):
        own.load("digits", mv.manifest.version, TRUST)


def test_the_commands_sign_verify_and_list(signed, tmp_path, monkeypatch, capsys):
    from kip.cli import main

    own, mv, _ = signed
    _remove_the_signature(mv, None)
    monkeypatch.setenv("KIP_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("KIP_REGISTRY_DIR", str(own.root))
    monkeypatch.setenv("KIP_REQUIRE_SIGNED_MODELS", "true")
    assert main(["keys", "init"]) == 0
    assert main(["models", "verify"]) == 1
    assert "REFUSED MODEL_UNVERIFIED" in capsys.readouterr().err
    assert main(["models", "sign", "digits"]) == 0
    assert main(["models", "verify", "digits"]) == 0
    assert "ok, files match, signed by m1" in capsys.readouterr().out
    assert main(["models", "list"]) == 0
    assert "signed by: m1 (" in capsys.readouterr().out


@pytest.mark.parametrize("require", [None, "false"])
def test_verify_exits_1_on_a_tampered_version_whatever_the_serving_setting(
        signed, tmp_path, monkeypatch, capsys, require):
    """``kip models verify`` answers whether a version verifies against the trusted keys,
    not whether this deployment would serve it unsigned."""
    from kip.cli import main

    own, mv, _ = signed
    monkeypatch.setenv("KIP_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("KIP_REGISTRY_DIR", str(own.root))
    monkeypatch.delenv("KIP_REQUIRE_SIGNED_MODELS", raising=False)
    if require is not None:
        monkeypatch.setenv("KIP_REQUIRE_SIGNED_MODELS", require)
    assert main(["models", "verify", "digits"]) == 1   # no trusted keys yet
    assert "no trusted model keys" in capsys.readouterr().err
    assert main(["keys", "init"]) == 0
    assert main(["models", "sign", "digits"]) == 0
    assert main(["models", "verify", "digits"]) == 0
    capsys.readouterr()
    _tamper_the_manifest(mv)
    assert main(["models", "verify", "digits"]) == 1
    assert "REFUSED MODEL_UNVERIFIED" in capsys.readouterr().err
    _remove_the_signature(mv, None)
    assert main(["models", "verify", "digits"]) == 1
    assert "is not signed" in capsys.readouterr().err


def _tamper_the_manifest(mv) -> None:
    path = mv.path / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["description"] = "changed after signing"
    path.write_text(json.dumps(manifest))

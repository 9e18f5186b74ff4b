"""Signed model versions: who released a version, checked before it is routed or loaded.

A version's manifest names the sha256 of every file of the version (``artifact_sha256``
for model.onnx, ``files_sha256`` for the rest), so one signature over the manifest
covers them all. A signature is Ed25519 over

    b"kip-model-v1\\n" + the manifest as canonical JSON (sorted keys, no spaces)

and lives beside the manifest, one file per signer (a release may carry several):

    <root>/<name>/<version>/signatures/<key id>-<16 hex of the public key>.json
        {"key_id": ..., "signature": "<128 hex>", "signed_by": ..., "signed_at_ms": ...}

``ModelTrust`` holds the public keys a deployment trusts (``KIP_MODEL_PUBLIC_KEYS_FILE``)
and whether a signature is required (``KIP_REQUIRE_SIGNED_MODELS``). The pipeline checks
a version's manifest before it routes to it; a worker checks it again when it loads the
version, against the bytes it actually loads (models/registry.py ``Registry.load``).

Why not the OpenSSF model-signing format (PyPI ``model-signing``): its signatures are
Sigstore bundles, and verifying them brings the Sigstore client and its dependencies
into every pipeline and worker; kip already holds Ed25519 keys and a manifest that lists
every file's digest, which is what such a bundle signs. docs/architecture.md says more.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import orjson
from pydantic import BaseModel, ConfigDict, Field

from kip.models.manifest import Manifest
from kip.runtime import keys
from kip.runtime.settings import KipSettings
from kip.schemas.errors import ModelUnverified
from kip.schemas.messages import ID_PATTERN
from kip.schemas.result_signatures import ResultSigningKey, ResultVerifier

SCHEME = b"kip-model-v1\n"
SIGNATURES = "signatures"


class ModelSignature(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    key_id: str = Field(pattern=ID_PATTERN)
    signature: str = Field(pattern=r"^[0-9a-f]{128}$")
    signed_by: str = Field(max_length=200)
    signed_at_ms: int


def signed_bytes(manifest: Manifest) -> bytes:
    return SCHEME + orjson.dumps(manifest.model_dump(mode="json"), option=orjson.OPT_SORT_KEYS)


def sign(version_dir: Path, manifest: Manifest, key: ResultSigningKey, signed_by: str,
         now_ms: int) -> Path:
    """Write ``key``'s signature of ``manifest`` into ``version_dir``; returns its path."""
    signer = key.signer()
    signature = signer.signature(signed_bytes(manifest)).rpartition(":")[2]
    record = ModelSignature(key_id=key.key_id, signature=signature, signed_by=signed_by,
                            signed_at_ms=now_ms)
    path = version_dir / SIGNATURES / f"{key.key_id}-{signer.public_hex[:16]}.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(record.model_dump_json(indent=2))
    return path


def signatures(version_dir: Path) -> list[ModelSignature]:
    """The version's signatures; a file that is not one is skipped (it verifies nothing)."""
    found = []
    for path in sorted((version_dir / SIGNATURES).glob("*.json")):
        try:
            found.append(ModelSignature.model_validate_json(path.read_bytes()))
        except ValueError:
            continue
    return found


def configured_trust(settings: KipSettings) -> ModelTrust:
    """Whose model signatures count, and whether one is required
    (``KIP_REQUIRE_SIGNED_MODELS``). Required: the public keys file must exist (a clear
    error otherwise); not required: a missing file trusts no one, and unsigned versions
    run."""
    path = settings.model_public_keys_file
    if not settings.require_signed_models and not path.exists():
        return ModelTrust()
    return ModelTrust(keys.model_keys(path).verifier(), settings.require_signed_models)


def verifying_trust(settings: KipSettings) -> ModelTrust:
    """What ``kip models verify`` checks against: the trusted keys, and a signature
    required whatever the serving setting, as it answers whether a version verifies, not
    whether this deployment would run it. A missing keys file raises ``ValueError``."""
    return ModelTrust(keys.model_keys(settings.model_public_keys_file).verifier(), True)


@dataclass(frozen=True)
class ModelTrust:
    """The model keys a deployment trusts, and whether it runs only what they signed."""

    verifier: ResultVerifier | None = None
    required: bool = False

    def signer(self, manifest: Manifest, found: list[ModelSignature]) -> ModelSignature | None:
        """The trusted signature of ``manifest``; None where none is and none is needed.
        Raises ``ModelUnverified`` when one is needed and none verifies."""
        message = signed_bytes(manifest)
        for s in found:
            if self.verifier is not None and self.verifier.verified(
                    f"ed25519:{s.key_id}:{s.signature}", message):
                return s
        if not self.required:
            return None
        what = f"{manifest.name}@{manifest.version}"
        if not found:
            raise ModelUnverified(f"{what} is not signed, and this deployment runs only "
                                  "signed models: sign it with `kip models sign "
                                  f"{what}`", reason="unsigned")
        raise ModelUnverified(f"{what}: no signature verifies with a trusted model key "
                              f"(signed by key {', '.join(s.key_id for s in found)}; the "
                              "manifest was changed after signing, or the key is not "
                              "trusted here)", reason="untrusted")

"""The model registry: immutable versions on disk, identified by their artifact digest.

Layout (a local folder; a mounted volume in deployment)::

    <root>/aliases.json                    {"minilm": "minilm@3f2a...", ...}
    <root>/<name>/<version>/model.onnx     the artifact; version = sha256[:16]
    <root>/<name>/<version>/manifest.json  a ``Manifest``
    <root>/<name>/<version>/<files>        extra files the preprocessing needs
    <root>/<name>/<version>/signatures/    who signed the manifest (models/signing.py)

A version is never rewritten: ``publish`` refuses to overwrite a different artifact.
``load`` reads every file once, into memory, and refuses a version whose bytes do not
match its manifest or whose manifest no trusted key signed (where signatures are
required): a worker runs the bytes that were checked, never a file read again later.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from kip.models.manifest import Manifest
from kip.models.signing import ModelSignature, ModelTrust, signatures
from kip.schemas.errors import ModelNotFound, ModelUnverified

VERSION_CHARS = 16


@dataclass(frozen=True)
class ModelVersion:
    manifest: Manifest
    path: Path

    @property
    def artifact(self) -> Path:
        return self.path / "model.onnx"

    def file(self, name: str) -> Path:
        return self.path / name


@dataclass(frozen=True)
class LoadedVersion:
    """A version's bytes as read and checked: what a worker runs."""

    version: ModelVersion
    artifact: bytes
    files: dict[str, bytes]
    artifact_sha256: str                 # of ``artifact``, computed here
    signature: ModelSignature | None     # the trusted one, where there is one

    @property
    def manifest(self) -> Manifest:
        return self.version.manifest


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._\-]{0,127}$")
_VERSION = re.compile(r"^[0-9a-f]{1,64}$")


def valid_version_name(name: str, version: str) -> bool:
    """Whether ``name@version`` can be a model version's: they come from requests and
    headers, and paths are built from them only after this holds."""
    return bool(_NAME.match(name) and _VERSION.match(version)) and ".." not in name


class Registry:
    """Reads and writes model versions under one root folder."""

    def __init__(self, root: str | os.PathLike) -> None:
        self.root = Path(root)

    def aliases(self) -> dict[str, str]:
        path = self.root / "aliases.json"
        return json.loads(path.read_text()) if path.exists() else {}

    def set_alias(self, alias: str, target: str) -> None:
        aliases = self.aliases() | {alias: target}
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = self.root / "aliases.json.tmp"
        tmp.write_text(json.dumps(aliases, indent=2, sort_keys=True))
        tmp.replace(self.root / "aliases.json")

    def resolve(self, alias: str) -> ModelVersion:
        """``name@version`` pins a version; anything else is looked up in aliases.json."""
        target = alias if "@" in alias else self.aliases().get(alias)
        if target is None:
            raise ModelNotFound(f"no model or alias named '{alias}'")
        name, _, version = target.partition("@")
        return self.get(name, version)

    def get(self, name: str, version: str) -> ModelVersion:
        """The version's manifest; names that cannot be a model's are refused before any
        path is built from them (they come from requests and headers)."""
        if not valid_version_name(name, version):
            raise ModelNotFound(f"no model version named '{name[:64]}@{version[:64]}'")
        path = self.root / name / version
        manifest_path = path / "manifest.json"
        if not manifest_path.exists():
            raise ModelNotFound(f"model {name}@{version} is not in the registry")
        return ModelVersion(Manifest.model_validate_json(manifest_path.read_bytes()), path)

    def load_alias(self, alias: str, trust: ModelTrust = ModelTrust()) -> LoadedVersion:
        """``load`` of the version ``alias`` points to."""
        m = self.resolve(alias).manifest
        return self.load(m.name, m.version, trust)

    def load(self, name: str, version: str, trust: ModelTrust = ModelTrust()
             ) -> LoadedVersion:
        """The version's files, read once and checked against its manifest, and the
        manifest checked against ``trust``; ``ModelUnverified`` for what does not hold."""
        mv = self.get(name, version)
        artifact = mv.artifact.read_bytes()
        digest = hashlib.sha256(artifact).hexdigest()
        if digest != mv.manifest.artifact_sha256:
            raise ModelUnverified(f"{name}@{version}: model.onnx digest {digest[:12]} does "
                                  "not match the manifest; refusing to load it")
        files = {fname: mv.file(fname).read_bytes() for fname in mv.manifest.files_sha256}
        for fname, digest_wanted in mv.manifest.files_sha256.items():
            if hashlib.sha256(files[fname]).hexdigest() != digest_wanted:
                raise ModelUnverified(f"{name}@{version}: {fname} does not match its digest")
        signer = trust.signer(mv.manifest, signatures(mv.path))
        return LoadedVersion(mv, artifact, files, digest, signer)

    def publish(self, artifact: Path, manifest: dict, files: dict[str, Path]) -> ModelVersion:
        """Copy ``artifact`` and ``files`` in as a new immutable version."""
        digest = sha256_file(artifact)
        version = digest[:VERSION_CHARS]
        name = manifest["name"]
        dest = self.root / name / version
        if (dest / "manifest.json").exists():
            return self.load(name, version).version
        staging = self.root / name / f".{version}.staging"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        shutil.copyfile(artifact, staging / "model.onnx")
        for fname, src in files.items():
            shutil.copyfile(src, staging / fname)
        full = Manifest(**manifest, version=version, artifact_sha256=digest,
                        files_sha256={f: sha256_file(staging / f) for f in files})
        (staging / "manifest.json").write_text(full.model_dump_json(indent=2))
        staging.rename(dest)
        return self.load(name, version).version

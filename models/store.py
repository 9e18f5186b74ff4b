"""The model store: the one authoritative copy of every model version, behind a URL.

``KIP_MODEL_STORE`` names it: ``file:///srv/models``, ``s3://bucket/models``,
``gs://bucket/models`` or ``https://host/models`` (read only), through fsspec; each
scheme's backend is an extra (``kip[s3]``). Its layout is the registry's
(models/registry.py) without ``aliases.json``: routes name versions, the store only
holds them::

    <url>/<name>/<version>/manifest.json     written last: a version is whole once seen
    <url>/<name>/<version>/model.onnx, <files>, signatures/<key>.json

A host never runs from the store. It stages a version into its local cache (a
``Registry`` folder) and checks while staging: every file's sha256 against the manifest,
the manifest's signature against the deployment's trusted keys; only a version that
holds is renamed into the cache, so nothing unchecked is ever where a worker loads from.
"""

from __future__ import annotations

import hashlib
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from kip.models.manifest import Manifest
from kip.models.registry import Registry, ModelVersion, valid_version_name
from kip.models.signing import SIGNATURES, ModelSignature, ModelTrust
from kip.schemas.errors import ModelNotFound, ModelUnavailable, ModelUnverified

MANIFEST = "manifest.json"
# A version's files sit in its folder: a name from the store's manifest is one plain name,
# never a path that would write elsewhere on the host.
_FILE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._\-]{0,127}$")


@dataclass
class ModelStore:
    """Versions at ``url``; ``options`` go to the fsspec backend (endpoint, keys)."""

    url: str
    options: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        from fsspec.core import url_to_fs   # the store's extra; the client needs none
        self.fs, self.root = url_to_fs(self.url.rstrip("/"), **self.options)

    def _path(self, *parts: str) -> str:
        return "/".join([self.root, *parts])

    def versions(self) -> list[str]:
        """``name@version`` of every whole version (its manifest written)."""
        found = self._call(lambda: self.fs.glob(self._path("*", "*", MANIFEST)))
        return sorted("@".join(p.split("/")[-3:-1]) for p in found)

    def push(self, version: ModelVersion) -> bool:
        """Copy a registry version in, its manifest last; False where it is there
        already. A version is immutable: a different manifest under its name is refused."""
        m = version.manifest
        target = self._path(m.name, m.version)
        manifest = version.path / MANIFEST
        if self._call(lambda: self.fs.exists(f"{target}/{MANIFEST}")):
            there = self._call(lambda: self.fs.cat_file(f"{target}/{MANIFEST}"))
            if Manifest.model_validate_json(there) != m:
                raise ModelUnverified(f"{m.name}@{m.version}: the store holds a different "
                                      "manifest under this version; versions never change")
            self._push_signatures(version, target)
            return False
        for path in sorted(version.path.rglob("*")):
            if path.is_file() and path != manifest:
                relative = path.relative_to(version.path).as_posix()
                self._put(f"{target}/{relative}", path.read_bytes())
        self._put(f"{target}/{MANIFEST}", manifest.read_bytes())
        return True

    def _push_signatures(self, version: ModelVersion, target: str) -> None:
        """Signatures may come after a version: add those the store lacks."""
        for path in sorted((version.path / SIGNATURES).glob("*.json")):
            remote = f"{target}/{SIGNATURES}/{path.name}"
            if not self._call(lambda: self.fs.exists(remote)):
                self._put(remote, path.read_bytes())

    def _put(self, path: str, data: bytes) -> None:
        """Write one object (a folder store needs its folders first; S3 has none)."""
        def put():
            self.fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
            self.fs.pipe_file(path, data)
        self._call(put)

    def stage(self, name: str, version: str, cache: Registry,
              trust: ModelTrust = ModelTrust(), files: bool = True) -> ModelVersion:
        """The version in ``cache``, pulled and checked first where it is not there;
        ``files=False`` pulls its manifest and signatures only (a pipeline routes on
        them and never runs the model: its cache must not be a worker's)."""
        if not valid_version_name(name, version):
            raise ModelNotFound(f"no model version named '{name[:64]}@{version[:64]}'")
        try:
            return cache.get(name, version)
        except ModelNotFound:
            pass
        source = self._path(name, version)
        manifest_bytes = self._read(source, MANIFEST, f"{name}@{version}")
        manifest = Manifest.model_validate_json(manifest_bytes)
        if (manifest.name, manifest.version) != (name, version):
            raise ModelUnverified(f"{name}@{version}: the store's manifest names "
                                  f"{manifest.name}@{manifest.version}")
        found = self._signatures(source)
        trust.signer(manifest, list(found.values()))   # before a byte of the model is fetched
        staging = cache.root / name / f".{version}.staging"
        shutil.rmtree(staging, ignore_errors=True)
        try:
            if files:
                self._fetch_checked(source, manifest, staging)
            for fname, signature in found.items():
                _write(staging / SIGNATURES / fname, signature.model_dump_json().encode())
            _write(staging / MANIFEST, manifest_bytes)
            staging.rename(cache.root / name / version)
        except OSError:
            if not (cache.root / name / version / MANIFEST).exists():
                raise   # not another stager that landed the same version first
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return cache.get(name, version)

    def _fetch_checked(self, source: str, manifest: Manifest, staging: Path) -> None:
        wanted = {"model.onnx": manifest.artifact_sha256} | manifest.files_sha256
        what = f"{manifest.name}@{manifest.version}"
        for fname, digest in wanted.items():
            if not _FILE_NAME.match(fname) or fname == MANIFEST:
                raise ModelUnverified(f"{what}: the manifest names a file '{fname[:64]}' "
                                      "that cannot be one of a version's", reason="digest")
            data = self._read(source, fname, what)
            if hashlib.sha256(data).hexdigest() != digest:
                raise ModelUnverified(f"{what}: {fname} in the store does not match its "
                                      "manifest's sha256; refusing to stage it",
                                      reason="digest")
            _write(staging / fname, data)

    def _signatures(self, source: str) -> dict[str, ModelSignature]:
        """The version's signatures by file name; a file that is not one is skipped."""
        paths = self._call(lambda: self.fs.glob(f"{source}/{SIGNATURES}/*.json"))
        found = {}
        for path in sorted(paths):
            fname = path.rsplit("/", 1)[-1]
            if not _FILE_NAME.match(fname):
                continue
            try:
                found[fname] = ModelSignature.model_validate_json(
                    self._call(lambda: self.fs.cat_file(path)))
            except ValueError:
                continue   # not a signature: it verifies nothing
        return found

    def _read(self, source: str, fname: str, what: str) -> bytes:
        try:
            return self._call(lambda: self.fs.cat_file(f"{source}/{fname}"))
        except FileNotFoundError:
            raise ModelNotFound(f"model {what} is not in the store ({fname} missing)") from None

    def _call(self, action):
        """Run one store operation; a store that cannot answer is MODEL_UNAVAILABLE with
        its reason, never a hang or a traceback."""
        try:
            self.fs.invalidate_cache()   # listings change under us: never answer from one
            return action()
        except (FileNotFoundError, ModelNotFound, ModelUnverified):
            raise
        except _transfer_checks() as err:
            raise ModelUnverified(f"an object in the model store {self.url} failed the "
                                  f"transfer's checksum: {err}", reason="digest") from err
        except Exception as err:   # each backend has its own (botocore's are not OSError)
            raise ModelUnavailable(f"the model store {self.url} cannot be read: "
                                   f"{type(err).__name__}: {err}") from err


def serving_options(url: str, timeout_s: float) -> dict:
    """Backend options for a serving process: connect within ``timeout_s``, once, so a
    store that is down fails a stage in seconds instead of a backend's retry schedule."""
    scheme = url.partition("://")[0]
    if scheme == "s3":
        return {"config_kwargs": {"connect_timeout": timeout_s, "read_timeout": 30,
                                  "retries": {"max_attempts": 1}}}
    if scheme in ("http", "https"):
        import aiohttp
        return {"client_kwargs": {"timeout": aiohttp.ClientTimeout(
            sock_connect=timeout_s, sock_read=30)}}
    return {}


def _transfer_checks() -> tuple[type[Exception], ...]:
    """The errors a backend raises when an object's bytes do not match the checksum the
    server stored with them (S3's, through botocore): a changed object, as ours is."""
    try:
        from botocore.exceptions import FlexibleChecksumError
    except ImportError:
        return ()
    return (FlexibleChecksumError,)


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)

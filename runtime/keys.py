"""The deployment's own keys, each in a file only kip's account can read:

- the work-item stamp ring (pipeline and workers; schemas/stamps.py);
- the result signing key (pipeline and workers; schemas/result_signatures.py);
- the result public keys (what clients are given to check results);
- where the operator wants pseudonyms in audit records, their key (schemas/pseudonyms.py;
  ``kip audit pseudonym --new-key`` makes one).

``kip keys init`` (and ``kip security init``, ``kip up``) makes the missing ones; kip's
processes refuse to start without theirs rather than run unchecked.
"""

from __future__ import annotations

from pathlib import Path

import orjson
from pydantic import BaseModel

from kip.runtime.files import UnusableFile, read_model, write_private
from kip.schemas.pseudonyms import PseudonymKey
from kip.schemas.result_signatures import ResultKeys, ResultSigningKey
from kip.schemas.stamps import StampKeys


MissingKey = UnusableFile   # what the loaders below raise


def load(cls: type[BaseModel], path: Path, what: str):
    """The key file at ``path``, or an error that says how to make one."""
    return read_model(cls, path, what=what, missing=(
        f"no {what} at {path}: run `kip keys init` (it makes the missing key files), or "
        "point the setting at the deployment's file"))


def stamp_keys(path: Path) -> StampKeys:
    return load(StampKeys, path, "work-item stamp key ring")


def signing_key(path: Path) -> ResultSigningKey:
    return load(ResultSigningKey, path, "result signing key")


def result_keys(path: Path) -> ResultKeys:
    return load(ResultKeys, path, "result public keys")


def model_keys(path: Path) -> ResultKeys:
    """The public keys whose model signatures a deployment trusts (same format as the
    result public keys, other keys)."""
    return load(ResultKeys, path, "model public keys")


def model_signing_key(path: Path) -> ResultSigningKey:
    return load(ResultSigningKey, path, "model signing key")


def ensure_model_keys(signing: Path, public: Path) -> list[Path]:
    """A model signing key and its public key, where missing: for a deployment on one
    machine (``kip up``, the tests). Elsewhere the signing key stays with whoever
    releases models, and servers get only the public file."""
    return _key_pair(signing, public, "m1", "model signing key")


def pseudonym_key(path: Path) -> PseudonymKey:
    return load(PseudonymKey, path, "audit pseudonym key")


def new_pseudonym_key(path: Path) -> PseudonymKey:
    if Path(path).exists():
        raise ValueError(f"{path} exists: an audit pseudonym key is not replaced in place "
                         "(pseudonyms under a new key are a new series; pick a new file)")
    key = PseudonymKey.generate()
    write_private(path, dump(key))
    return key


def dump(model: BaseModel) -> bytes:
    """A key file's JSON, secrets included."""
    data = model.model_dump(mode="python")
    return orjson.dumps(_reveal(data), option=orjson.OPT_INDENT_2)


def _reveal(value):
    if isinstance(value, dict):
        return {k: _reveal(v) for k, v in value.items()}
    if hasattr(value, "get_secret_value"):
        return value.get_secret_value()
    return value


def ensure_keys(stamps: Path, signing: Path, public: Path) -> list[Path]:
    """Make whichever of the three files is missing; returns those made. The public keys
    follow the signing key (made again if the signing key was)."""
    made = []
    if not Path(stamps).exists():
        write_private(stamps, dump(StampKeys.generate()))
        made.append(stamps)
    return made + _key_pair(signing, public, "r1", "result signing key")


def _key_pair(signing: Path, public: Path, key_id: str, what: str) -> list[Path]:
    """An Ed25519 signing key and its public keys file, whichever is missing; the public
    file follows the signing key (made again if the signing key was)."""
    made = []
    if not Path(signing).exists():
        write_private(signing, dump(ResultSigningKey.generate(key_id)))
        made.append(signing)
    key = load(ResultSigningKey, signing, what)
    if signing in made or not Path(public).exists():
        write_private(public, dump(ResultKeys(keys={key.key_id: key.public()})))
        made.append(public)
    return made


def rotate_stamp(path: Path, key_id: str) -> StampKeys:
    """Add a fresh key ``key_id`` to the ring and make it current (the old keys stay until
    dropped, so workers keep accepting work stamped before the switch)."""
    ring = stamp_keys(path)
    if key_id in ring.keys:
        raise ValueError(f"stamp key '{key_id}' is already on the ring")
    fresh = StampKeys.generate(key_id)
    rotated = StampKeys(current=key_id, keys={**ring.keys, **fresh.keys})
    write_private(path, dump(rotated))
    return rotated


def drop_stamp(path: Path, key_id: str) -> StampKeys:
    ring = stamp_keys(path)
    if key_id == ring.current:
        raise ValueError(f"'{key_id}' is the current stamp key: rotate to another first")
    kept = StampKeys(current=ring.current,
                     keys={k: v for k, v in ring.keys.items() if k != key_id})
    write_private(path, dump(kept))
    return kept

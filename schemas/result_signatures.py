"""Signed results: every result kip writes carries an Ed25519 signature, so a client can
tell kip's answer from one written by anybody else who can write its reply topic.

A result written alone is signed over ``b"kip-result-v1\\n"`` followed by the record's
value bytes, as they are on the wire, in the header

    kip-signature: ed25519:<key id>:<hex signature, 128 characters>

The results of one batch (a worker's batch, a pipeline round's rejections) share one
signature: over ``b"kip-result-batch-v1\\n"``, the batch's size in decimal and a
newline, then the root of a Merkle tree whose leaves are the results' value bytes
(schemas/merkle.py, RFC 9162's tree). Each result carries its place in the batch and
the path from it to that root:

    kip-signature: ed25519-batch:<key id>:<hex signature>:<index>:<size>:<path, 64 hex per hash>

Signing costs the worker one signature per batch instead of one per result, and a client
verifies each signature it sees once (``ResultVerifier`` remembers the batches it has
verified); checking a result's path is a few sha256 calls.

Clients hold the deployment's public keys (``ResultKeys``); the private key
(``ResultSigningKey``) stays with the pipeline and the workers. A result also names the
sha256 of the request message it answers (``request_sha256``), so a valid signature on
a result for some other message (a replay, or kip's rejection of a forgery that reused
a request id) answers nothing the client sent. docs/protocol.md shows both checks.

Why Ed25519 and not an HMAC per tenant: a client can verify without being able to sign,
the workers never hold tenants' secrets, and one key covers results of messages that
named no real tenant (``kip bench checks`` prints what signing and verifying cost).

The same key seals the audit chains (schemas/audit_chain.py), under a scheme line of
their own.
"""

from __future__ import annotations

import functools
import hashlib
import re

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import (Ed25519PrivateKey,
                                                               Ed25519PublicKey)
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from pydantic import BaseModel, ConfigDict, Field, SecretStr

from kip.schemas import merkle
from kip.schemas.messages import ID_PATTERN

SIGNATURE_HEADER = "kip-signature"
RESULT_SCHEME = b"kip-result-v1\n"
BATCH_SCHEME = b"kip-result-batch-v1\n"
MAX_BATCH = 1 << 20          # results under one signature: a path of at most 20 hashes
REMEMBERED_BATCHES = 4096    # verified batch signatures a verifier keeps
REMEMBERED_NODES = 1 << 12   # node hashes a verifier keeps (~1.4 MB; a batch of n has n - 1)
_PLACE = re.compile(r"[0-9]{1,7}")
_HEX64 = r"^[0-9a-f]{64}$"


def batch_message(size: int, root: bytes) -> bytes:
    """What a batch's signature signs: its scheme line, its size and its tree's root."""
    return BATCH_SCHEME + f"{size}\n".encode() + root


def request_sha256(payload: bytes) -> str:
    """The digest a result names: sha256 of the request message's value bytes."""
    return hashlib.sha256(payload).hexdigest()


class ResultSigningKey(BaseModel):
    """``{"key_id": "r1", "private_key": "<hex of the 32-byte Ed25519 seed>"}``."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    key_id: str = Field(pattern=ID_PATTERN)
    private_key: SecretStr

    @classmethod
    def generate(cls, key_id: str = "r1") -> ResultSigningKey:
        seed = Ed25519PrivateKey.generate().private_bytes_raw().hex()
        return cls(key_id=key_id, private_key=seed)

    def signer(self) -> ResultSigner:
        seed = bytes.fromhex(self.private_key.get_secret_value())
        return ResultSigner(self.key_id, Ed25519PrivateKey.from_private_bytes(seed))

    def public(self) -> str:
        return self.signer().public_hex


class ResultSigner:
    def __init__(self, key_id: str, key: Ed25519PrivateKey) -> None:
        self.key_id = key_id
        self._key = key
        self._prefix = f"ed25519:{key_id}:"

    @property
    def public_hex(self) -> str:
        return self._key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw).hex()

    def header(self, value: bytes) -> tuple[str, bytes]:
        """The signature header of a result record with ``value``."""
        return SIGNATURE_HEADER, self.signature(RESULT_SCHEME + value).encode()

    def headers(self, values: list[bytes]) -> list[tuple[str, bytes]]:
        """The signature header of each result record of a batch with ``values``: one
        signature for all of them (a lone result gets the single-result scheme)."""
        if len(values) <= 1:
            return [self.header(v) for v in values]
        root, paths = merkle.root_and_paths([merkle.leaf_hash(v) for v in values])
        size = len(values)
        signed = f"ed25519-batch:{self.key_id}:{self._key.sign(batch_message(size, root)).hex()}"
        return [(SIGNATURE_HEADER, f"{signed}:{i}:{size}:{b''.join(path).hex()}".encode())
                for i, path in enumerate(paths)]

    def signature(self, message: bytes) -> str:
        """``ed25519:<key id>:<hex signature of message>``. Every message this key signs
        starts with its scheme's line (``kip-result-v1``, ``kip-audit-seal-v2``), so a
        signature made for one use is never valid for another."""
        return self._prefix + self._key.sign(message).hex()


class ResultKeys(BaseModel):
    """The public keys a client trusts: ``{"keys": {"<key id>": "<hex public key>"}}``."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    keys: dict[str, str] = Field(min_length=1)

    def verifier(self) -> ResultVerifier:
        return ResultVerifier({kid: Ed25519PublicKey.from_public_bytes(bytes.fromhex(pub))
                               for kid, pub in self.keys.items()})


class ResultVerifier:
    def __init__(self, keys: dict[str, Ed25519PublicKey]) -> None:
        self._keys = keys
        self._batches: dict[tuple[str, bytes], None] = {}   # verified: oldest first
        # The results of a batch arrive together and share their paths' upper nodes: the
        # second result of a pair hashes nothing twice, the rest of a batch little.
        self._node_hash = functools.lru_cache(maxsize=REMEMBERED_NODES)(merkle.node_hash)

    def valid(self, value: bytes, headers) -> bool:
        """Whether ``headers`` hold a signature of ``value`` by a trusted key, alone or
        as one of a signed batch."""
        found = [v for k, v in headers or () if k == SIGNATURE_HEADER]
        if len(found) != 1:
            return False
        signature = found[0].decode("ascii", "replace")
        if signature.startswith("ed25519-batch:"):
            return self._in_signed_batch(signature.removeprefix("ed25519-batch:"), value)
        return self.verified(signature, RESULT_SCHEME + value)

    def _in_signed_batch(self, fields: str, value: bytes) -> bool:
        """``<key id>:<signature>:<index>:<size>:<path>``: the path ties ``value`` to a
        root, and the key signed that root for a batch of that size."""
        parts = fields.rsplit(":", 4)   # a key id may hold colons; nothing else does
        if len(parts) != 5 or not all(_PLACE.fullmatch(n) for n in parts[2:4]):
            return False
        key_id, signature, index, size, path = parts
        try:
            hashes = bytes.fromhex(path)
        except ValueError:
            return False
        if int(size) > MAX_BATCH or len(hashes) % merkle.HASH_BYTES:
            return False
        root = merkle.root_from_path(
            merkle.leaf_hash(value), int(index), int(size),
            [hashes[i:i + merkle.HASH_BYTES] for i in range(0, len(hashes), merkle.HASH_BYTES)],
            self._node_hash)
        return root is not None and self._signed(key_id, signature,
                                                 batch_message(int(size), root))

    def _signed(self, key_id: str, signature: str, message: bytes) -> bool:
        """``verified``, remembering the batches that passed: the rest of a batch
        costs no signature check."""
        seen = (f"{key_id}:{signature}", message)
        if seen in self._batches:
            return True
        if not self.verified(f"ed25519:{key_id}:{signature}", message):
            return False
        if len(self._batches) >= REMEMBERED_BATCHES:
            del self._batches[next(iter(self._batches))]
        self._batches[seen] = None
        return True

    def verified(self, signature: str, message: bytes) -> bool:
        """Whether ``signature`` (as ``ResultSigner.signature`` writes it) is a trusted
        key's signature of ``message``."""
        scheme, _, rest = signature.partition(":")
        key_id, _, hex_signature = rest.rpartition(":")   # a key id may hold colons
        key = self._keys.get(key_id)
        if scheme != "ed25519" or key is None:
            return False
        try:
            key.verify(bytes.fromhex(hex_signature), message)
        except (InvalidSignature, ValueError):
            return False
        return True

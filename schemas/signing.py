"""Request signatures: HMAC-SHA256 over canonical fields and a digest of the inputs.

The secret never travels: only its key id does. The canonical string is the lines

    kip-request-v1, request_id, tenant, key_id, issued_at_ms, priority, model,
    deadline_ms (or empty), reply_to (or empty), body_sha256 (hex)

joined with "\\n" (UTF-8). ``body_sha256`` is sha256 over the concatenated per-tensor
digests (``Tensor.digest``), so it does not depend on how JSON spells numbers.
A cancel (``CancelRequest``) is signed the same way over its own fields
(``cancel_canonical_string``). docs/protocol.md states the same rules for producers in
other languages.
"""

from __future__ import annotations

import hashlib
import hmac

from kip.schemas.tensors import Tensor

SIGNATURE_SCHEME = "kip-request-v1"
CANCEL_SCHEME = "kip-cancel-v1"


def body_sha256(inputs: list[Tensor]) -> str:
    h = hashlib.sha256()
    for tensor in inputs:
        h.update(tensor.digest())
    return h.hexdigest()


def canonical_string(*, request_id: str, tenant: str, key_id: str, issued_at_ms: int,
                     priority: str, model: str, deadline_ms: int | None,
                     reply_to: str | None, inputs: list[Tensor]) -> bytes:
    fields = [SIGNATURE_SCHEME, request_id, tenant, key_id, str(issued_at_ms), str(priority),
              model, "" if deadline_ms is None else str(deadline_ms), reply_to or "",
              body_sha256(inputs)]
    return "\n".join(fields).encode("utf-8")


def sign(secret: bytes, **fields) -> str:
    """Hex HMAC-SHA256 of the canonical string built from ``fields``."""
    return hmac.digest(secret, canonical_string(**fields), "sha256").hex()


def signature_matches(secret: bytes, signature: str, **fields) -> bool:
    return hmac.compare_digest(sign(secret, **fields), signature)


def cancel_canonical_string(*, cancel_id: str, tenant: str, key_id: str, issued_at_ms: int,
                            request_id: str, request_tenant: str, reply_to: str | None
                            ) -> bytes:
    """A cancel's canonical string: the lines ``kip-cancel-v1``, cancel_id, tenant,
    key_id, issued_at_ms, request_id, request_tenant, reply_to (or empty). Its own scheme
    name, so no request's signature is ever a cancel's."""
    fields = [CANCEL_SCHEME, cancel_id, tenant, key_id, str(issued_at_ms), request_id,
              request_tenant, reply_to or ""]
    return "\n".join(fields).encode("utf-8")


def sign_cancel(secret: bytes, **fields) -> str:
    return hmac.digest(secret, cancel_canonical_string(**fields), "sha256").hex()


def cancel_signature_matches(secret: bytes, signature: str, **fields) -> bool:
    return hmac.compare_digest(sign_cancel(secret, **fields), signature)

"""Work-item stamps: the pipeline's proof, checked by every worker, that it admitted a
work item as it stands.

The stamp is HMAC-SHA256, under a key that the pipeline and the workers share, over the
lines

    kip-work-v1, request_id, tenant, priority, model_name, model_version,
    artifact_sha256, routed_at_ms, deadline_ms, reply_to (or empty),
    request_sha256 (or empty), body_sha256 (the request's inputs, schemas/signing.py)

joined with "\\n". A peer that can write a work topic but does not hold a key cannot
make a work item a worker will run, nor change where a stamped one's result goes, which
version runs it, its deadline or its inputs.

Keys rotate through a ``StampKeys`` ring: the pipeline stamps with ``current``; workers
accept every key on their ring. Add the new key to the workers' ring, then make it the
pipeline's current one, then drop the old one (docs/security.md).
"""

from __future__ import annotations

import hmac
import secrets

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

from kip.schemas.errors import Unauthenticated
from kip.schemas.messages import (ID_PATTERN, CancelNotice, InferenceRequest, Route, WorkItem,
                                  WorkStamp)
from kip.schemas.signing import body_sha256

STAMP_SCHEME = "kip-work-v2"
NOTICE_SCHEME = "kip-cancel-notice-v1"


class StampKeys(BaseModel):
    """A key ring: ``{"current": "<key id>", "keys": {"<key id>": "<hex secret>"}}``."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    current: str = Field(pattern=ID_PATTERN)
    keys: dict[str, SecretStr]

    @model_validator(mode="after")
    def _current_listed(self) -> StampKeys:
        if self.current not in self.keys:
            raise ValueError(f"the current stamp key '{self.current}' is not on the ring")
        for key_id, secret in self.keys.items():
            if len(secret.get_secret_value()) < 32:
                raise ValueError(f"stamp key '{key_id}' is shorter than 32 characters")
        return self

    @classmethod
    def generate(cls, key_id: str = "s1") -> StampKeys:
        return cls(current=key_id, keys={key_id: secrets.token_hex(32)})

    def secret(self, key_id: str) -> bytes | None:
        found = self.keys.get(key_id)
        return None if found is None else found.get_secret_value().encode()


def canonical(item: WorkItem) -> bytes:
    return canonical_fields(item.request, item.route, item.routed_at_ms, item.deadline_ms,
                            item.reply_to, item.request_sha256, item.work_partition)


def canonical_fields(request: InferenceRequest, route: Route, routed_at_ms: int,
                     deadline_ms: int, reply_to: str | None,
                     request_sha256: str | None, work_partition: int | None) -> bytes:
    """The stamped lines of a work item with these fields (the module docstring)."""
    fields = [STAMP_SCHEME, request.request_id, request.tenant, request.priority,
              route.model_name, route.model_version, route.artifact_sha256,
              str(routed_at_ms), str(deadline_ms), reply_to or "",
              request_sha256 or "", body_sha256(request.inputs),
              "" if work_partition is None else str(work_partition)]
    return "\n".join(fields).encode("utf-8")


def stamp_mac(canonical_lines: bytes, keys: StampKeys) -> str:
    """The hex MAC of the ring's current key over ``canonical_lines``."""
    return hmac.digest(keys.secret(keys.current), canonical_lines, "sha256").hex()


def stamped(item: WorkItem, keys: StampKeys) -> WorkItem:
    """``item`` with the stamp of the ring's current key."""
    mac = stamp_mac(canonical(item), keys)
    return item.model_copy(update={"stamp": WorkStamp(key_id=keys.current, mac=mac)})


def check_stamp(item: WorkItem, keys: StampKeys) -> None:
    """Raise ``Unauthenticated`` unless ``item`` carries a valid stamp of a ring key."""
    if item.stamp is None:
        raise Unauthenticated("the work item carries no pipeline stamp")
    secret = keys.secret(item.stamp.key_id)
    if secret is None:
        raise Unauthenticated(f"the work item is stamped with key '{item.stamp.key_id}', "
                              "which is not on this worker's ring")
    mac = hmac.digest(secret, canonical(item), "sha256").hex()
    if not hmac.compare_digest(mac, item.stamp.mac):
        raise Unauthenticated("the work item's stamp does not match its contents")


def _notice_lines(notice: CancelNotice) -> bytes:
    return "\n".join([NOTICE_SCHEME, notice.tenant, notice.request_id, notice.cancel_id,
                      notice.key_id, str(notice.at_ms)]).encode("utf-8")


def stamped_notice(notice: CancelNotice, keys: StampKeys) -> CancelNotice:
    """A cancel notice with the pipeline's stamp, as a work item has one: a peer that can
    write the cancels topic but holds no key cannot cancel a request."""
    mac = stamp_mac(_notice_lines(notice), keys)
    return notice.model_copy(update={"stamp": WorkStamp(key_id=keys.current, mac=mac)})


def check_notice(notice: CancelNotice, keys: StampKeys) -> None:
    """Raise ``Unauthenticated`` unless ``notice`` carries a valid stamp of a ring key."""
    secret = keys.secret(notice.stamp.key_id) if notice.stamp is not None else None
    if secret is None:
        raise Unauthenticated("the cancel notice carries no stamp of this worker's ring")
    mac = hmac.digest(secret, _notice_lines(notice), "sha256").hex()
    if not hmac.compare_digest(mac, notice.stamp.mac):
        raise Unauthenticated("the cancel notice's stamp does not match its contents")

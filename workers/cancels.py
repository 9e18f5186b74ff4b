"""The cancels a worker honours: followed from the cancels topic (pipeline/cancels.py
writes them), each checked for the pipeline's stamp, kept for ``CANCEL_RETENTION_MS``.

A work item whose request was cancelled and has not been answered ends ``cancelled``
instead of running (workers/answers.py asks ``notice_for`` after the single-use check, so
a request already answered keeps its result: its copy is refused as any copy is). The
ending is committed with the request's answered id, as every ending is: exactly once.
"""

from __future__ import annotations

from kip.runtime.follower import TopicFollower
from kip.schemas.codec import decode
from kip.schemas.errors import Cancelled
from kip.schemas.messages import CancelNotice, WorkItem
from kip.schemas.stamps import StampKeys, check_notice
from kip.topics.catalogue import CANCEL_RETENTION_MS
from kip.topics.names import TopicNames
from kip.transport.clients import KafkaConnection

SWEEP_EVERY = 1024   # notices applied between two sweeps of expired ones


class Cancels:
    def __init__(self, keys: StampKeys, retention_ms: int = CANCEL_RETENTION_MS) -> None:
        self.keys, self.retention_ms = keys, retention_ms
        self._notices: dict[tuple[str, str], CancelNotice] = {}
        self._applied = 0

    def apply(self, key: bytes | None, value: bytes | None) -> None:
        """One record of the cancels topic; raises on one that does not decode or whose
        stamp does not check (the follower counts and skips it)."""
        if value is None:
            return
        notice = decode(CancelNotice, value)
        check_notice(notice, self.keys)
        self._notices[(notice.tenant, notice.request_id)] = notice
        self._applied += 1
        if self._applied % SWEEP_EVERY == 0:
            self._sweep(notice.at_ms)

    def _sweep(self, now_ms: int) -> None:
        horizon = now_ms - self.retention_ms
        for key in [k for k, n in self._notices.items() if n.at_ms < horizon]:
            del self._notices[key]

    def notice_for(self, item: WorkItem) -> CancelNotice | None:
        if not self._notices:
            return None
        notice = self._notices.get((item.request.tenant, item.request.request_id))
        if notice is None or notice.at_ms < item.routed_at_ms - self.retention_ms:
            return None
        return notice

    def __len__(self) -> int:
        return len(self._notices)


def cancelled_error(notice: CancelNotice) -> Cancelled:
    """The ending's error: who cancelled it (their key), with which cancel."""
    return Cancelled(f"cancelled by tenant {notice.tenant} (key {notice.key_id}, cancel "
                     f"{notice.cancel_id}) before it ran")


def follower(kafka: KafkaConnection, names: TopicNames, cancels: Cancels) -> TopicFollower:
    """The cancels topic followed from its beginning (it keeps ``CANCEL_RETENTION_MS``)."""
    return TopicFollower(kafka, names.cancels, cancels.apply)

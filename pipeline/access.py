"""Who may do what: API keys (authentication) and tenant policies (authorization).

The access file is JSON (``KIP_ACCESS_FILE``)::

    {"keys":    {"<key id>": {"tenant": "acme", "secret": "<shared secret>"}},
     "tenants": {"acme": {"models": ["minilm", "digits"],
                          "priorities": ["interactive", "standard", "batch"],
                          "request_partition": 2,
                          "broker_quota": {"producer_bytes_per_s": 16777216,
                                           "request_percentage": 50}}}}

``request_partition`` and ``broker_quota`` are optional (pipeline/intake.py, ``kip acls
apply``).

``"*"`` in ``models`` allows every model. Secrets are held as ``SecretStr`` so they never
reach a log line or a repr.
"""

from __future__ import annotations

from pathlib import Path

import orjson

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from kip.runtime.files import read_model
from kip.schemas.errors import Forbidden, Unauthenticated
from kip.schemas.messages import CancelRequest, InferenceRequest, Priority
from kip.schemas.signing import cancel_signature_matches, signature_matches

DEFAULT_REPLAY_WINDOW_MS = 5 * 60 * 1000


class ApiKey(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    tenant: str
    secret: SecretStr


class BrokerQuota(BaseModel):
    """What the broker itself lets a tenant's principal do (Kafka client quotas, set by
    ``kip acls apply``): it throttles a producer past them before kip reads a byte."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    producer_bytes_per_s: int = Field(16 * 1024 * 1024, gt=0, description=(
        "Kafka's producer_byte_rate for the tenant's principal"))
    request_percentage: float = Field(50.0, gt=0, description=(
        "Kafka's request_percentage: the share of one broker thread's time its requests "
        "may take, in percent"))


class TenantPolicy(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    models: list[str] = Field(default_factory=list)
    priorities: list[Priority] = Field(default_factory=lambda: list(Priority))
    request_partition: int | None = Field(None, ge=0, description=(
        "the request partition of this tenant's messages, on every class's topic "
        "(modulo its partitions); default: where Kafka's default partitioner puts its "
        "key. Give a noisy tenant one of its own (docs/protocol.md)"))
    broker_quota: BrokerQuota = Field(default_factory=BrokerQuota)


class AccessConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    keys: dict[str, ApiKey] = Field(default_factory=dict)
    tenants: dict[str, TenantPolicy] = Field(default_factory=dict)

    @classmethod
    def from_file(cls, path: str | Path) -> AccessConfig:
        """The access file; an unusable one raises ``ValueError`` naming each problem by
        its place in the file, never by its value (the values are secrets)."""
        return read_model(cls, path, what="access file", missing=(
            f"no access file at {path}: write one (keys and tenant policies, "
            "docs/security.md) or set KIP_ACCESS_FILE; `kip up` makes a demo one"))

    def secret_of(self, key_id: str, tenant: str) -> bytes | None:
        """The secret of API key ``key_id``, if it is one of ``tenant``'s."""
        key = self.keys.get(key_id)
        if key is None or key.tenant != tenant:
            return None
        return key.secret.get_secret_value().encode()

    def to_json(self) -> str:
        """Serialise including secrets (for writing the access file itself)."""
        data = self.model_dump(mode="python")
        for key in data["keys"].values():
            key["secret"] = key["secret"].get_secret_value()
        return orjson.dumps(data, option=orjson.OPT_INDENT_2).decode()


def authenticate(request: InferenceRequest, access: AccessConfig, now_ms: int,
                 replay_window_ms: int = DEFAULT_REPLAY_WINDOW_MS) -> None:
    """Raise ``Unauthenticated`` unless the request is signed by a key of its tenant."""
    secret = _signing_secret(request.key_id, request.tenant, request.issued_at_ms, access,
                             now_ms, replay_window_ms)
    ok = signature_matches(
        secret, request.signature,
        request_id=request.request_id, tenant=request.tenant, key_id=request.key_id,
        issued_at_ms=request.issued_at_ms, priority=request.priority,
        model=request.model, deadline_ms=request.deadline_ms, reply_to=request.reply_to,
        inputs=request.inputs)
    if not ok:
        raise Unauthenticated("the signature does not match the request")


def authenticate_cancel(cancel: CancelRequest, access: AccessConfig, now_ms: int,
                        replay_window_ms: int = DEFAULT_REPLAY_WINDOW_MS) -> None:
    """Raise ``Unauthenticated`` unless the cancel is signed by a key of its tenant."""
    secret = _signing_secret(cancel.key_id, cancel.tenant, cancel.issued_at_ms, access,
                             now_ms, replay_window_ms)
    if not cancel_signature_matches(
            secret, cancel.signature, cancel_id=cancel.cancel_id, tenant=cancel.tenant,
            key_id=cancel.key_id, issued_at_ms=cancel.issued_at_ms,
            request_id=cancel.request_id, request_tenant=cancel.request_tenant,
            reply_to=cancel.reply_to):
        raise Unauthenticated("the signature does not match the cancel")


def _signing_secret(key_id: str, tenant: str, issued_at_ms: int, access: AccessConfig,
                    now_ms: int, replay_window_ms: int) -> bytes:
    """The secret of ``key_id``, a key of ``tenant``, for a message issued within the
    replay window; else ``Unauthenticated``."""
    key = access.keys.get(key_id)
    if key is None or key.tenant != tenant:
        raise Unauthenticated(f"unknown key id '{key_id}' for tenant '{tenant}'")
    if abs(now_ms - issued_at_ms) > replay_window_ms:
        raise Unauthenticated(f"issued_at_ms is {(now_ms - issued_at_ms) / 1000:.0f}s "
                              f"from now; the replay window is ±{replay_window_ms // 1000}s")
    return key.secret.get_secret_value().encode()


def may_use(access: AccessConfig, tenant: str, model: str) -> bool:
    """Whether ``tenant``'s policy allows ``model`` (a model or alias name)."""
    policy = access.tenants.get(tenant)
    return policy is not None and ("*" in policy.models or model in policy.models)


def authorize(request: InferenceRequest, access: AccessConfig) -> None:
    """Raise ``Forbidden`` unless the tenant may use this model and priority class."""
    policy = access.tenants.get(request.tenant)
    if policy is None:
        raise Forbidden(f"tenant '{request.tenant}' has no policy")
    model_name = request.model.partition("@")[0]
    if not may_use(access, request.tenant, model_name):
        raise Forbidden(f"tenant '{request.tenant}' may not use model '{model_name}'")
    if request.priority not in policy.priorities:
        raise Forbidden(f"tenant '{request.tenant}' may not send {request.priority.value} "
                        "requests")

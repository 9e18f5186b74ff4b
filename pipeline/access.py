"""Who may do what: API keys (authentication) and tenant policies (authorization).

The access file is JSON (``KIP_ACCESS_FILE``)::

    {"keys":    {"<key id>": {"tenant": "acme", "secret": "<shared secret>"}},
     "tenants": {"acme": {"models": ["minilm", "digits"],
                          "priorities": ["interactive", "standard", "batch"]}}}

``"*"`` in ``models`` allows every model. Secrets are held as ``SecretStr`` so they never
reach a log line or a repr.
"""

from __future__ import annotations

from pathlib import Path

import orjson

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from runtime.files import read_model
from schemas.errors import Forbidden, Unauthenticated
from schemas.messages import InferenceRequest, Priority
from schemas.signing import signature_matches

DEFAULT_REPLAY_WINDOW_MS = 5 * 60 * 1000


class ApiKey(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    tenant: str
    secret: SecretStr


class TenantPolicy(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    models: list[str] = Field(default_factory=list)
    priorities: list[Priority] = Field(default_factory=lambda: list(Priority))


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

    def to_json(self) -> str:
        """Serialise including secrets (for writing the access file itself)."""
        data = self.model_dump(mode="python")
        for key in data["keys"].values():
            key["secret"] = key["secret"].get_secret_value()
        return orjson.dumps(data, option=orjson.OPT_INDENT_2).decode()


def authenticate(request: InferenceRequest, access: AccessConfig, now_ms: int,
                 replay_window_ms: int = DEFAULT_REPLAY_WINDOW_MS) -> None:
    """Raise ``Unauthenticated`` unless the request is signed by a key of its tenant."""
    key = access.keys.get(request.key_id)
    if key is None or key.tenant != request.tenant:
        raise Unauthenticated(f"unknown key id '{request.key_id}' for tenant '{request.tenant}'")
    if abs(now_ms - request.issued_at_ms) > replay_window_ms:
        raise Unauthenticated(f"issued_at_ms is {(now_ms - request.issued_at_ms) / 1000:.0f}s "
                              f"from now; the replay window is ±{replay_window_ms // 1000}s")
    ok = signature_matches(
        key.secret.get_secret_value().encode(), request.signature,
        request_id=request.request_id, tenant=request.tenant, key_id=request.key_id,
        issued_at_ms=request.issued_at_ms, priority=request.priority,
        model=request.model, deadline_ms=request.deadline_ms, reply_to=request.reply_to,
        inputs=request.inputs)
    if not ok:
        raise Unauthenticated("the signature does not match the request")


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

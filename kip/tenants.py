"""``kip tenants set|show|clear``: tenant quotas as records on the control topic; and the
broker's own quotas on each tenant's principal, from the access file (``kip acls
apply``)."""

from __future__ import annotations

import asyncio

from kip.pipeline.access import AccessConfig
from kip.pipeline.control import ControlState, publish_control, quota_record
from kip.runtime.follower import TopicFollower
from kip.pipeline.quota import Limit, TenantQuota
from kip.topics.acls import tenant_principal
from kip.transport.clients import KafkaConnection
from kip.topics.names import TopicNames
from kip.transport.quota_admin import Quotas


def broker_quotas(access: AccessConfig) -> Quotas:
    """Kafka's client quotas for each tenant's principal, as the access file's
    ``broker_quota`` says (transport/quota_admin.py)."""
    return {tenant_principal(t).removeprefix("User:"): {
        "producer_byte_rate": float(p.broker_quota.producer_bytes_per_s),
        "request_percentage": float(p.broker_quota.request_percentage)}
        for t, p in access.tenants.items()}


async def current_state(kafka: KafkaConnection, names: TopicNames,
                        timeout_s: float = 15.0) -> ControlState:
    """The control topic as the pipeline sees it, read to its current end."""
    state = ControlState()
    follower = TopicFollower(kafka, names.control, state.apply)
    task = asyncio.create_task(follower.run())
    caught_up = asyncio.create_task(follower.caught_up.wait())
    try:
        await asyncio.wait([task, caught_up], timeout=timeout_s,
                           return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            task.result()   # the follower failed: say why
        if not caught_up.done():
            raise TimeoutError(f"could not read {follower.topic} within {timeout_s:.0f}s")
    finally:
        for t in (task, caught_up):
            t.cancel()
        await asyncio.gather(task, caught_up, return_exceptions=True)
    return state


async def set_quota(kafka: KafkaConnection, names: TopicNames, tenant: str,
                    model: str | None, limit: dict) -> TenantQuota:
    """Merge ``limit`` into the tenant's quota (tenant-wide, or for one model)."""
    state = await current_state(kafka, names)
    quota = state.quotas.get(tenant) or TenantQuota(tenant=tenant)
    given = {k: v for k, v in limit.items() if v is not None}
    if model:
        old = quota.models.get(model) or Limit()
        models = quota.models | {model: old.model_copy(update=given)}
        quota = quota.model_copy(update={"models": models})
    else:
        quota = quota.model_copy(update=given)
    quota = TenantQuota.model_validate(quota.model_dump())   # re-check the merged result
    key, value = quota_record(quota)
    await publish_control(kafka, names.control, key, value)
    return quota


async def clear_quota(kafka: KafkaConnection, names: TopicNames, tenant: str) -> None:
    await publish_control(kafka, names.control, f"quota:{tenant}", None)


async def show_quotas(kafka: KafkaConnection, names: TopicNames, tenant: str | None) -> str:
    state = await current_state(kafka, names)
    quotas = [q for t, q in sorted(state.quotas.items()) if tenant in (None, t)]
    if not quotas:
        return f"no quota for {tenant}: unlimited" if tenant else "no quotas set"
    return "\n".join(q.model_dump_json(exclude_none=True, indent=2) for q in quotas)

"""The pipeline's span per request (runtime/tracing.py): ``process {requests topic}``,
the admission, under the request's ``traceparent``, from the round's start to its
decision; a forwarded request's work record then carries this span's context.

Attributes: the messaging conventions' (topic, partition, offset, consumer group) and
kip's (decision, error code, model, version, class; the tenant as its pseudonym where
the deployment keeps a pseudonym key, else as named).
"""

from __future__ import annotations

from dataclasses import replace

from kip.pipeline.decisions import Decision, Forward, Shed
from kip.runtime import tracing
from kip.schemas.codec import now_ms
from kip.transport.outputs import Sealing


def traced(events: list, decisions: list[Decision], started_ms: float, group: str,
           sealing: Sealing) -> list[Decision]:
    """``decisions``, each recorded as an admission span; forwards carry theirs."""
    if not tracing.ENABLED:
        return decisions
    ended = now_ms()
    out = []
    for event, decision in zip(events, decisions):
        if isinstance(decision, Shed):   # no request: no trace to join
            out.append(decision)
            continue
        m = event.message
        span = tracing.record(f"process {m.topic}", started_ms, ended,
                              tracing.messaging("process", m.topic, m.partition, m.offset, group)
                              | _kip_attributes(decision, sealing),
                              parent=decision.audit.traceparent, kind="consumer")
        out.append(replace(decision, span=span) if isinstance(decision, Forward) else decision)
    return out


def _kip_attributes(decision: Decision, sealing: Sealing) -> dict:
    audit = sealing.kept(decision.audit)   # pseudonyms, where the deployment keeps a key
    values = {"kip.request_id": audit.request_id, "kip.decision": audit.decision,
              "kip.error_code": audit.error_code, "kip.model": audit.model_name or audit.model,
              "kip.model_version": audit.model_version,
              "kip.artifact_sha256": audit.artifact_sha256, "kip.priority": audit.priority,
              "kip.tenant": audit.tenant, "kip.fallback_from": audit.fallback_from}
    return {k: v for k, v in values.items() if v is not None}

"""``kip audit verify --every S``: verify the audit chains again and again, as gauges.

Each round verifies the records of the last ``--since`` (an age) and sets
``kip_audit_chain_problems`` (0 while every chain holds: the KipAuditChainBroken alert,
deploy/monitoring/prometheus/alerts.yml), the records verified and when. It serves them on
``KIP_METRICS_PORT`` with ``/healthz`` and ``/readyz`` (ready once a round has read the
topic). It reads as the audit-reader role, and only the audit topic.
"""

from __future__ import annotations

import asyncio
import logging
import time

from aiokafka.errors import KafkaError
from prometheus_client import Gauge

from kip.audit.reading import verify
from kip.runtime.probes import PROBES, keep_beating
from kip.schemas.codec import now_ms

log = logging.getLogger("kip.audit")
PROBLEMS = Gauge("kip_audit_chain_problems", "Broken links, bad seals or unverifiable "
                 "records the last verification of the audit chains found")
VERIFIED = Gauge("kip_audit_records_verified", "Audit records the last verification read")
VERIFIED_AT = Gauge("kip_audit_verified_timestamp_seconds", "When the audit chains were "
                    "last verified (Unix time)")


async def keep_verifying(kafka, names, verifier, window_ms: int, every_s: float) -> None:
    """Verify the last ``window_ms`` every ``every_s`` until cancelled."""
    PROBES.expect("audit read")
    beating = asyncio.create_task(keep_beating(), name="kip-beat")
    try:
        while True:
            try:
                summary = await verify(kafka, names, verifier, now_ms() - window_ms)
            except KafkaError as err:   # the gauges keep the last round's figures
                PROBES.set("audit read", False, f"the last round failed: {err!r}"[:300])
                log.error("verifying the audit chains failed: %r", err)
            else:
                PROBLEMS.set(len(summary.problems))
                VERIFIED.set(summary.records)
                VERIFIED_AT.set(time.time())
                PROBES.set("audit read", True, f"{summary.records} records verified")
            await asyncio.sleep(every_s)
    finally:
        beating.cancel()

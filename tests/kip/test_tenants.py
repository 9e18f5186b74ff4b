import asyncio
import json

from kip.tenants import clear_quota, current_state, set_quota, show_quotas
from kip.transport.admin import apply
from kip.topics.catalogue import catalogue
from kip.topics.names import TopicNames


def test_quotas_are_merged_shown_and_cleared_on_the_control_topic(broker, prefix):
    kafka, names = broker.kafka, TopicNames(prefix)
    asyncio.run(apply(kafka, catalogue(names, [], 1)))

    async def go():
        await set_quota(kafka, names, "acme", None,
                        {"requests_per_s": 5.0, "burst_requests": None})
        await set_quota(kafka, names, "acme", "minilm", {"bytes_per_s": 1000.0})
        shown = await show_quotas(kafka, names, "acme")
        await clear_quota(kafka, names, "acme")
        return shown, await current_state(kafka, names)
    shown, after = asyncio.run(go())
    quota = json.loads(shown)
    assert quota["requests_per_s"] == 5.0 and quota["models"]["minilm"]["bytes_per_s"] == 1000.0
    assert "acme" not in after.quotas

import asyncio
import json

from runtime.settings import KipSettings
from kip.tenants import clear_quota, current_state, set_quota, show_quotas
from topics.admin import apply
from topics.catalogue import catalogue
from topics.names import TopicNames


def test_quotas_are_merged_shown_and_cleared_on_the_control_topic(broker, prefix):
    settings = KipSettings(bootstrap=broker.bootstrap, topic_prefix=prefix)
    asyncio.run(apply(broker.kafka, catalogue(TopicNames(prefix), [], 1)))

    async def go():
        await set_quota(settings, "acme", None, {"requests_per_s": 5.0, "burst_requests": None})
        await set_quota(settings, "acme", "minilm", {"bytes_per_s": 1000.0})
        shown = await show_quotas(settings, "acme")
        await clear_quota(settings, "acme")
        return shown, await current_state(settings)
    shown, after = asyncio.run(go())
    quota = json.loads(shown)
    assert quota["requests_per_s"] == 5.0 and quota["models"]["minilm"]["bytes_per_s"] == 1000.0
    assert "acme" not in after.quotas

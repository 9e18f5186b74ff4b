import asyncio

from kip.transport.admin import apply
from kip.topics.catalogue import catalogue
from kip.topics.names import TopicNames


def test_catalogue_names_every_topic_once_with_its_key():
    specs = catalogue(TopicNames("kip"), ["minilm", "digits"])
    names = [s.name for s in specs]
    assert len(names) == len(set(names)) == 3 + 3 + 6 + 6 + 9   # requests, admitted,
    # work, answered, rest
    assert "kip.admitted.batch" in names
    assert "kip.requests.interactive" in names and "kip.work.digits.batch" in names
    assert {s.name: s.config["cleanup.policy"] for s in specs}["kip.control"] == "compact"
    assert all(s.key for s in specs)


def test_apply_creates_then_changes_nothing_then_reports_drift(broker, prefix):
    specs = catalogue(TopicNames(prefix), ["digits"], partitions=2)
    first = asyncio.run(apply(broker.kafka, specs))
    assert len(first.created) == len(specs) and not first.drift
    second = asyncio.run(apply(broker.kafka, specs))
    assert not second.created and not second.drift and len(second.unchanged) == len(specs)
    changed = [s if s.name != specs[0].name else type(s)(s.name, 5, s.key, s.purpose, s.config)
               for s in specs]
    third = asyncio.run(apply(broker.kafka, changed))
    assert len(third.drift) == 1 and "partitions 2 (catalogue: 5)" in third.drift[0]

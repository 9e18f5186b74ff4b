from pipeline.settings import DEFAULT_ROUND_MS, PipelineSettings
from schemas.messages import Priority


def test_round_ms_per_class_from_the_environment(monkeypatch):
    monkeypatch.setenv("KIP_ROUND_MS", '{"batch": 80}')
    rounds = PipelineSettings().round_ms
    assert rounds == DEFAULT_ROUND_MS | {Priority.BATCH: 80.0}   # the rest: defaults
    assert rounds[Priority.INTERACTIVE] < rounds[Priority.STANDARD] < rounds[Priority.BATCH]

import pytest

from kip.pipeline.settings import DEFAULT_ROUND_MS, DEFAULT_TAKE_MAX, PipelineSettings
from kip.schemas.messages import Priority


def test_round_ms_per_class_from_the_environment(monkeypatch):
    monkeypatch.setenv("KIP_ROUND_MS", '{"batch": 80}')
    rounds = PipelineSettings().round_ms
    assert rounds == DEFAULT_ROUND_MS | {Priority.BATCH: 80.0}   # the rest: defaults
    assert rounds[Priority.INTERACTIVE] < rounds[Priority.STANDARD] < rounds[Priority.BATCH]


def test_take_max_per_class_from_the_environment(monkeypatch):
    monkeypatch.setenv("KIP_TAKE_MAX", '{"batch": 2000}')
    take = PipelineSettings().take_max
    assert take == DEFAULT_TAKE_MAX | {Priority.BATCH: 2000}   # the rest: defaults
    assert take[Priority.INTERACTIVE] < take[Priority.STANDARD] < take[Priority.BATCH]


def test_one_take_max_is_every_class_s(monkeypatch):
    monkeypatch.setenv("KIP_TAKE_MAX", "150")
    assert PipelineSettings().take_max == {p: 150 for p in Priority}


def test_a_take_max_below_one_is_refused():
    with pytest.raises(ValueError, match="at least 1 per class"):
        PipelineSettings(take_max={"standard": 0})

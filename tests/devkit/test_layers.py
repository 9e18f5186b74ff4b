"""The house rules hold on the real tree: no import runs back up, nothing is too long, and
no library's internals are used outside its adapter."""

from __future__ import annotations

from pathlib import Path

from kip.devkit.internals import reaches
from kip.devkit.layers import Import, imports, modules, repo_root, too_long, upward


def test_no_top_level_package_imports_one_above_it():
    breaches = [f"{i.path}:{i.line}: {i.source} imports {i.target}"
                for i in upward(imports(repo_root()))]
    assert breaches == []


def test_no_module_or_function_is_too_long():
    assert too_long(repo_root()) == []


def test_an_upward_import_and_a_peer_import_are_breaches(tmp_path):
    (tmp_path / "schemas").mkdir()
    (tmp_path / "schemas" / "bad.py").write_text("def f():\n    from kip.workers import x\n")
    (tmp_path / "pipeline").mkdir()
    (tmp_path / "pipeline" / "peer.py").write_text(
        "import kip.workers.lane\nimport kip.schemas\nfrom kip.client import Client\n")
    found = imports(tmp_path)
    assert upward(found) == [Import(Path("pipeline/peer.py"), 1, "pipeline", "workers"),
                             Import(Path("pipeline/peer.py"), 3, "pipeline", "kip"),
                             Import(Path("schemas/bad.py"), 2, "schemas", "workers")]


def test_a_long_function_is_reported(tmp_path):
    (tmp_path / "models").mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(45))
    (tmp_path / "models" / "long.py").write_text(f"def long():\n{body}\n")
    assert too_long(tmp_path) == ["models/long.py:long: 46 lines"]


def test_no_library_internals_outside_the_adapters():
    assert [str(r) for r in reaches(repo_root(), modules(repo_root()))] == []


PLANTED = """\
import aiokafka.producer.sender
from aiokafka import AIOKafkaConsumer
from faust.transport.drivers.aiokafka import Consumer


async def refresh(consumer: AIOKafkaConsumer):
    await consumer._client.force_metadata_update()
    return getattr(consumer, "_fetcher"), type(consumer).__pydantic_serializer__


class Quiet(Consumer):
    async def _commit(self, offsets):
        return self._read_offset


class Mine:
    def __init__(self):
        self._own = 1

    def same(self, other: "Mine"):
        return other._own, self._own
"""


def test_a_library_internal_outside_its_adapter_is_a_breach(tmp_path):
    (tmp_path / "workers").mkdir()
    (tmp_path / "workers" / "planted.py").write_text(PLANTED)
    (tmp_path / "transport").mkdir()
    (tmp_path / "transport" / "aiokafka_adapter.py").write_text(PLANTED)
    found = {(r.line, r.what) for r in reaches(tmp_path, modules(tmp_path))}
    assert found == {
        (1, "import of aiokafka's internal module aiokafka.producer.sender"),
        (3, "import of faust's internal module faust.transport.drivers.aiokafka"),
        (7, "consumer._client"),
        (8, "getattr(..., '_fetcher')"),
        (8, "a library's own __pydantic_serializer__"),
        (12, "Quiet._commit overrides a library's"),
        (13, "self._read_offset"),
    }   # the adapter may; kip's own ``_own`` is no breach

import asyncio

import pytest

from kip.devkit.stack import REFERENCE_MODELS, DevStack
from kip.devkit.own_stack import own_stack


def test_a_service_that_died_is_named_with_the_end_of_its_log(tmp_path):
    stack = DevStack(home=tmp_path, bootstrap_servers="127.0.0.1:1")
    proc = stack.spawn(["no-such-command"], log=lambda *_: None)
    stack.procs.append(proc)
    proc.wait(timeout=60)
    with pytest.raises(RuntimeError, match=r"(?s)kip no-such-command exited with 2.*"
                                           r"invalid choice: 'no-such-command'"):
        stack.check_services()


def test_a_stack_of_its_own_leaves_the_registry_signed_as_it_found_it(registry):
    """Each run of a stack in a temporary home signs the reference models with a key of
    its own; left behind, its signatures would pile up in the registry, and routing to
    or loading a version reads them all."""
    folders = [registry.resolve(alias).path / "signatures" for alias in REFERENCE_MODELS]

    def found() -> list[list[str]]:
        return [sorted(p.name for p in folder.glob("*.json")) for folder in folders]

    before = found()

    async def run() -> None:
        async with own_stack("signs", registry.root, log=lambda *_: None) as stack:
            assert len(stack.signed) == len(REFERENCE_MODELS)
            assert all(path.exists() for path in stack.signed)
    asyncio.run(run())
    assert found() == before

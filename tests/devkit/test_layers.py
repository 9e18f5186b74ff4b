"""The house rules hold on the real tree: no import runs back up, nothing is too long."""

from __future__ import annotations

from pathlib import Path

from devkit.layers import Import, imports, repo_root, too_long, upward


def test_no_top_level_package_imports_one_above_it():
    breaches = [f"{i.path}:{i.line}: {i.source} imports {i.target}"
                for i in upward(imports(repo_root()))]
    assert breaches == []


def test_no_module_or_function_is_too_long():
    assert too_long(repo_root()) == []


def test_an_upward_import_and_a_peer_import_are_breaches(tmp_path):
    (tmp_path / "schemas").mkdir()
    (tmp_path / "schemas" / "bad.py").write_text("def f():\n    from workers import x\n")
    (tmp_path / "pipeline").mkdir()
    (tmp_path / "pipeline" / "peer.py").write_text("import workers.lane\nimport schemas\n")
    found = imports(tmp_path)
    assert upward(found) == [Import(Path("pipeline/peer.py"), 1, "pipeline", "workers"),
                             Import(Path("schemas/bad.py"), 2, "schemas", "workers")]


def test_a_long_function_is_reported(tmp_path):
    (tmp_path / "models").mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(45))
    (tmp_path / "models" / "long.py").write_text(f"def long():\n{body}\n")
    assert too_long(tmp_path) == ["models/long.py:long: 46 lines"]

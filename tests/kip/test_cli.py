"""The ``kip`` command: kip's own commands, plus those the developer tools register."""

from __future__ import annotations

import subprocess
import sys

import pytest

from kip.cli import main, parser


def _subcommands(argv: list[str]) -> set[str]:
    action = next(a for a in parser(argv)._actions if a.choices)
    return set(action.choices)


def test_help_lists_kips_own_commands_and_the_developer_tools():
    assert {"topics", "models", "pipeline", "worker", "kafka", "up", "demo", "bench",
            "faults"} <= _subcommands([])


def test_a_worker_process_does_not_import_the_developer_tools():
    code = ("import sys; from kip.cli import parser; parser(['worker', '--model', 'x']); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'devkit'))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_an_unknown_command_is_refused_with_the_list(capsys):
    with pytest.raises(SystemExit) as exit_:
        parser(["nonsense"]).parse_args(["nonsense"])
    assert exit_.value.code == 2 and "faults" in capsys.readouterr().err


def test_a_bad_setting_is_one_line_naming_the_variable(monkeypatch, capsys):
    monkeypatch.setenv("KIP_LOG_LEVEL", "loud")
    assert main(["topics", "list"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kip: error: KIP_LOG_LEVEL: Input should be") and err.count("\n") == 1

"""Command-line numbers are refused before a bench or the fault harness starts."""

from __future__ import annotations

import argparse

import pytest

from devkit.arguments import count, zero_or_more
from devkit.bench_throughput import add_arguments


def test_counts_start_at_one_and_faults_at_zero():
    assert count("3") == 3 and zero_or_more("0") == 0
    for text, check in (("0", count), ("-1", zero_or_more), ("2.5", count), ("x", count)):
        with pytest.raises(argparse.ArgumentTypeError):
            check(text)


def test_a_bench_refuses_a_negative_count_with_the_argument_named(capsys):
    parser = argparse.ArgumentParser(prog="kip bench throughput")
    add_arguments(parser)
    with pytest.raises(SystemExit):
        parser.parse_args(["--requests", "-5"])
    assert "argument --requests: '-5': expected 1 or more" in capsys.readouterr().err

"""Command-line numbers are refused before a bench or the fault harness starts."""

from __future__ import annotations

import argparse

import pytest

from kip.devkit import bench_load
from kip.devkit.arguments import above_zero, count, fraction, zero_or_above, zero_or_more
from kip.devkit.bench_throughput import add_arguments


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


def test_numbers_are_finite_and_within_their_range():
    assert (above_zero("0.5"), zero_or_above("0"), fraction("1")) == (0.5, 0.0, 1.0)
    for text, check in (("0", above_zero), ("-1", zero_or_above), ("1.5", fraction),
                        ("nan", above_zero), ("inf", zero_or_above), ("x", fraction)):
        with pytest.raises(argparse.ArgumentTypeError):
            check(text)


def test_the_load_bench_refuses_a_negative_duration_before_it_starts(capsys):
    """It used to start a stack, measure capacity for a minute, then fail in asyncio."""
    parser = argparse.ArgumentParser(prog="kip bench load")
    bench_load.add_arguments(parser)
    with pytest.raises(SystemExit):
        parser.parse_args(["--duration", "-1"])
    assert "argument --duration: '-1': expected a number above 0" in capsys.readouterr().err

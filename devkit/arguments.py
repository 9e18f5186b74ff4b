"""Command-line numbers checked before anything starts: a bench given ``--requests -5``
says so, instead of failing minutes later inside its run."""

from __future__ import annotations

import argparse
import math


def count(text: str) -> int:
    """A whole number of at least 1 (requests, rows, processes)."""
    return _whole(text, 1)


def zero_or_more(text: str) -> int:
    """A whole number of at least 0 (faults to inject, requests to warm up with)."""
    return _whole(text, 0)


def above_zero(text: str) -> float:
    """A finite number above 0 (seconds, rates, ratios)."""
    value = _number(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a number above 0")
    return value


def zero_or_above(text: str) -> float:
    """A finite number of at least 0 (a rate where 0 means none, a pause)."""
    value = _number(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: expected 0 or more")
    return value


def fraction(text: str) -> float:
    """A number from 0 to 1 (a share of the requests)."""
    value = _number(text)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a number from 0 to 1")
    return value


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r}: expected a finite number")
    return value


def _whole(text: str, least: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"{text!r}: expected {least} or more")
    return value

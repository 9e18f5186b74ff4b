"""Command-line numbers checked before anything starts: a bench given ``--requests -5``
says so, instead of failing minutes later inside its run."""

from __future__ import annotations

import argparse


def count(text: str) -> int:
    """A whole number of at least 1 (requests, rows, processes)."""
    return _whole(text, 1)


def zero_or_more(text: str) -> int:
    """A whole number of at least 0 (faults to inject, requests to warm up with)."""
    return _whole(text, 0)


def _whole(text: str, least: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"{text!r}: expected {least} or more")
    return value

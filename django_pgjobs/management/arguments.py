"""Argument types shared by the management commands: a bad value is an argparse error, so the
command exits 2 with the message before it touches the database."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TypeVar

N = TypeVar("N", int, float)


def bounded(
    parse: Callable[[str], N], *, low: float, high: float | None = None,
    low_inclusive: bool = True, what: str,
) -> Callable[[str], N]:
    """An argparse ``type=`` accepting ``parse(value)`` within [low, high] (NaN never)."""

    def check(value: str) -> N:
        try:
            n = parse(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {value!r}") from None
        above = n >= low if low_inclusive else n > low
        if not (above and (high is None or n <= high)):  # also false for NaN
            raise argparse.ArgumentTypeError(f"expected {what}, got {value!r}")
        return n

    return check


positive_int = bounded(int, low=1, what="an integer >= 1")
non_negative_int = bounded(int, low=0, what="an integer >= 0")
seconds = bounded(float, low=0, high=1e7, what="seconds >= 0")
positive_seconds = bounded(float, low=0, high=1e7, low_inclusive=False, what="seconds > 0")

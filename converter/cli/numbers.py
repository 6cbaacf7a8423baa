"""Numbers on the command line: whole numbers and physical quantities in a stated range.

``whole(low, high)`` and ``quantity(low, high, unit)`` make ``argparse`` types. A value that is not
written in ASCII decimal (``int`` and ``float`` would take "٣", "1_000", "nan" and "inf"), is not
finite, or is outside its range is a usage error (exit 2) whose message states the range::

    parser.add_argument("--npus", type=whole(1, MAX_NPUS), ...)
    parser.add_argument("--bandwidth", type=quantity(1e-3, 1e6, "GB/s"), ...)

    $ chakra-convert-fast text w.txt out --npus 2000000
    ... argument --npus: must be at most 1,048,576, got 2,000,000
    $ chakra-convert-fast text w.txt out --npus ٣
    ... argument --npus: must be a whole number from 1 to 1,048,576, got '٣'
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable

from ..arguments import MAX_JOBS as MAX_JOBS  # the API's bounds, which the options state
from ..tools.visualize import MAX_NODE_ID as MAX_NODE_ID

_WHOLE = re.compile(r"[+-]?[0-9]+")
_REAL = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
#: Digits enough for any range this module states; a longer number is out of range unread.
_MAX_DIGITS = 400


def whole(low: int, high: int) -> Callable[[str], int]:
    """An ``argparse`` type: a whole number from ``low`` to ``high`` (both included)."""
    stated = f"a whole number from {low:,} to {high:,}"

    def parse(text: str) -> int:
        written = text.strip()
        if not _WHOLE.fullmatch(written) or len(written) > _MAX_DIGITS:
            raise argparse.ArgumentTypeError(f"must be {stated}, got {_quoted(text)}")
        value = int(written)
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low:,}, got {value:,}")
        if value > high:
            raise argparse.ArgumentTypeError(f"must be at most {high:,}, got {value:,}")
        return value

    parse.__name__ = "whole number"  # argparse names the type so in its own messages
    return parse


def quantity(low: float, high: float, unit: str) -> Callable[[str], float]:
    """An ``argparse`` type: a finite decimal number from ``low`` to ``high`` ``unit`` (both
    included), the range a physical quantity of that unit can have."""
    stated = f"a number from {low:g} to {high:g} {unit}".rstrip()

    def parse(text: str) -> float:
        written = text.strip()
        if not _REAL.fullmatch(written) or len(written) > _MAX_DIGITS:
            raise argparse.ArgumentTypeError(f"must be {stated}, got {_quoted(text)}")
        value = float(written)
        if not (math.isfinite(value) and low <= value <= high):
            raise argparse.ArgumentTypeError(f"must be {stated}, got {_quoted(text)}")
        return value

    parse.__name__ = "number"
    return parse


def quantities(low: float, high: float, unit: str) -> Callable[[str], str]:
    """An ``argparse`` type: ``quantity(low, high, unit)`` values separated by commas (one a
    dimension), given back as written (stripped) for the option's own parser."""
    one = quantity(low, high, unit)

    def parse(text: str) -> str:
        parts = text.split(",")
        for part in parts:
            try:
                one(part)
            except argparse.ArgumentTypeError as exc:
                raise argparse.ArgumentTypeError(
                    f"{exc} (in {_quoted(text)})" if len(parts) > 1 else str(exc)
                ) from None
        return ",".join(part.strip() for part in parts)

    parse.__name__ = "numbers"
    return parse


def _quoted(text: str, limit: int = 40) -> str:
    return repr(text) if len(text) <= limit else f"{text[:limit]!r}... ({len(text):,} characters)"

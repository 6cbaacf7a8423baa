"""msgspec where it reads exactly what ``json`` reads, and refuses the rest.

The standard library's scanner builds one value per call; msgspec decodes a whole run of values
per call, into plain objects or into typed structs that skip what the caller never reads. Runs
handed to an ``ExactDecoder`` are decoded by msgspec only where the result is the standard
library's; anything else returns None, and the caller decodes that run with the standard library.

* msgspec refuses ``NaN``/``Infinity``, floats that overflow, lone surrogate escapes and integers
  it cannot hold (refused: the standard library takes over); other numbers come out the same
  (floats are correctly rounded; the tests compare both on hard and random cases); a duplicate
  key keeps the last value, as ``json`` does; keys are unescaped before they are matched.
* msgspec validates the syntax of the values it skips but not two things the standard library
  would fail on there: integers longer than Python's digit limit for ``int(str)``
  (``_has_long_digit_run``) and nesting deeper than the recursion limit (msgspec runs with a
  lower limit than the scanner will).
* the text is a ``str`` decoded by the caller with the strict UTF-8 codec: invalid UTF-8 never
  gets here.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Generic, TypeVar

import msgspec

T = TypeVar("T")
#: Levels of nesting kept in reserve: msgspec runs with the recursion limit lowered by this much,
#: so it refuses (RecursionError) before the standard library, called a few frames deeper, would.
_RECURSION_MARGIN = 64


class ExactDecoder(Generic[T]):
    """``decoder`` (a msgspec JSON decoder) on whole texts; None where ``json`` could differ."""

    def __init__(self, decoder: msgspec.json.Decoder[T]) -> None:
        self._decode = decoder.decode

    def __call__(self, text: str) -> T | None:
        if has_long_digit_run(text):
            return None
        try:
            with _recursion_margin():
                return self._decode(text)
        except (msgspec.DecodeError, RecursionError, ValueError):  # ValidationError is a DecodeError;
            return None  # ValueError: the recursion limit is too low to lower


def has_long_digit_run(text: str) -> bool:
    """True if ``text`` may hold an integer longer than ``int()`` takes (Python's
    ``sys.get_int_max_str_digits``). A run of more than ``limit`` digits covers one of the
    aligned blocks of ``limit // 2`` characters entirely; only blocks that start with a digit
    are looked at, so this costs microseconds per megabyte."""
    get = getattr(sys, "get_int_max_str_digits", None)
    limit = int(get()) if get is not None else 0
    if not limit:
        return False
    block = limit // 2
    for start in range(0, len(text) - block + 1, block):
        if "0" <= text[start] <= "9":
            part = text[start : start + block]
            if part.isascii() and part.isdigit():
                return True
    return False


@contextmanager
def _recursion_margin() -> Iterator[None]:
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(limit - _RECURSION_MARGIN)  # RecursionError if already too deep: refused
    try:
        yield
    finally:
        sys.setrecursionlimit(limit)

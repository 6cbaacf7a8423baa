"""The one home of the package's type aliases (httpx's ``_types.py``): modules import them from here."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeAlias

#: A progress callback, ``(stage, done, total)``: each operation documents its stages (convert's
#: "read" counts input bytes and "write" counts nodes; scale, compact, visualize, jsonize and
#: generate name theirs).
Progress: TypeAlias = Callable[[str, int, int], None]

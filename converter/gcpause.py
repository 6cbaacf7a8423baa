"""Python's cyclic garbage collector paused while a trace is read.

Reading allocates millions of short-lived, acyclic objects; reference counting frees them all,
and the collector's passes over the growing heap would only cost time (a third of a read, measured).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def gc_paused() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()

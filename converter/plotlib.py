"""matplotlib, an optional extra (``pip install 'chakra-convert-fast[plot]'``), imported only when a
plot is drawn (a sweep's, ``compare --plot``, ``memory --plot``): ``import matplotlib.pyplot`` takes
about half a second, which every other command would pay. Without it, a command that draws fails
at once, before any work, with one line saying how to install it."""

from __future__ import annotations

import importlib
from types import ModuleType

from .errors import ConverterError

INSTALL = "the sweep's plot needs matplotlib: pip install 'chakra-convert-fast[plot]'"


def pyplot() -> ModuleType:
    """``matplotlib.pyplot`` on the Agg backend (no display), or a ConverterError saying how to install it."""
    try:
        matplotlib = importlib.import_module("matplotlib")
        matplotlib.use("Agg")
        return importlib.import_module("matplotlib.pyplot")
    except ImportError:
        raise ConverterError(INSTALL) from None

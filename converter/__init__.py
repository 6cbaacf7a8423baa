"""chakra-convert-fast: a streaming, iterative PyTorch -> Chakra execution trace converter.

This package is the public API: everything a user calls (functions, option and result types,
option values, errors) is exported here; its modules are the implementation. ``convert(input,
output)`` writes the same bytes as ``chakra_converter PyTorch`` (mlc-chakra 1.0.0), in a fraction
of its time and memory and without recursion; ``convert_pair``, ``link``, ``convert_all``,
``convert_kineto`` and ``repair`` handle host + Kineto pairs, Kineto traces alone and whole jobs;
``check``, ``scale``, ``compact`` and ``simulate`` prepare and run jobs in ASTRA-sim (see ``api``
for each entry point, ``errors`` for the exception tree).

The package loads lazily (PEP 562): importing it runs nothing but the command line's signal
handling, and the first public name asked for imports ``api`` (and with it the implementation),
so ``chakra-convert-fast --version`` imports a handful of modules and each command only its own.
``api.__all__`` is the one list of the public names; the package exports exactly those.
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType
from typing import TYPE_CHECKING, Any

from . import _early  # noqa: F401 - first: signal handling for the command line's start-up

if TYPE_CHECKING:  # the names as type checkers see them; at run time, __getattr__ imports them
    from .api import *  # noqa: F403
    from .api import __all__ as __all__

#: Public functions named as one of its modules is (``convert()`` and the ``convert/`` front end): the
#: function keeps the package's attribute when the import system binds the module there.
_SHADOWED = frozenset({"check", "compact", "compare", "convert", "link", "repair", "simulate", "text"})


def __getattr__(name: str) -> Any:
    """A public name (or ``__all__``) on first use: imported from ``api`` and kept here."""
    if name != "__all__" and (name.startswith("_") or (name not in _SHADOWED and _is_module(name))):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from . import api  # the implementation, on first use of the public layer

    if name == "__all__":
        return api.__all__
    if name not in api.__all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(api, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    from . import api

    return sorted({*globals(), *api.__all__})


def _is_module(name: str) -> bool:
    """Whether ``name`` is one of this package's modules (the import system asks before it loads one)."""
    return importlib.util.find_spec(f"{__name__}.{name}") is not None


class _Package(ModuleType):
    """This package's module type: a subpackage never takes a public function's name."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _SHADOWED and isinstance(value, ModuleType):
            return  # the subpackage stays in sys.modules, reachable by its full name
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package

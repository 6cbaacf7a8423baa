"""The one layer of argument checks: every entry point of the API (``api``) checks its arguments
here, and the command line calls the API, so both refuse the same values with the same words.

A wrong type is a ``TypeError`` naming the parameter; a value that cannot apply (out of range,
meaningless with another argument) is an ``OptionError`` (also a ``ValueError``) that names the
parameter in backticks, as every library message does (``errors``): the command line shows it
as the flag (``--jobs``), and exits 2 as for its own usage errors. The ranges are the command
line's: its ``argparse`` types (``cli/numbers.py``) take their bounds from the constants here.

Each function returns the value checked (a path as ``str``), so that a caller writes
``jobs=arguments.jobs("jobs", jobs)``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Sequence
from typing import Any, TypeVar

from .errors import OptionError

#: The most processes a command runs at once (``jobs``).
MAX_JOBS = 4096
#: The most ranks a job has (``scale``, ``simulate``'s ``ranks``; a rank is below it).
MAX_RANKS = 1 << 20
#: The highest step number (``ProfilerStep#N``; an int64 in the traces).
MAX_STEP = (1 << 63) - 1

_T = TypeVar("_T")


def path(name: str, value: Any, *, optional: bool = False) -> Any:
    """A path (``str`` or ``os.PathLike[str]``) as ``str``; None when ``optional``."""
    if value is None and optional:
        return None
    if isinstance(value, (str, os.PathLike)):
        text = os.fspath(value)
        if isinstance(text, str):
            return text
    raise TypeError(f"{name} must be a path (str or os.PathLike[str]), got {type(value).__name__}")


def paths(name: str, value: Any) -> list[str]:
    """A list of paths; one path alone (a str is not taken letter by letter) is a list of one."""
    if isinstance(value, (str, os.PathLike)):
        return [path(name, value)]
    if isinstance(value, (bytes, dict)) or not hasattr(value, "__iter__"):
        raise TypeError(f"{name} must be a path or a list of paths, got {type(value).__name__}")
    found = [path(f"{name}[{k}]", item) for k, item in enumerate(value)]
    if not found:
        raise OptionError(f"`{name}`: no file given")
    return found


def whole(name: str, value: Any, low: int | None = None, high: int | None = None, *, optional: bool = True) -> Any:
    """An ``int`` (not a ``bool``) from ``low`` to ``high`` (both included; None: no bound), or None."""
    if value is None and optional:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int{' or None' if optional else ''}, got {type(value).__name__}")
    if (low is not None and value < low) or (high is not None and value > high):
        stated = f"from {low:,} to {high:,}" if low is not None and high is not None else ""
        stated = stated or (f"at least {low:,}" if low is not None else f"at most {high:,}")
        raise OptionError(f"`{name}` {value}: must be {stated}")
    return value


def number(name: str, value: Any, *, positive: bool = False) -> Any:
    """A real number (``int`` or ``float``, not a ``bool``), finite, above 0 when ``positive``; or None."""
    if value is None:
        return None
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise TypeError(f"{name} must be a number or None, got {type(value).__name__}")
    if value != value or value in (float("inf"), float("-inf")) or (positive and value <= 0):
        raise OptionError(f"`{name}` {value}: must be a {'positive' if positive else 'finite'} number")
    return value


def jobs(name: str, value: Any) -> Any:
    """Processes at once: 1 to ``MAX_JOBS``, or None (one per CPU)."""
    return whole(name, value, 1, MAX_JOBS)


def rank(name: str, value: Any) -> Any:
    """A rank: 0 to ``MAX_RANKS`` - 1, or None."""
    return whole(name, value, 0, MAX_RANKS - 1)


def flag(name: str, value: Any) -> bool:
    """A ``bool`` (not a truthy value of another type)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__}")
    return value


def function(name: str, value: Any) -> Any:
    """A callable, or None."""
    if value is not None and not callable(value):
        raise TypeError(f"{name} must be callable or None, got {type(value).__name__}")
    return value


def text(name: str, value: Any, *, optional: bool = True) -> Any:
    """A ``str``, or None when ``optional``."""
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str{' or None' if optional else ''}, got {type(value).__name__}")
    return value


def choice(name: str, value: Any, choices: Collection[str]) -> Any:
    """One of ``choices``."""
    text(name, value, optional=False)
    if value not in choices:
        raise OptionError(f"`{name}` {value!r}: one of {', '.join(choices)}")
    return value


def instance(
    name: str, value: Any, kind: type[_T], default: Callable[[], _T] | None = None, *, called: str | None = None
) -> _T:
    """An instance of ``kind`` (an options class, ``called`` so in the API); None is ``default()``
    when a default is given."""
    if value is None and default is not None:
        return default()
    if not isinstance(value, kind):
        allowed = f"a {called or kind.__name__}" + (" or None" if default is not None else "")
        raise TypeError(f"{name} must be {allowed}, got {type(value).__name__}")
    return value


def tracing_overhead(name: str, value: Any) -> str | float:
    """``auto``, ``none`` (``converter/overhead.py``), or microseconds per recorded op (a real
    number, 0 or more; ``int`` taken as ``float``)."""
    if isinstance(value, str):
        if value in ("auto", "none"):
            return value
        raise OptionError(f"`{name}` {value!r}: must be 'auto', 'none' or microseconds per recorded op")
    number(name, value)
    if value < 0:
        raise OptionError(f"`{name}` {value}: microseconds per recorded op are 0 or more")
    return float(value)


def kinds(name: str, value: Any, known: Sequence[str]) -> frozenset[str]:
    """A collection of names, each one of ``known``."""
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise TypeError(f"{name} must be a collection of str, got {type(value).__name__}")
    found = frozenset(value)
    unknown = sorted(str(k) for k in found - set(known))
    if unknown:
        raise OptionError(f"`{name}`: unknown {', '.join(unknown)} (one of {', '.join(known)})")
    return found


def only_with(given: Sequence[tuple[str, bool]], needs: str, allowed: bool) -> None:
    """Refuse arguments (``given``: each name and whether it was given) that apply only where
    ``allowed`` (``needs`` says when: "with `ranks`")."""
    named = [name for name, present in given if present]
    if named and not allowed:
        listed = ", ".join(f"`{name}`" for name in named)
        raise OptionError(f"{listed} {'is' if len(named) == 1 else 'are'} only {needs}")

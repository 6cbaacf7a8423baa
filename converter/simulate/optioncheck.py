"""``SimulateOptions`` checked as the command line checks its flags: each field's type (a
``TypeError`` naming it) and range (an ``OptionError``, the command line's ranges: ``bounds.py``),
and what cannot apply together (``replay`` with what it ignores). The API (``api.simulate``,
``api.simulate_sweep``) calls ``checked`` before anything is read or run.

``bandwidth`` and ``latency`` are comma lists as the command line writes them; a number, or a
sequence of numbers (one a dimension), is taken too and written as such a list."""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any

from .. import arguments as _args
from ..errors import OptionError
from . import bounds
from .options import SimulateOptions
from .process import BINARIES

_REAL = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_MAX_DIGITS = 400

#: What ``replay`` makes meaningless: every node takes its traced duration, communication included.
_REPLAY_IGNORES = (
    "npus_per_dim",
    "bandwidth",
    "latency",
    "collective",
    "active_chunks",
    "accelerator",
    "peak_tflops",
    "mem_bandwidth",
)


def checked(options: SimulateOptions) -> SimulateOptions:
    """``options`` with every field checked, ``bandwidth`` and ``latency`` as comma lists."""
    _args.text("options.topology", options.topology, optional=False)
    _args.text("options.npus_per_dim", options.npus_per_dim)
    _args.choice("backend", options.backend, tuple(BINARIES))
    for name in ("comm_groups", "astra_sim_bin", "system_config", "network_config", "remote_memory_config"):
        _args.path(f"options.{name}", getattr(options, name), optional=True)
    _args.text("options.accelerator", options.accelerator)
    _args.text("options.collective", options.collective)
    _quantity("peak_tflops", options.peak_tflops, bounds.PEAK_TFLOPS, "TFLOPS")
    _quantity("mem_bandwidth", options.mem_bandwidth, bounds.BANDWIDTH_GBPS, "GB/s")
    _quantity("timeout", options.timeout, bounds.TIMEOUT_S, "s")
    _whole("active_chunks", options.active_chunks, 1, bounds.MAX_ACTIVE_CHUNKS)
    _args.flag("options.check", options.check)
    _args.flag("options.replay", options.replay)
    options = dataclasses.replace(
        options,
        bandwidth=_quantities("bandwidth", options.bandwidth, bounds.BANDWIDTH_GBPS, "GB/s"),
        latency=_quantities("latency", options.latency, bounds.LATENCY_NS, "ns"),
    )
    if options.replay:
        given = [("topology", options.topology != "Ring")]
        given += [(name, getattr(options, name) is not None) for name in _REPLAY_IGNORES]
        _args.only_with(
            given,
            "without `replay` (every node takes its traced duration, communication included: "
            "the network and the roofline would change nothing)",
            False,
        )
    return options


def _whole(name: str, value: Any, low: int, high: int) -> None:
    if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
        raise TypeError(f"options.{name} must be an int or None, got {type(value).__name__}")
    _args.whole(name, value, low, high)


def _quantity(name: str, value: Any, limits: tuple[float, float], unit: str) -> None:
    if value is None:
        return
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise TypeError(f"options.{name} must be a number or None, got {type(value).__name__}")
    if not (math.isfinite(value) and limits[0] <= value <= limits[1]):
        raise OptionError(f"`{name}` {value!r}: must be a number from {limits[0]:g} to {limits[1]:g} {unit}")


def _quantities(name: str, value: Any, limits: tuple[float, float], unit: str) -> str | None:
    """A comma list of numbers in ``limits`` (one a dimension), from a str, a number or a sequence."""
    if value is None:
        return None
    if isinstance(value, str):
        parts = [p.strip() for p in value.split(",")]
        for part in parts:
            number = float(part) if _REAL.fullmatch(part) and len(part) <= _MAX_DIGITS else math.nan
            if not (math.isfinite(number) and limits[0] <= number <= limits[1]):
                raise OptionError(
                    f"`{name}` {_quoted(value)}: {_quoted(part)} is not a number from {limits[0]:g} to "
                    f"{limits[1]:g} {unit} (one a dimension, comma-separated)"
                )
        return ",".join(parts)
    numbers = [value] if isinstance(value, (int, float)) else value
    if isinstance(numbers, (bytes, dict)) or not hasattr(numbers, "__iter__"):
        raise TypeError(
            f"options.{name} must be a str, a number, a sequence of numbers or None, got {type(value).__name__}"
        )
    written = []
    for number in numbers:
        if not isinstance(number, (int, float)) or isinstance(number, bool):
            raise TypeError(f"options.{name} must hold numbers, got {type(number).__name__}")
        _quantity(name, number, limits, unit)
        written.append(repr(float(number)))
    if not written:
        raise OptionError(f"`{name}`: no value given")
    return ",".join(written)


def _quoted(text: str, limit: int = 40) -> str:
    return repr(text) if len(text) <= limit else f"{text[:limit]!r}... ({len(text):,} characters)"

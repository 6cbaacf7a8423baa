"""The user's ASTRA-sim config files read as inputs, like the command line: read once here, every
value ASTRA-sim reads checked against the command line's bounds (``bounds.py``), and ASTRA-sim
given what was read here, written back by us (``json.dumps`` of the system and remote-memory
configs, ``Network.yaml`` of the network), never the user's file itself: both read one network.

* A file is a side input (``io.read_side_input``): a regular file of at most
  ``SIDE_INPUT_LIMIT`` bytes; a FIFO, a device or a folder is refused, never waited on.
* JSON (system, remote memory): a repeated key is refused (which one a reader keeps is the
  reader's choice, and the user meant one of them), as are ``NaN`` and ``Infinity``
  (not JSON: ASTRA-sim's parser aborts on them) and nesting deeper than ``MAX_DEPTH``. Every key
  must be one ASTRA-sim 518bd51 reads (``Sys::initialize_sys``, ``CollectiveImplLookup``, the
  analytical remote memory): a typo would be ignored by it without a word. The switches
  (``roofline-enabled`` ...) are 0 or 1 (``true``/``false`` written as 1/0: ASTRA-sim tests
  ``!= 0``, which a JSON ``false`` passes).
* The network (YAML, ``topology``, ``npus_count``, ``bandwidth``, ``latency``): each key once,
  no other key, a value a list or one scalar (``topology: Ring``, which ASTRA-sim aborts on, is
  written back as a list), whole numbers in plain decimal (yaml-cpp reads ``010`` as octal 8 and
  ``0x10`` as 16: refused, not guessed), real numbers as the command line takes them.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import Any

from ..errors import ConverterError
from ..io.output import read_side_input
from . import bounds

#: The deepest nesting a config may have (ASTRA-sim's are two levels deep).
MAX_DEPTH = 32

_WHOLE = re.compile(r"[+-]?(0|[1-9][0-9]*)")
_REAL = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_MAX_DIGITS = 400


def read_text(path: str, option: str) -> str:
    """The file's text (UTF-8), or a ``ConverterError`` naming ``option`` and the file."""
    data = read_side_input(path, option)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConverterError(f"{option} {path}: not UTF-8 text (byte {exc.start:,})") from None


def read_json_object(path: str, option: str) -> dict[str, Any]:
    """A JSON object read strictly (see the module's words)."""
    text = read_text(path, option)
    depth = _depth(text)
    if depth > MAX_DEPTH:
        raise ConverterError(
            f"{option} {path}: nested {depth:,} levels deep (at most {MAX_DEPTH}): not an ASTRA-sim config"
        )

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        found: dict[str, Any] = {}
        for key, value in items:
            if key in found:
                raise ConverterError(f"{option} {path}: the key {key!r} is given twice: give it once")
            found[key] = value
        return found

    def constant(name: str) -> Any:
        raise ConverterError(f"{option} {path}: {name} is not a JSON number (ASTRA-sim cannot read it)")

    try:
        data = json.loads(text, object_pairs_hook=pairs, parse_constant=constant)
    except (ValueError, RecursionError) as exc:
        raise ConverterError(f"{option} {path}: not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ConverterError(f"{option} {path}: expected a JSON object")
    return data


def _depth(text: str) -> int:
    """The deepest nesting of ``[`` and ``{`` outside strings (a linear scan, no recursion)."""
    deepest = depth = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


# -- the system config ------------------------------------------------------------------------------

Check = Callable[[Any], Any]  # the value as ASTRA-sim will be given it, or ValueError saying what it must be


def _whole(low: int, high: int) -> Check:
    def check(value: Any) -> Any:
        if type(value) is not int or not low <= value <= high:
            raise ValueError(f"must be a whole number from {low:,} to {high:,}")
        return value

    return check


def _real(low: float, high: float, unit: str = "") -> Check:
    def check(value: Any) -> Any:
        if type(value) not in (int, float) or not (math.isfinite(value) and low <= value <= high):
            raise ValueError(f"must be a number from {low:g} to {high:g}{' ' + unit if unit else ''}")
        return value

    return check


def _switch(value: Any) -> Any:
    if type(value) is bool:
        return int(value)
    if type(value) is not int or value not in (0, 1):
        raise ValueError("must be 0 or 1")
    return value


def _one_of(*names: str) -> Check:
    def check(value: Any) -> Any:
        if value not in names:
            raise ValueError(f"must be one of {', '.join(names)}")
        return value

    return check


def _plain_name(value: Any) -> Any:
    if not isinstance(value, str) or not re.fullmatch(r"[A-Za-z0-9_.-]{1,255}", value) or value in (".", ".."):
        raise ValueError("must be a plain file name (letters, digits, '_', '.', '-'; no folder)")
    return value


def _algorithms(value: Any) -> Any:  # the names are checked against the network by setup.py
    if not (
        isinstance(value, list) and 1 <= len(value) <= bounds.MAX_DIMENSIONS and all(isinstance(v, str) for v in value)
    ):
        raise ValueError(f"must be a list of 1 to {bounds.MAX_DIMENSIONS} algorithm names")
    return value


#: Every key of the system config ASTRA-sim 518bd51 reads (``Sys::initialize_sys`` and the
#: collective lookup), with what it may hold. ``boost-mode`` is in ASTRA-sim's examples (and ours)
#: and read by nothing; the ``*-custom`` implementations (Chakra files of their own) are not taken.
SYSTEM_KEYS: dict[str, Check] = {
    "scheduling-policy": _one_of("LIFO", "FIFO", "EXPLICIT"),
    "collective-optimization": _one_of("baseline", "localBWAware"),
    "local-reduction-delay": _whole(0, bounds.MAX_DELAY_CYCLES),
    "active-chunks-per-dimension": _whole(1, bounds.MAX_ACTIVE_CHUNKS),
    "L": _real(0, bounds.MAX_DELAY_CYCLES),
    "o": _real(0, bounds.MAX_DELAY_CYCLES),
    "g": _real(0, bounds.MAX_DELAY_CYCLES),
    "G": _real(0, bounds.MAX_DELAY_CYCLES),
    "endpoint-delay": _whole(0, bounds.MAX_DELAY_CYCLES),
    "model-shared-bus": _switch,
    "preferred-dataset-splits": _whole(1, bounds.MAX_DATASET_SPLITS),
    "peak-perf": _real(*bounds.PEAK_TFLOPS, "TFLOPS"),
    "local-mem-bw": _real(*bounds.BANDWIDTH_GBPS, "GB/s"),
    "roofline-enabled": _switch,
    "trace-enabled": _switch,
    "replay-only": _switch,
    "track-local-mem": _switch,
    "local-mem-trace-filename": _plain_name,
    "boost-mode": _switch,
    "all-reduce-implementation": _algorithms,
    "all-gather-implementation": _algorithms,
    "reduce-scatter-implementation": _algorithms,
    "all-to-all-implementation": _algorithms,
}

#: The analytical remote memory's keys.
REMOTE_MEMORY_KEYS: dict[str, Check] = {
    "memory-type": _one_of(
        "NO_MEMORY_EXPANSION", "PER_NODE_MEMORY_EXPANSION", "PER_NPU_MEMORY_EXPANSION", "MEMORY_POOL"
    ),
    "remote-mem-latency": _real(0, bounds.LATENCY_NS[1], "ns"),
    "remote-mem-bw": _real(*bounds.BANDWIDTH_GBPS, "GB/s"),
    "num-nodes": _whole(1, bounds.MAX_RANKS),
    "num-npus-per-node": _whole(1, bounds.MAX_RANKS),
}


def checked(data: dict[str, Any], keys: dict[str, Check], option: str, path: str) -> dict[str, Any]:
    """``data`` with every value checked (and normalised: a switch's ``true`` is 1); an unknown
    key or a value out of its range is a ``ConverterError`` naming the key."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        check = keys.get(key)
        if check is None:
            raise ConverterError(
                f"{option} {path}: unknown key {_quoted(key)} (ASTRA-sim would ignore it without a word; "
                f"the keys it reads: {', '.join(keys)})"
            )
        try:
            out[key] = check(value)
        except ValueError as exc:
            raise ConverterError(f"{option} {path}: {key} {_shown(value)}: {exc}") from None
    return out


def _quoted(text: str, limit: int = 40) -> str:
    return repr(text) if len(text) <= limit else f"{text[:limit]!r}... ({len(text):,} characters)"


def _shown(value: Any, limit: int = 40) -> str:
    text = json.dumps(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


# -- the network file -------------------------------------------------------------------------------

NETWORK_KEYS = ("topology", "npus_count", "bandwidth", "latency")


def network_fields(text: str, path: str) -> dict[str, list[str]]:
    """The flat YAML of ASTRA-sim's network files: ``key: [ a, b ]``, ``key: a`` or a block list
    (``key:`` then ``- a`` lines); comments after ``#``. Each key once, and only the four keys."""
    option = "`network_config`"
    fields: dict[str, list[str]] = {}
    current: str | None = None
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].rstrip()
        if not line.strip():
            continue
        stripped = line.strip()
        if stripped.startswith("- ") and current is not None and line[0] in " -":
            fields[current].append(_unquoted(stripped[2:]))
            continue
        key, colon, value = stripped.partition(":")
        if not colon or line[0] == " ":
            raise ConverterError(f"{option} {path}: line {number}: expected 'key: [ values ]'")
        key, value = key.strip(), value.strip()
        if key not in NETWORK_KEYS:
            raise ConverterError(
                f"{option} {path}: line {number}: unknown key {_quoted(key)} (ASTRA-sim's analytical network "
                f"reads {', '.join(NETWORK_KEYS)}; it would ignore any other without a word)"
            )
        if key in fields:
            raise ConverterError(f"{option} {path}: line {number}: {key} is given twice: give it once")
        if value.startswith("["):
            if not value.endswith("]"):
                raise ConverterError(f"{option} {path}: line {number}: a list must close on its line")
            items = [_unquoted(v) for v in value[1:-1].split(",")]
            if items == [""]:
                items = []
            if "" in items:
                raise ConverterError(f"{option} {path}: line {number}: an empty value in {key}'s list")
            fields[key], current = items, None
        elif value:
            fields[key], current = [_unquoted(value)], None
        else:
            fields[key], current = [], key
    return fields


def _unquoted(text: str) -> str:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    return text


def whole_value(text: str, key: str, path: str, low: int, high: int) -> int:
    """A whole number of the network file, in plain decimal (no leading zero: yaml-cpp would read
    ``010`` as 8), from ``low`` to ``high``."""
    if not _WHOLE.fullmatch(text) or len(text) > _MAX_DIGITS:
        hint = " (yaml-cpp, ASTRA-sim's reader, takes a leading 0 for octal, 0x for hex: write it without)"
        hint = hint if text.lstrip("+-")[:1] == "0" else ""
        raise ConverterError(
            f"`network_config` {path}: {key} {_quoted(text)}: not a whole number in plain decimal{hint}"
        )
    value = int(text)
    if not low <= value <= high:
        raise ConverterError(f"`network_config` {path}: {key} {value:,}: must be from {low:,} to {high:,}")
    return value


def real_value(text: str, key: str, path: str, limits: tuple[float, float], unit: str) -> float:
    """A real number of the network file, as the command line takes it (ASCII decimal, finite, in range)."""
    value = float(text) if _REAL.fullmatch(text) and len(text) <= _MAX_DIGITS else math.nan
    if not (math.isfinite(value) and limits[0] <= value <= limits[1]):
        raise ConverterError(
            f"`network_config` {path}: {key} {_quoted(text)}: must be a number from "
            f"{limits[0]:g} to {limits[1]:g} {unit}"
        )
    return value

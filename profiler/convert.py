"""Turn a rank's captured traces into ``{name}.{rank}.et`` with this project's converter.

The linker (``converter.api_link.convert_pair``) joins host and device traces when it exists;
until then the host trace is converted alone with ``converter.convert``. ``reference`` runs
mlc-chakra's converter instead, for comparison or while the project's own one is missing.
"""

from __future__ import annotations

import importlib
import sys
import threading
from pathlib import Path
from typing import Any

CONVERTERS = ("fast", "reference")


class ConverterUnavailable(RuntimeError):
    """The chosen converter cannot be imported here."""


def et_path(outdir: Path, name: str, rank: int) -> Path:
    """Chakra's own naming: one ``{name}.{rank}.et`` per rank, as simulators expect."""
    return outdir / f"{name}.{rank}.et"


def _import(module: str, attr: str) -> Any | None:
    """``module.attr``, or None when the module or the attribute does not exist yet."""
    try:
        return getattr(importlib.import_module(module), attr, None)
    except ModuleNotFoundError as e:
        if e.name is not None and module.startswith(e.name):
            return None
        raise


def convert_fast(host: Path, device: Path, out: Path, rank: int) -> dict[str, Any]:
    """Link and convert with the project's converter; the host trace alone until the linker lands."""
    convert_pair = _import("converter.api_link", "convert_pair")
    if convert_pair is not None:
        pair = convert_pair(str(host), str(device), str(out), rank=rank)
        return {"linked": True, "nodes_written": pair.conversion.nodes_written,
                "warnings": list(pair.link.warnings)}
    convert = _import("converter", "convert")
    if convert is None:
        raise ConverterUnavailable(
            "the project's converter (converter.convert) is not importable; install the project "
            "with `pip install -e .` or pass --converter reference"
        )
    return {"linked": False, "nodes_written": convert(str(host), str(out)).nodes_written, "warnings": []}


def convert_reference(host: Path, out: Path) -> None:
    """mlc-chakra's PyTorchConverter, in a thread with a deep stack because it recurses per node."""
    try:
        from chakra.src.converter.pytorch_converter import PyTorchConverter
    except ImportError as e:
        raise ConverterUnavailable(f"the reference converter (mlc-chakra) is not importable: {e}") from e
    errors: list[BaseException] = []

    def work() -> None:
        try:
            PyTorchConverter().convert(str(host), str(out), False)
        except BaseException as e:  # re-raised in the caller's thread below
            errors.append(e)

    old_limit, old_stack = sys.getrecursionlimit(), threading.stack_size()
    sys.setrecursionlimit(max(old_limit, 1_000_000))
    threading.stack_size(512 * 1024 * 1024)
    try:
        thread = threading.Thread(target=work, name="reference-converter")
        thread.start()
        thread.join()
    finally:
        threading.stack_size(old_stack)
        sys.setrecursionlimit(old_limit)
    if errors:
        raise errors[0]


def ensure_available(converter: str) -> None:
    """Fail before training rather than after it when the chosen converter is missing."""
    if converter == "fast":
        if _import("converter.api_link", "convert_pair") is None and _import("converter", "convert") is None:
            raise ConverterUnavailable(
                "the project's converter (converter.convert) is not importable; install the project "
                "with `pip install -e .` or pass --converter reference"
            )
    elif converter == "reference":
        if _import("chakra.src.converter.pytorch_converter", "PyTorchConverter") is None:
            raise ConverterUnavailable("the reference converter (mlc-chakra) is not importable")
    else:
        raise ValueError(f"unknown converter {converter!r}; expected one of {CONVERTERS}")


def convert_rank(host: Path, device: Path, out: Path, rank: int, converter: str = "fast") -> dict[str, Any]:
    """Write ``out`` for one rank; returns whether it was linked, the node count, link warnings."""
    if converter == "fast":
        return convert_fast(host, device, out, rank)
    if converter == "reference":
        convert_reference(host, out)
        return {"linked": False, "nodes_written": None, "warnings": []}
    raise ValueError(f"unknown converter {converter!r}; expected one of {CONVERTERS}")

"""Turn a rank's captured traces into ``{name}.{rank}.et``, with this project's converter or the reference's.

Both converters get the same input, so their outputs can be compared byte for byte:

* ``fast``: this project links the host and Kineto traces and converts the merged nodes in one
  process (``chakra_convert_fast.converter.convert_pair``);
* ``reference``: this project's linker writes the merged trace (``{name}.{rank}.merged.json``;
  the reference linker needs et_replay, which is not on PyPI) and mlc-chakra's
  ``chakra_converter`` converts it (``fixtures.reference``: a big stack, as it recurses per node).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from chakra_convert_fast.converter import api
from chakra_convert_fast.fixtures import reference

CONVERTERS = ("fast", "reference")


class ConverterUnavailable(RuntimeError):
    """The chosen converter cannot run here."""


def et_path(outdir: Path, name: str, rank: int) -> Path:
    """Chakra's own naming: one ``{name}.{rank}.et`` per rank, as simulators expect."""
    return outdir / f"{name}.{rank}.et"


def ensure_available(converter: str) -> None:
    """Fail before training rather than after it when the chosen converter cannot run."""
    if converter not in CONVERTERS:
        raise ValueError(f"unknown converter {converter!r}; expected one of {CONVERTERS}")
    if converter == "reference" and not reference.AVAILABLE:
        raise ConverterUnavailable(
            "the reference converter needs mlc-chakra: pip install --no-deps mlc-chakra==1.0.0 protobuf"
        )


def convert_rank(host: Path, device: Path, out: Path, rank: int, converter: str = "fast") -> dict[str, Any]:
    """Write ``out`` for one rank; returns the node count and the link's warnings."""
    ensure_available(converter)
    if converter == "fast":
        pair = api.convert_pair(host, device, out, rank=rank)
        return {"nodes_written": pair.conversion.nodes_written, "warnings": list(pair.link.warnings)}
    merged = out.with_suffix(".merged.json")
    linked = api.link(host, device, merged, rank=rank)
    reference.reference_convert(merged, out)
    return {"nodes_written": None, "warnings": list(linked.warnings), "merged": str(merged)}

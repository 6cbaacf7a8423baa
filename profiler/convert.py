"""Turn a rank's captured traces into ``{name}.{rank}.et``, with this project's converter or the reference's.

Both converters get the same input, so their outputs can be compared:

* ``fast``: this project links the host and Kineto traces and converts the merged nodes in one
  process (``chakra_convert_fast.converter.convert_pair``), for ASTRA-sim (``--astra-sim``: the
  files run in the simulator, gloo collectives included); ``comm_groups`` writes the job's
  ``--comm-group-configuration``;
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


def comm_group_path(outdir: Path, name: str) -> Path:
    """Where the job's communicator groups go: ``COMM_GROUPS=... simulate.sh {outdir}/{name} N``."""
    return Path(api.comm_group_path(outdir / name))


def convert_rank(
    host: Path | None,
    device: Path,
    out: Path,
    rank: int,
    converter: str = "fast",
    *,
    astra_sim: bool = True,
    compact: bool = False,
    roofline: bool = False,
    target: str = "captured",
) -> dict[str, Any]:
    """Write ``out`` for one rank; returns the node count and the link's warnings. The fast
    converter writes ASTRA-sim's variant unless ``astra_sim`` is False (the reference's bytes),
    compacted with ``compact`` (docs/compact.md), with the roofline's fields with ``roofline``
    and its compute nodes as accelerator ops with ``target="accelerator"`` (docs/roofline.md).
    Without a ``host`` trace the Kineto trace alone is converted (docs/kineto.md): ASTRA-sim's
    variant, the last traced step. ASTRA-sim's variants take the profiler's time out
    (docs/overhead.md): ``tracing_overhead`` says what was removed."""
    ensure_available(converter)
    if host is None:
        kineto = api.convert_kineto(device, out, rank=rank)
        return {
            "nodes_written": kineto.nodes,
            "comm_nodes": kineto.comm_nodes,
            "astra_sim": True,
            "kineto_only": True,
            "step": kineto.step,
            "measured_us": kineto.measured_us,
            "tracing_overhead": kineto.overhead.line() if kineto.overhead is not None else None,
            "warnings": list(kineto.warnings),
        }
    if converter == "fast":
        options = api.ConvertOptions(astra_sim=astra_sim, rank=rank, compact=compact, roofline=roofline, target=target)
        pair = api.convert_pair(host, device, out, options, rank=rank)
        conversion = pair.conversion
        nodes = conversion.nodes_written if conversion.compaction is None else conversion.compaction.nodes_written
        return {
            "nodes_written": nodes,
            "comm_nodes": conversion.comm_nodes,
            "astra_sim": astra_sim,
            "compact": compact,
            "roofline": roofline,
            "target": target,
            "tracing_overhead": conversion.overhead.line() if conversion.overhead is not None else None,
            "warnings": list(pair.link.warnings),
        }
    merged = out.with_suffix(".merged.json")
    linked = api.link(host, device, merged, rank=rank)
    reference.reference_convert(merged, out)
    return {"nodes_written": None, "astra_sim": False, "warnings": list(linked.warnings), "merged": str(merged)}


def comm_groups(devices: list[Path], out: Path) -> dict[str, list[int]]:
    """Write ASTRA-sim's communicator groups for the job (its ranks' Kineto traces) to ``out``."""
    return api.write_comm_groups(devices, out).groups

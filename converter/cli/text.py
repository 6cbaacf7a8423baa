"""``text`` (ASTRA-sim 1.0 text workloads -> one .et per NPU) and ``Text``, chakra_converter's form."""

from __future__ import annotations

import argparse
from typing import Any

from .. import api
from ..text.convert import MAX_NPUS, MAX_PASSES
from ..text.convert import uses_file as text_uses
from .common import PROG, add_output_options, declare, subcommand
from .numbers import whole
from .progress import ProgressBars
from .report import Reporter

_NPUS = whole(1, MAX_NPUS)
_PASSES = whole(0, MAX_PASSES)


def add(commands: Any) -> None:
    parser = subcommand(
        commands,
        "text",
        "convert an ASTRA-sim 1.0 text workload into a .et file per NPU "
        "(OUT_PREFIX.<npu>.et), as chakra_converter Text does, and the types it refuses",
        f"  {PROG} text Resnet50_DataParallel.txt et/resnet50 --npus 64\n"
        f"  {PROG} text gpt3.txt et/gpt3 --npus 64 --passes 2     "
        "(HYBRID_TRANSFORMER_FWD_IN_BCKWD: also writes et/gpt3.comm_group.json)\n",
    )
    parser.add_argument("input", metavar="INPUT", help="the workload: a text file (DATA, HYBRID_TRANSFORMER, ...)")
    parser.add_argument("output", metavar="OUT_PREFIX", help="write OUT_PREFIX.0.et ... OUT_PREFIX.<N-1>.et")
    parser.add_argument(
        "--npus", type=_NPUS, required=True, metavar="N", help=f"number of NPUs: one file each (at most {MAX_NPUS:,})"
    )
    parser.add_argument(
        "--passes", type=_PASSES, default=1, metavar="P", help=f"training passes (default 1, at most {MAX_PASSES:,})"
    )
    _add_first_dim(parser)
    add_output_options(parser)
    parser.set_defaults(run=_run)

    reference = subcommand(
        commands,
        "Text",
        "chakra_converter Text's own command line, accepted as is",
        f"  {PROG} --log-filename convert.log Text --input DLRM_HybridParallel.txt --output et/dlrm "
        "--num-npus 8 --num-passes 1\n",
    )
    reference.add_argument("--input", required=True, metavar="INPUT", help="the workload text file")
    reference.add_argument("--output", required=True, metavar="OUT_PREFIX", help="write OUT_PREFIX.<npu>.et")
    reference.add_argument(
        "--num-npus",
        dest="npus",
        type=_NPUS,
        required=True,
        metavar="N",
        help=f"number of NPUs: one file each (at most {MAX_NPUS:,})",
    )
    reference.add_argument(
        "--num-passes",
        dest="passes",
        type=_PASSES,
        required=True,
        metavar="P",
        help=f"training passes (at most {MAX_PASSES:,})",
    )
    _add_first_dim(reference)
    add_output_options(reference)
    reference.set_defaults(run=_run)
    for one in (parser, reference):
        declare(one, ("input", "output"), uses_file=lambda path, args: text_uses(path, args.output, args.npus))


def _add_first_dim(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--first-dim",
        type=_NPUS,
        metavar="K",
        help="HYBRID_CUSTOMIZED: NPUs in the network's first dimension (default: all N, a "
        "one-dimensional network); its layers' HYBRID_DATA_MODEL/HYBRID_MODEL_DATA "
        "collectives span that dimension or the others",
    )


def _run(args: argparse.Namespace, reporter: Reporter) -> int:
    with ProgressBars(reporter.shows_progress and args.npus > 8) as bars:
        result = api.text(
            args.input, args.output, args.npus, args.passes, first_dim=args.first_dim, progress=bars.progress
        )
    last = f"..{result.npus - 1}" if result.npus > 1 else ""
    reporter.info(
        f"wrote {args.output}.{{0{last}}}.et: {result.npus:,} file(s) of {result.nodes_per_npu:,} nodes "
        f"({result.kind}, {result.layers:,} layers, {result.passes:,} pass(es); {result.bytes_written:,} bytes) "
        f"in {result.seconds:.2f} s"
    )
    if not result.reference_type:
        reporter.info(
            f"note: chakra_converter refuses {result.kind}; laid out as ASTRA-sim 1.0 ran it (see docs/text.md)"
        )
    if result.comm_group_path is not None:
        reporter.info(
            f"wrote {result.comm_group_path}: the communicator groups its collectives span; give it to "
            f"ASTRA-sim as --comm-group-configuration={result.comm_group_path}"
        )
    return 0

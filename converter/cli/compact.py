"""``compact``: .et files rewritten with fewer nodes for ASTRA-sim, the same simulated time."""

from __future__ import annotations

import argparse
import os
from typing import Any

from .. import api
from ..memory.job import copy_sidecar
from .common import PROG, add_output_options, declare, subcommand
from .progress import ProgressBars
from .report import Reporter


def add(commands: Any) -> None:
    parser = subcommand(
        commands,
        "compact",
        "rewrite .et files for ASTRA-sim with fewer nodes and the same simulated time: redundant dependencies "
        "dropped, runs of compute nodes merged (summed durations, num_ops, tensor_size)",
        f"  {PROG} compact out.0.et out.0.compact.et\n"
        f"  {PROG} compact et/trace et/compact   # every rank: et/trace.<r>.et -> et/compact.<r>.et\n",
    )
    parser.add_argument("input", metavar="IN", help="a .et file, or the prefix of <prefix>.<rank>.et files")
    parser.add_argument(
        "output",
        metavar="OUT",
        help="the .et file to write, or the prefix of the ranks' files (the same as IN compacts in place)",
    )
    add_output_options(parser)
    parser.set_defaults(run=_run_compact)
    declare(parser, ("input", "output"))


def _run_compact(args: argparse.Namespace, reporter: Reporter) -> int:
    if os.path.lexists(args.input) and not os.path.isdir(args.input):  # one file (a FIFO is refused as one)
        with ProgressBars(reporter.shows_progress) as bars:
            result = api.compact(args.input, args.output, progress=bars.progress)
        reporter.compaction(result)
        copy_sidecar(args.input, args.output)
        return 0
    results = api.compact_ranks(args.input, args.output, on_rank_done=reporter.compaction)
    for r in range(len(results)):  # compacting changes no tensor: the same memory (docs/memory.md)
        copy_sidecar(f"{args.input}.{r}.et", f"{args.output}.{r}.et")
    before, after = sum(r.nodes_read for r in results), sum(r.nodes_written for r in results)
    reporter.info(f"compacted {len(results)} rank(s): {after:,} nodes from {before:,}")
    return 0

"""``visualize``: a ``.et`` file as a graph (DOT, GraphML; PDF/SVG through graphviz), with cuts."""

from __future__ import annotations

import argparse
from typing import Any

from .. import api
from ..tools.visualize import MAX_DEPTH
from .common import PROG, add_output_options, declare, subcommand
from .jsonize import paths
from .numbers import MAX_NODE_ID, whole
from .progress import ProgressBars
from .report import Reporter


def add(commands: Any) -> None:
    parser = subcommand(
        commands,
        "visualize",
        "draw a .et trace as a graph (replaces chakra_visualizer): .dot, .graphml, or .pdf/.svg with graphviz",
        f"  {PROG} visualize trace.0.et trace.0.graphml\n"
        f"  {PROG} visualize trace.0.et part.dot --ids 100:300\n"
        f"  {PROG} visualize trace.0.et near.svg --around 1234 --depth 3\n"
        f"  {PROG} visualize trace.0.et comms.graphml --collectives --depth 1\n"
        f"  {PROG} visualize --input_filename trace.0.et --output_filename g.graphml   (chakra_visualizer's form)\n",
    )
    parser.add_argument("input", nargs="?", metavar="IN.et", help="Chakra trace (.et, plain or gzipped)")
    parser.add_argument(
        "output",
        nargs="?",
        metavar="OUT",
        help="the graph: .dot or .graphml (streamed), .pdf or .svg (needs graphviz's dot)",
    )
    parser.add_argument("--input_filename", dest="input_option", metavar="IN.et", help=argparse.SUPPRESS)
    parser.add_argument("--output_filename", dest="output_option", metavar="OUT", help=argparse.SUPPRESS)
    cuts = parser.add_argument_group("cuts (default: the whole trace)").add_mutually_exclusive_group()
    cuts.add_argument(
        "--ids",
        metavar="FIRST:LAST",
        type=_id_range,
        help="only the nodes with FIRST <= id <= LAST, and the edges between them",
    )
    cuts.add_argument(
        "--around",
        metavar="ID",
        type=_node_id,
        help="only node ID and the nodes within --depth dependency hops of it, either way",
    )
    cuts.add_argument(
        "--collectives",
        action="store_true",
        help="only the collective, send and receive nodes and the nodes depending on them within --depth hops",
    )
    parser.add_argument(
        "--depth", type=_depth, metavar="N", help="hops for --around (default 2) and --collectives (default 1)"
    )
    parser.add_argument(
        "--laid-out",
        action="store_true",
        help="a .dot laid out by graphviz's dot (positions added), as chakra_visualizer writes "
        "it; needs dot (by default .dot is the graph's statements, which need nothing)",
    )
    add_output_options(parser)
    parser.set_defaults(run=_run)
    declare(parser, ("input", "input_option", "output", "output_option"))


_node_id = whole(0, MAX_NODE_ID)
_depth = whole(0, MAX_DEPTH)


def _id_range(text: str) -> tuple[int, int]:
    first, colon, last = text.partition(":")
    if not colon:
        raise argparse.ArgumentTypeError(f"expected FIRST:LAST, got {text!r}")
    low, high = _node_id(first) if first else 0, _node_id(last) if last else MAX_NODE_ID
    if low > high:
        raise argparse.ArgumentTypeError(f"FIRST is above LAST in {text!r}")
    return low, high


def _run(args: argparse.Namespace, reporter: Reporter) -> int:
    source, target = paths(args, "graph")
    args.input, args.output = source, target  # for the log file's checks
    if args.depth is not None and not (args.around is not None or args.collectives):
        args.usage_error("--depth goes with --around or --collectives")
    cut = api.GraphCut(
        ids=args.ids,
        around=None if args.around is None else (args.around, 2 if args.depth is None else args.depth),
        collectives=(1 if args.depth is None else args.depth) if args.collectives else None,
    )
    with ProgressBars(reporter.shows_progress) as bars:
        result = api.visualize(source, target, cut, bars.progress, laid_out=args.laid_out)
    part = "" if cut.whole else f" of {result.total_nodes:,}"
    reporter.info(f"wrote {result.output_path}: {result.nodes:,}{part} nodes, {result.edges:,} edges ({result.format})")
    if result.format in ("dot", "pdf", "svg") and result.nodes > 5000:
        reporter.warning(
            f"{result.nodes:,} nodes are more than graphviz lays out in reasonable time or a "
            "person can read: cut the trace (--ids, --around, --collectives) or write .graphml"
        )
    return 0

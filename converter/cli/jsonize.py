"""``jsonize``: a ``.et`` file as JSON (one document, one object a line, or chakra_jsonizer's bytes)."""

from __future__ import annotations

import argparse
from typing import Any

from .. import api
from .common import PROG, add_output_options, declare, subcommand
from .numbers import MAX_JOBS, whole
from .progress import ProgressBars
from .report import Reporter


def add(commands: Any) -> None:
    parser = subcommand(
        commands,
        "jsonize",
        "write a .et trace as JSON (replaces chakra_jsonizer), streamed in flat memory",
        f"  {PROG} jsonize trace.0.et trace.0.json\n"
        f"  {PROG} jsonize trace.0.et trace.0.jsonl --lines\n"
        f"  {PROG} jsonize trace.0.et same_as_chakra_jsonizer.json --chakra-format\n"
        f"  {PROG} jsonize --input_filename trace.0.et --output_filename out.json   (chakra_jsonizer's form)\n",
    )
    parser.add_argument("input", nargs="?", metavar="IN.et", help="Chakra trace (.et, plain or gzipped)")
    parser.add_argument("output", nargs="?", metavar="OUT.json")
    parser.add_argument("--input_filename", dest="input_option", metavar="IN.et", help=argparse.SUPPRESS)
    parser.add_argument("--output_filename", dest="output_option", metavar="OUT.json", help=argparse.SUPPRESS)
    layout = parser.add_mutually_exclusive_group()
    layout.add_argument(
        "--lines",
        dest="layout",
        action="store_const",
        const="lines",
        help="one JSON object a line: the GlobalMetadata first, then one node a line",
    )
    layout.add_argument(
        "--chakra-format",
        dest="layout",
        action="store_const",
        const="chakra",
        help="exactly what chakra_jsonizer writes (indented objects concatenated: not one JSON document)",
    )
    parser.set_defaults(layout="document")
    parser.add_argument(
        "-j",
        "--jobs",
        type=whole(1, MAX_JOBS),
        metavar="N",
        help="processes printing a large plain .et, a run of records each (default: CPU count)",
    )
    add_output_options(parser)
    parser.set_defaults(run=_run)
    declare(parser, ("input", "input_option", "output", "output_option"))


def paths(args: argparse.Namespace, what: str) -> tuple[str, str]:
    """IN and OUT, given as positionals or as chakra's ``--input_filename``/``--output_filename``."""
    source = args.input_option or args.input
    target = args.output_option or args.output
    extra = args.output if args.input_option and not args.output_option else None
    if not source or not target or extra or (args.input_option and args.input and not args.output_option):
        args.usage_error(f"give the input .et and the output {what} (or --input_filename and --output_filename)")
    return source, target


def _run(args: argparse.Namespace, reporter: Reporter) -> int:
    source, target = paths(args, "file")
    args.input, args.output = source, target  # for the log file's checks
    with ProgressBars(reporter.shows_progress) as bars:
        result = api.jsonize(source, target, args.layout, bars.progress, args.jobs)
    reporter.info(f"wrote {result.output_path}: {result.nodes:,} nodes ({result.layout} layout)")
    return 0

"""``link``: host + Kineto -> the merged JSON chakra_trace_link writes."""

from __future__ import annotations

import argparse
from typing import Any

from .. import api
from .common import PROG, add_output_options, declare, subcommand
from .conversion import add_pair_options, pair_steps
from .report import Reporter


def add(commands: Any) -> None:
    _add_link(commands)


def _add_link(commands: Any) -> None:
    parser = subcommand(
        commands,
        "link",
        "merge a host trace with its Kineto trace (what chakra_trace_link writes)",
        f"  {PROG} link --host rank0_host.json --device rank0_device.json merged.json.gz\n"
        f"  {PROG} link --chakra-host-trace H --chakra-device-trace D --output-file M  (its own form)\n",
    )
    parser.add_argument("output", nargs="?", metavar="OUTPUT", help="merged JSON to write (.gz: gzipped)")
    parser.add_argument("--output-file", dest="output_file", metavar="OUTPUT", help=argparse.SUPPRESS)
    add_pair_options(parser, required=True)
    add_output_options(parser)
    parser.set_defaults(run=_run_link)
    declare(parser, ("host", "device", "output", "output_file"), commits=lambda args: 1)


def _run_link(args: argparse.Namespace, reporter: Reporter) -> int:
    output = args.output if args.output is not None else args.output_file
    if output is None or (args.output_file is not None and args.output_file != output):
        args.usage_error("give the merged output once: OUTPUT (or --output-file OUTPUT)")
    result = api.link(
        args.host, args.device, output, rank=args.rank, allow_mismatch=args.allow_mismatch, steps=pair_steps(args)
    )
    reporter.link(result)
    reporter.info(f"wrote {output}: {result.nodes_written:,} nodes in {result.seconds:.2f} s")
    return 0

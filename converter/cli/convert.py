"""``convert`` (one trace, or a host + device pair) and ``PyTorch``, chakra_converter's own form."""

from __future__ import annotations

import argparse
from typing import Any

from .. import api
from .common import (
    PROG,
    add_conversion_options,
    add_jobs_option,
    add_output_options,
    add_pair_options,
    conversion_options,
    subcommand,
)
from .report import ProgressBars, Reporter

COMMANDS = ('convert', 'PyTorch')


def add(commands: Any) -> None:
    _add_convert(commands)
    _add_reference_form(commands)


def _add_convert(commands: Any) -> None:
    parser = subcommand(
        commands, "convert", "convert a merged or host trace, or a host + device pair, into a .et file",
        f"  {PROG} convert merged.json.gz out.et --break-cycles\n"
        f"  {PROG} convert --host rank0_host.json --device rank0_device.json out.0.et\n",
    )
    parser.usage = ("%(prog)s [options] INPUT OUTPUT\n"
                    "       %(prog)s [options] --host HOST --device DEVICE OUTPUT")
    parser.add_argument("paths", nargs="+", metavar="[INPUT] OUTPUT",
                        help="INPUT OUTPUT, or only OUTPUT with --host and --device")
    add_pair_options(parser, required=False)
    parser.add_argument("--keep-merged", metavar="PATH", help="with --host/--device: also write the merged JSON")
    add_jobs_option(parser)
    add_conversion_options(parser)
    add_output_options(parser)
    parser.set_defaults(run=_run_convert)


def _add_reference_form(commands: Any) -> None:
    parser = subcommand(
        commands, "PyTorch", "chakra_converter's own command line, accepted as is",
        f"  {PROG} --log-filename convert.log PyTorch --input merged.json --output out.et\n",
    )
    parser.add_argument("--input", required=True, metavar="INPUT", help="merged or host trace, .json or .json.gz")
    parser.add_argument("--output", required=True, metavar="OUTPUT", help="Chakra trace to write (.et)")
    add_jobs_option(parser)
    add_conversion_options(parser)
    add_output_options(parser)
    parser.set_defaults(run=_run_reference_form)


def _run_convert(args: argparse.Namespace, reporter: Reporter) -> int:
    pair = args.host is not None or args.device is not None
    if pair and (args.host is None or args.device is None):
        args.usage_error("--host and --device go together")
    if len(args.paths) != (1 if pair else 2):
        args.usage_error("give INPUT OUTPUT, or OUTPUT with --host and --device")
    if args.keep_merged and not pair:
        args.usage_error("--keep-merged needs --host and --device")
    options = conversion_options(args)
    with ProgressBars(reporter.shows_progress) as bars:
        if not pair:
            reporter.warn_slow_scanner()
            result = api.convert(args.paths[0], args.paths[1], options, progress=bars.progress)
            reporter.conversion(result)
            return 0
        paired = api.convert_pair(args.host, args.device, args.paths[0], options, rank=args.rank,
                                  keep_merged=args.keep_merged, allow_mismatch=args.allow_mismatch,
                                  progress=bars.progress)
    reporter.link(paired.link)
    reporter.conversion(paired.conversion)
    return 0


def _run_reference_form(args: argparse.Namespace, reporter: Reporter) -> int:
    args.paths = [args.input, args.output]
    args.host = args.device = args.keep_merged = None
    return _run_convert(args, reporter)

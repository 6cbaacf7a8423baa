"""``repair``: the last complete JSON object of a host trace that holds several, or the complete nodes
of one cut off before its end."""

from __future__ import annotations

import argparse
from typing import Any

from .. import api
from .common import (
    PROG,
    add_output_options,
    declare,
    subcommand,
)
from .report import Reporter


def add(commands: Any) -> None:
    _add_repair(commands)


def _add_repair(commands: Any) -> None:
    parser = subcommand(
        commands,
        "repair",
        "keep the last complete JSON object of a host trace that holds several, or "
        "every complete node of one cut off before its end (its job killed)",
        f"  {PROG} repair rank0_host.json rank0_host.fixed.json\n",
    )
    parser.add_argument("input", metavar="INPUT")
    parser.add_argument("output", metavar="OUTPUT", help="repaired trace (.gz: gzipped)")
    add_output_options(parser)
    parser.set_defaults(run=_run_repair)
    declare(parser, ("input", "output"), commits=lambda args: 1)


def _run_repair(args: argparse.Namespace, reporter: Reporter) -> int:
    result = api.repair(args.input, args.output)
    reporter.info(f"wrote {result.output_path}: {result.describe()}")
    return 0

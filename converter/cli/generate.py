"""``generate``: chakra_generator's microbenchmark traces, byte for byte."""

from __future__ import annotations

import argparse
from typing import Any

from .. import api
from ..tools.generate import INT64_MAX, INT64_MIN, MAX_NPUS, UINT64_MAX
from .common import PROG, add_output_options, declare, subcommand
from .numbers import whole
from .progress import ProgressBars
from .report import Reporter


def add(commands: Any) -> None:
    parser = subcommand(
        commands,
        "generate",
        "write chakra_generator's microbenchmark traces (one .et per NPU each), byte-identical",
        f"  {PROG} generate microbench/ --num-npus 8\n"
        f"  {PROG} generate . --num_npus 64 --default_comm_size 1048576   (chakra_generator's options)\n",
    )
    parser.add_argument(
        "output_dir",
        nargs="?",
        default=".",
        metavar="DIR",
        help="where the traces go (default: the current directory, as chakra_generator)",
    )
    defaults = api.GenerateOptions()
    for name, low, high, help_text in (
        ("num_npus", 1, MAX_NPUS, f"number of NPUs: one file per NPU and benchmark, at most {MAX_NPUS:,}"),
        ("default_runtime", 0, UINT64_MAX, "duration of compute nodes (microseconds)"),
        ("default_tensor_size", 0, UINT64_MAX, "tensor size of memory, send and receive nodes (bytes)"),
        ("default_comm_size", INT64_MIN, INT64_MAX, "size of collectives (bytes; any int64, as chakra_generator)"),
    ):
        parser.add_argument(
            f"--{name.replace('_', '-')}",
            f"--{name}",
            dest=name,
            type=whole(low, high),
            metavar="N",
            default=getattr(defaults, name),
            help=f"{help_text} (default {getattr(defaults, name)})",
        )
    add_output_options(parser)
    parser.set_defaults(run=_run)
    declare(parser, ())  # its files are its own, in a new folder


def _run(args: argparse.Namespace, reporter: Reporter) -> int:
    options = api.GenerateOptions(
        num_npus=args.num_npus,
        default_runtime=args.default_runtime,
        default_tensor_size=args.default_tensor_size,
        default_comm_size=args.default_comm_size,
    )
    with ProgressBars(reporter.shows_progress) as bars:
        result = api.generate(args.output_dir, options, bars.progress)
    reporter.info(
        f"wrote {len(result.files):,} traces in {result.output_dir} "
        f"({len(api.GENERATED_BENCHMARKS)} microbenchmarks x {args.num_npus} NPUs)"
    )
    return 0

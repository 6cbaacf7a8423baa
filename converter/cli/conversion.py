"""The option groups of the commands that convert (``convert``, ``convert-all``, ``link``): the
conversion options, the host + device pair, the reading jobs, and how they reach the API."""

from __future__ import annotations

import argparse

from .. import api
from ..arguments import MAX_STEP
from ..overhead import parse as parse_tracing_overhead
from ..ranks.scale import MAX_RANKS
from .numbers import MAX_JOBS, whole


def add_conversion_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("conversion (the defaults give chakra_converter's bytes)")
    group.add_argument(
        "--simulate",
        action="store_true",
        help="after writing, run the reference's simple execution model and print the simulated time",
    )
    group.add_argument(
        "--break-cycles",
        action="store_true",
        help="instead of failing on dependency cycles, remove the edges that close them "
        "(inter-thread edges first) and list every removed edge",
    )
    group.add_argument(
        "--allow-missing-parents",
        action="store_true",
        help="accept ctrl_deps that point at no node, as chakra_converter does "
        "(those ops and everything under them are dropped); an error by default",
    )
    group.add_argument(
        "--astra-sim",
        action="store_true",
        help="write what ASTRA-sim runs instead of chakra_converter's bytes: no METADATA "
        "node, no dependency on a node that is not in the file, host-side (gloo) "
        "collectives as communication nodes (see docs/astra-sim.md)",
    )
    group.add_argument(
        "--compact",
        action="store_true",
        help="for ASTRA-sim (implies --astra-sim): drop redundant dependencies and merge runs of "
        "compute nodes into one node each (summed durations); ASTRA-sim simulates the same "
        "time, much faster (see docs/compact.md)",
    )
    group.add_argument(
        "--roofline",
        action="store_true",
        help="write num_ops (FLOPs) and tensor_size (bytes) on every compute node, from the "
        "ops' shapes and dtypes, for ASTRA-sim's roofline compute model (see docs/roofline.md)",
    )
    group.add_argument(
        "--target",
        choices=api.TARGETS,
        default="captured",
        help="accelerator: write every compute node as a non-CPU op, so that ASTRA-sim times "
        "a CPU capture's compute with its roofline (needs --roofline); captured (default): "
        "as recorded",
    )
    group.add_argument(
        "--tracing-overhead",
        type=_tracing_overhead,
        default="auto",
        metavar="auto|none|US",
        help="with --astra-sim and for a Kineto trace: take the profiler's own time out of the "
        "CPU ops and the gaps between them, so that a replay gives the untraced step: auto "
        "(default) the calibration chakra-profile stored beside the trace, else the cost a GPU job's host "
        "trace measures of itself, else the default model for the tracing the trace records (without a "
        "calibration the line says how sure the step is; a CPU job's collectives take the least traced "
        "duration of their ranks, the rest being waits); none keeps the traced durations; US: your own "
        "figure, microseconds per recorded op (see docs/overhead.md)",
    )
    (
        group.add_argument(
            "--host-time",
            choices=api.HOST_TIMES,
            default="none",
            help="with --target accelerator, the nodes that do no arithmetic (views, wrappers, "
            "launchers) stay CPU ops: none (default) without their duration (no host overhead), "
            "captured with it (the host's work replayed between the accelerator ops)",
        ),
    )


def add_pair_options(parser: argparse.ArgumentParser, *, required: bool, step: bool = True) -> None:
    """The host + device pair's options; ``step`` False: the command defines ``--step`` itself
    (``convert``, where it also picks a Kineto trace's step), and checks it against ``--all-steps``."""
    group = parser.add_argument_group("host + device pair")
    group.add_argument(
        "--host",
        "--chakra-host-trace",
        dest="host",
        metavar="HOST",
        required=required,
        help="host trace (ExecutionTraceObserver), .json or .json.gz",
    )
    group.add_argument(
        "--device",
        "--chakra-device-trace",
        dest="device",
        metavar="DEVICE",
        required=required,
        help="the Kineto trace of the same rank and run",
    )
    group.add_argument(
        "--rank",
        type=whole(0, MAX_RANKS - 1),
        help="rank of the trace (checked against the Kineto trace; with "
        "--astra-sim, the own end of sends and receives)",
    )
    group.add_argument("--allow-mismatch", action="store_true", help="link a pair even if it looks like two runs")
    steps = group.add_mutually_exclusive_group() if step else group
    if step:
        steps.add_argument(
            "--step",
            type=step_number,
            metavar="N",
            help="link ProfilerStep#N alone (default: the steps the Kineto trace covers, when the "
            "host trace holds more)",
        )
    steps.add_argument(
        "--all-steps",
        action="store_true",
        help="link every ProfilerStep of the host trace, those without device data too",
    )


def pair_steps(args: argparse.Namespace) -> api.StepChoice:
    """``--step N`` / ``--all-steps`` as the API takes them."""
    return api.ALL_STEPS if args.all_steps else args.step


#: ``--step N``: a step number (``ProfilerStep#N``), ASCII decimal, 0 to 2^63 - 1.
step_number = whole(0, MAX_STEP)


def add_jobs_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-j",
        "--jobs",
        dest="read_jobs",
        type=whole(1, MAX_JOBS),
        metavar="N",
        help="processes reading a large plain-JSON input, a byte range each (default: CPU count)",
    )


def _tracing_overhead(text: str) -> str | float:
    try:
        return parse_tracing_overhead(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def conversion_options(args: argparse.Namespace) -> api.ConvertOptions:
    """The conversion options as the API takes them; ``ConvertOptions`` checks them (the
    command line has no checks of its own: an ``OptionError`` is its usage error)."""
    return api.ConvertOptions(
        simulate=args.simulate,
        break_cycles=args.break_cycles,
        allow_missing_parents=args.allow_missing_parents,
        astra_sim=args.astra_sim,
        rank=getattr(args, "rank", None),
        jobs=getattr(args, "read_jobs", None),
        compact=args.compact,
        roofline=args.roofline,
        target=args.target,
        host_time=args.host_time,
        tracing_overhead=args.tracing_overhead,
    )

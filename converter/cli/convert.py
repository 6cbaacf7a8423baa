"""``convert`` (one trace, or a host + device pair) and ``PyTorch``, chakra_converter's own form."""

from __future__ import annotations

import argparse
import re
from typing import Any

from .. import api
from ..errors import ConverterError
from ..memory.job import rank_memory, write_sidecar
from ..memory.profile import RankMemory
from ..ranks.discover import distributed_info
from ..ranks.jobsize import host_world_size, rank_output
from .common import PROG, add_output_options, committed_once, declare, subcommand
from .conversion import (
    add_conversion_options,
    add_jobs_option,
    add_pair_options,
    conversion_options,
    pair_steps,
    step_number,
)
from .progress import ProgressBars
from .report import Reporter


def add(commands: Any) -> None:
    _add_convert(commands)
    _add_reference_form(commands)


def _add_convert(commands: Any) -> None:
    parser = subcommand(
        commands,
        "convert",
        "convert a merged or host trace, or a host + device pair, into a .et file",
        f"  {PROG} convert merged.json.gz out.et --break-cycles\n"
        f"  {PROG} convert --host rank0_host.json --device rank0_device.json out.0.et\n"
        f"  {PROG} convert rank0.pt.trace.json.gz out.0.et --step 12     # a Kineto trace alone\n",
    )
    parser.usage = "%(prog)s [options] INPUT OUTPUT\n       %(prog)s [options] --host HOST --device DEVICE OUTPUT"
    parser.add_argument(
        "paths", nargs="+", metavar="[INPUT] OUTPUT", help="INPUT OUTPUT, or only OUTPUT with --host and --device"
    )
    add_pair_options(parser, required=False, step=False)
    kineto = parser.add_argument_group("a Kineto trace alone (recognised by its traceEvents; docs/kineto.md)")
    kineto.add_argument("--kineto", action="store_true", help="INPUT is a Kineto (Chrome JSON) trace")
    kineto.add_argument(
        "--step",
        type=step_number,
        metavar="N",
        help="convert ProfilerStep#N: of a Kineto trace alone "
        "(default: the last complete step), or of a host + device pair (default: the steps the "
        "Kineto trace covers, when the host trace holds more)",
    )
    kineto.add_argument(
        "--drop-dependency",
        action="append",
        choices=api.DEPENDENCY_KINDS,
        default=[],
        metavar="KIND",
        help="leave out one kind of dependency (the ablation): " + ", ".join(api.DEPENDENCY_KINDS),
    )
    kineto.add_argument(
        "--serial-streams",
        action="store_true",
        help="kernels that overlapped on several streams keep their traced durations (ASTRA-sim runs "
        "them one after another, each for its traced duration); default: written to end when they ended "
        "(docs/kineto.md)",
    )
    kineto.add_argument(
        "--device-profile",
        metavar="FILE",
        help="the what-if: re-time every kernel and host op for the device FILE profiles (or a shipped "
        "profile's name: h200, h100); simulate the output without --accelerator (docs/device-profiles.md)",
    )
    kineto.add_argument(
        "--source-profile",
        metavar="FILE",
        help="with --device-profile: the profile of the GPU the trace was captured on (a file, h200 or h100); "
        "each kernel's traced time is scaled by the two (kernels without shapes too, by class)",
    )
    parser.add_argument("--keep-merged", metavar="PATH", help="with --host/--device: also write the merged JSON")
    parser.add_argument(
        "--memory",
        action="store_true",
        help="also write the rank's memory (peak, what holds it, timeline) beside the output: OUTPUT's "
        "name with .memory.json for .et, for the memory command (docs/memory.md); the .et is unchanged",
    )
    add_jobs_option(parser)
    add_conversion_options(parser)
    add_output_options(parser)
    parser.set_defaults(run=_run_convert)
    declare(parser, ("paths", "host", "device", "keep_merged"), commits=_commits)


def _add_reference_form(commands: Any) -> None:
    parser = subcommand(
        commands,
        "PyTorch",
        "chakra_converter's own command line, accepted as is",
        f"  {PROG} --log-filename convert.log PyTorch --input merged.json --output out.et\n",
    )
    parser.add_argument("--input", required=True, metavar="INPUT", help="merged or host trace, .json or .json.gz")
    parser.add_argument("--output", required=True, metavar="OUTPUT", help="Chakra trace to write (.et)")
    add_jobs_option(parser)
    add_conversion_options(parser)
    add_output_options(parser)
    parser.set_defaults(run=_run_reference_form)
    declare(parser, ("input", "output"), commits=committed_once)


def _commits(args: argparse.Namespace) -> int:
    """The merged trace (``--keep-merged``) and the .et, unless ``--simulate`` runs after them."""
    return 0 if args.simulate else (2 if args.keep_merged else 1) + (1 if args.memory else 0)


def _run_convert(args: argparse.Namespace, reporter: Reporter) -> int:
    pair = args.host is not None or args.device is not None
    if pair and (args.host is None or args.device is None):
        args.usage_error("--host and --device go together")
    if len(args.paths) != (1 if pair else 2):
        args.usage_error("give INPUT OUTPUT, or OUTPUT with --host and --device")
    if args.keep_merged and not pair:
        args.usage_error("--keep-merged needs --host and --device")
    if args.step is not None and args.all_steps:
        args.usage_error("--step N or --all-steps, not both")
    if not pair and (args.kineto or _is_kineto(args.paths[0])):
        if args.all_steps:
            args.usage_error("--all-steps is for a host + device pair (a Kineto trace alone: --step N)")
        return _run_kineto(args, reporter)
    if args.drop_dependency or args.serial_streams:
        args.usage_error(f"{'--drop-dependency' if args.drop_dependency else '--serial-streams'} is for a Kineto trace")
    if args.device_profile or args.source_profile:
        args.usage_error(
            "--device-profile re-times a Kineto trace alone for now: convert the pair's Kineto trace "
            "(convert --kineto DEVICE OUTPUT --device-profile FILE)"
        )
    if (args.step is not None or args.all_steps) and not pair:
        args.usage_error("--step is for a Kineto trace or a host + device pair, --all-steps for a pair")
    if args.step is not None and args.step < 0:
        args.usage_error(f"--step {args.step}: a step number is 0 or more")
    options = conversion_options(args)
    with ProgressBars(reporter.shows_progress) as bars:
        if not pair:
            reporter.warn_slow_scanner()
            output = args.paths[1]
            if options.astra_sim and options.rank is not None:  # the rank given: the name ASTRA-sim reads
                output = rank_output(output, options.rank, host_world_size(args.paths[0]))
            memory = _memory_of(args, output, args.paths[0], None)
            result = api.convert(args.paths[0], output, options, progress=bars.progress)
            reporter.conversion(result)
            _write_memory(reporter, output, memory)
            return 0
        output = _named_for_rank(args.device, args.paths[0], args.rank) if options.astra_sim else args.paths[0]
        memory = _memory_of(args, output, args.host, args.device)
        paired = api.convert_pair(
            args.host,
            args.device,
            output,
            options,
            rank=args.rank,
            keep_merged=args.keep_merged,
            allow_mismatch=args.allow_mismatch,
            progress=bars.progress,
            steps=pair_steps(args),
        )
    reporter.link(paired.link)
    reporter.conversion(paired.conversion)
    _write_memory(reporter, output, memory)
    return 0


def _memory_of(args: argparse.Namespace, output: str, host: str | None, device: str | None) -> RankMemory | None:
    """``--memory``: the rank's memory (``memory/``), read before the conversion so that a trace
    without memory facts fails before anything is written."""
    if not getattr(args, "memory", False):
        return None
    named = re.fullmatch(r".*\.(0|[1-9][0-9]*)\.et", output)
    rank = int(named.group(1)) if named else (args.rank if getattr(args, "rank", None) is not None else 0)
    return rank_memory(rank, host, device)


def _write_memory(reporter: Reporter, output: str, memory: RankMemory | None) -> None:
    """The sidecar beside the written .et."""
    if memory is None:
        return
    path = write_sidecar(output, memory)
    reporter.info(f"wrote {path}: peak {memory.peak_bytes / (1 << 20):,.1f} MiB ({memory.source})")


def _is_kineto(path: str) -> bool:
    try:
        return api.is_kineto_trace(path)
    except ConverterError:  # unreadable: the host-trace path reports it as it always has
        return False


_NOT_FOR_KINETO = (
    ("simulate", "--simulate"),
    ("break_cycles", "--break-cycles"),
    ("allow_missing_parents", "--allow-missing-parents"),
    ("keep_merged", "--keep-merged"),
    ("read_jobs", "--jobs"),
    ("allow_mismatch", "--allow-mismatch"),
)


def _run_kineto(args: argparse.Namespace, reporter: Reporter) -> int:
    for attribute, option in _NOT_FOR_KINETO:
        if getattr(args, attribute, None):
            args.usage_error(f"{option} is not for a Kineto trace (its output is always ASTRA-sim ready)")
    if args.target == "accelerator" and not args.roofline:
        args.usage_error(
            "--target accelerator needs --roofline (a GPU node without num_ops stops ASTRA-sim's roofline)"
        )
    if args.host_time != "none":
        args.usage_error(
            "--host-time is not for a Kineto trace (its host timeline keeps its traced time, less the "
            "profiler's: --tracing-overhead)"
        )
    output = _named_for_rank(args.paths[0], args.paths[1], args.rank)
    memory = _memory_of(args, output, None, args.paths[0])
    result = api.convert_kineto(
        args.paths[0],
        output,
        step=args.step,
        rank=args.rank,
        drop=args.drop_dependency,
        roofline=args.roofline,
        accelerator=args.target == "accelerator",
        compact=args.compact,
        serial_streams=args.serial_streams,
        tracing_overhead=args.tracing_overhead,
        device_profile=args.device_profile,
        source_profile=args.source_profile,
    )
    reporter.kineto(result)
    _write_memory(reporter, output, memory)
    return 0


def _named_for_rank(trace: str, output: str, rank: int | None) -> str:
    """``OUTPUT`` as ``OUTPUT.<rank>.et`` (``out.et`` -> ``out.<rank>.et``) where the trace is one
    rank of a job of several (its ``distributedInfo``): the name ``simulate`` and ``scale`` read."""
    try:
        info = distributed_info(trace)
    except ConverterError:  # unreadable: the conversion reports it
        return output
    own = info.get("rank") if rank is None else rank
    world = info.get("world_size")
    return rank_output(output, own if type(own) is int and own >= 0 else None, world if type(world) is int else None)


def _run_reference_form(args: argparse.Namespace, reporter: Reporter) -> int:
    args.paths = [args.input, args.output]
    args.host = args.device = args.keep_merged = None
    args.kineto, args.step, args.drop_dependency, args.all_steps = False, None, [], False
    args.memory = False
    args.serial_streams = False
    args.device_profile = args.source_profile = None
    return _run_convert(args, reporter)

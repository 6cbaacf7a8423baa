"""``convert-all``: every rank found in a directory."""

from __future__ import annotations

import argparse
from typing import Any

from .. import api
from ..memory.job import from_folder, write_job_sidecars
from ..ranks.convert_all import uses_file
from .common import PROG, add_output_options, committed_once, declare, subcommand
from .conversion import add_conversion_options, conversion_options, step_number
from .numbers import MAX_JOBS, whole
from .progress import ProgressBars
from .report import Reporter


def add(commands: Any) -> None:
    _add_convert_all(commands)


def _add_convert_all(commands: Any) -> None:
    parser = subcommand(
        commands,
        "convert-all",
        "link and convert every rank whose traces are in a directory",
        f"  {PROG} convert-all outputs/ et/ --jobs 4      # gpt2_np2_rank<R>_{{host,device}}.json -> "
        "et/gpt2_np2.<R>.et, et/gpt2_np2.comm_group.json\n"
        f"  {PROG} convert-all dlrm/ et/ --astra-sim      # dlrm_eg_<R>.json + worker<R>_step_12.*.pt.trace.json\n"
        f"  {PROG} convert-all kineto/ et/ --step 12     # Kineto traces alone (docs/kineto.md)\n",
    )
    parser.add_argument(
        "directory",
        metavar="DIRECTORY",
        help="each rank's host and Kineto traces (or host traces alone, each converted by itself)",
    )
    parser.add_argument("outdir", metavar="OUTDIR", help="where <prefix>.<rank>.et files go (created if missing)")
    parser.add_argument(
        "-j",
        "--jobs",
        type=whole(1, MAX_JOBS),
        help=f"ranks converted at once (default: CPU count; at most {MAX_JOBS:,})",
    )
    parser.add_argument(
        "--ray",
        nargs="?",
        const="auto",
        metavar="ADDRESS",
        help="run each rank as a task on this Ray cluster instead of local processes; without "
        "ADDRESS, ray.init()'s rule: RAY_ADDRESS, else the cluster running on this "
        "machine, else a new local one; paths must be the same on every node",
    )
    parser.add_argument(
        "--prefix",
        help="output name prefix (default: the capture's name: what its host traces' "
        "file names share less rank and kind, e.g. gpt2_np2 of gpt2_np2_rank0_host.json; trace "
        "where that is nothing, as for rank0_host.json)",
    )
    parser.add_argument(
        "--step",
        type=step_number,
        metavar="N",
        help="a directory of Kineto traces alone: convert ProfilerStep#N (default: each trace's last complete step)",
    )
    parser.add_argument("--allow-mismatch", action="store_true", help="link pairs even if they look like two runs")
    parser.add_argument(
        "--memory",
        action="store_true",
        help="also write each rank's memory beside its .et (PREFIX.<rank>.memory.json, for the memory "
        "command; docs/memory.md); the .et files are unchanged",
    )
    add_conversion_options(parser)
    add_output_options(parser)
    parser.set_defaults(run=_run_convert_all)
    declare(
        parser,
        (),
        uses_file=lambda path, args: uses_file(path, args.directory, args.outdir, args.prefix),
        used_as="a trace or an output of convert-all",
        commits=committed_once,
    )


def _run_convert_all(args: argparse.Namespace, reporter: Reporter) -> int:
    memories = from_folder(args.directory) if args.memory else []  # a rank without memory facts fails first
    with ProgressBars(reporter.shows_progress) as bars:
        result = api.convert_all(
            args.directory,
            args.outdir,
            conversion_options(args),
            jobs=args.jobs,
            prefix=args.prefix,
            allow_mismatch=args.allow_mismatch,
            on_rank_done=bars.rank_done,
            ray_address=args.ray,
            step=args.step,
        )
    reporter.info(f"job {result.prefix}: {args.outdir}/{result.prefix}.<rank>.et")
    if result.ray_cluster is not None:
        reporter.info(f"ran on {result.ray_cluster}")
    reporter.info(f"{'rank':>4}  {'status':6}  {'nodes':>9}  {'seconds':>7}  output / problem")
    for o in result.outcomes:
        status, detail = ("ok", o.output or "") if o.ok else ("FAILED", o.message)
        reporter.info(f"{o.rank:>4}  {status:6}  {o.nodes:>9,}  {o.seconds:>7.2f}  {detail}")
        if o.ok and o.message:
            reporter.warning(f"rank {o.rank}: {o.message}")
    untraced = [o for o in result.outcomes if o.overhead is not None]
    if untraced:
        first = untraced[0]
        assert first.overhead is not None
        reporter.info(f"rank {first.rank}: {first.overhead.line()}")
        if len(untraced) > 1:
            removed = [o.overhead.removed_us / 1000 for o in untraced if o.overhead is not None]
            span = f"{min(removed):,.1f}-{max(removed):,.1f} ms"
            reporter.info(f"  and {len(untraced) - 1} other rank(s) likewise: {span} removed each")
    if result.waits is not None:
        reporter.info(result.waits.line())
    groups = result.comm_groups
    if result.comm_group_path is not None:
        reporter.info(
            f"communicator groups: {result.comm_group_path} {groups.groups} (the default group, "
            "every rank, needs no entry)"
        )
    collectives, nodes = result.evened
    if collectives:
        reporter.info(
            f"all-to-all with splits: {collectives} collective(s) moved different bytes on different ranks; "
            f"{nodes} node(s) now carry their group's largest rank's input (ASTRA-sim runs one size per collective)"
        )
    if groups.unusable:
        reporter.warning(f"process groups {groups.unusable} have names ASTRA-sim cannot use as group ids")
    if args.memory:
        done = [o.rank for o in result.outcomes if o.ok]
        for path in write_job_sidecars(memories, args.outdir, result.prefix, done):
            reporter.info(f"wrote {path}")
    if result.failed:
        reporter.error(f"{result.failed} of {len(result.outcomes)} ranks failed")
    return min(result.failed, 125)

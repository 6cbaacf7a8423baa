"""``scale``: a captured job written as a data-parallel job of more (or fewer) ranks."""

from __future__ import annotations

import argparse
from typing import Any

from .. import api
from ..ranks.scale import MAX_RANKS, uses_file
from .common import PROG, add_output_options, declare, subcommand
from .numbers import whole
from .progress import ProgressBars
from .report import Reporter
from .simulate import said_imbalance


def add(commands: Any) -> None:
    parser = subcommand(
        commands,
        "scale",
        "write a captured job (IN_PREFIX.<rank>.et) as a data-parallel job of N ranks",
        f"  {PROG} scale outputs/gpt2_np2 scaled/gpt2 --ranks 64   # -> scaled/gpt2.{{0..63}}.et, "
        "scaled/gpt2.comm_group.json\n"
        f"  {PROG} scale outputs/gpt2_np2 scaled/gpt2 --ranks 1024 --compact   # fewer nodes, same simulated time\n"
        f"  {PROG} scale own/tp2_np4 scaled/tp2 --ranks 8 --layout ddp,tp=2   # what the trace cannot tell\n"
        f"  {PROG} scale moe/mixtral_tiny_np2 scaled/ep4 --ranks 4 --expert-load balanced   # --ep jobs\n"
        "\nrank r of the new job is captured rank r mod K (K captured ranks), byte for byte; collectives over\n"
        "all ranks keep their bytes (data parallelism); sub-groups are copied per K ranks. The layout comes\n"
        "from the job's layout file, else from its collectives (FSDP is scaled as FSDP); what they cannot\n"
        "settle (pipeline, tensor x data, HSDP, all-to-all, gloo's unnamed groups) is refused without\n"
        "--layout (HSDP: --layout hsdp,shard=S). See docs/scale.md and docs/jobs-from-traces.md.\n",
    )
    parser.add_argument(
        "in_prefix",
        metavar="IN_PREFIX",
        help="the captured job: IN_PREFIX.0.et .. IN_PREFIX.<K-1>.et "
        "(--astra-sim output) and IN_PREFIX.comm_group.json (or comm_group.json beside them)",
    )
    parser.add_argument(
        "out_prefix",
        metavar="OUT_PREFIX",
        help="the new job: OUT_PREFIX.<r>.et, OUT_PREFIX.comm_group.json (the folder is created if missing)",
    )
    parser.add_argument(
        "--ranks",
        "-n",
        type=whole(1, MAX_RANKS),
        metavar="N",
        help=f"ranks of the new job, at most {MAX_RANKS:,} (default: the job's own size, as its "
        "traces record it: a job traced on rank 0 alone is written at its full size)",
    )
    parser.add_argument(
        "--compact",
        action="store_true",
        help="write every rank compacted: redundant dependencies "
        "dropped, runs of compute nodes merged; ASTRA-sim simulates the same time, much faster "
        "(see docs/compact.md)",
    )
    parser.add_argument(
        "--ranks-as",
        choices=api.RANKS_AS,
        default="captured",
        help="every captured rank as captured (default), or with the compute of the slowest or the "
        "median rank (docs/simulating.md); where they differ in compute, a warning says so",
    )
    parser.add_argument(
        "--layout",
        metavar="SPEC",
        help="the captured job's parallel layout where its trace cannot tell: ddp or fsdp, then tp=T "
        "and pp=P (e.g. fsdp,tp=2; ranks laid out pp x dp x tp, tensor parallelism innermost), or "
        "hsdp,shard=S (FSDP2 on a (replicate, shard) mesh: replicas added); default: "
        "the layout file beside the ranks, else what the collectives show (FSDP or DDP), refused when unsure",
    )
    parser.add_argument(
        "--expert-load",
        metavar="LOAD",
        help="an expert-parallel job (chakra-profile --ep): how the routing loads the experts at the new "
        "size: captured (default: each expert's share of the captured run's rows), balanced (every rank "
        "receives what it sends), or the busiest rank's rows over the mean (a number >= 1, e.g. 1.25); "
        "see docs/expert-parallel.md",
    )
    add_output_options(parser)
    parser.set_defaults(run=_run_scale)
    declare(
        parser,
        (),
        uses_file=lambda path, args: uses_file(path, args.in_prefix, args.out_prefix),
        used_as="a rank or group file of scale",
    )


def _run_scale(args: argparse.Namespace, reporter: Reporter) -> int:
    with ProgressBars(reporter.shows_progress) as bars:
        result = api.scale(
            args.in_prefix,
            args.out_prefix,
            args.ranks,
            progress=bars.progress,
            compact=args.compact,
            ranks_as=args.ranks_as,
            layout=args.layout,
            expert_load=args.expert_load,
        )
    said_imbalance(reporter, args.in_prefix, args.ranks_as)
    kinds: dict[tuple[str, str], list[int]] = {}
    for kind, group, size in result.collectives:
        entry = kinds.setdefault((kind, group), [0, 0])
        entry[0] += 1
        entry[1] += size
    if result.note is not None:
        reporter.info(result.note)
    reporter.info(
        f"scaled {result.captured_ranks} captured rank(s) of {result.in_prefix} to {result.ranks:,}: "
        f"{result.out_prefix}.0.et .. {result.out_prefix}.{result.ranks - 1}.et, "
        f"{result.bytes_written / 1e6:,.1f} MB in {result.seconds:.2f} s"
    )
    for (kind, group), (count, size) in kinds.items():
        reporter.info(f"    per rank: {kind:<14} group {group:<4} {count:>5,} x, {size:>16,} bytes")
    shown = {
        k: (v if len(v) <= 8 else f"{len(v)} ranks {v[0]}..{v[-1]}") for k, v in list(result.comm_groups.items())[:8]
    }
    more = f" (+{len(result.comm_groups) - 8} more)" if len(result.comm_groups) > 8 else ""
    reporter.info(f"communicator groups: {result.comm_group_path} {shown}{more}")
    if result.layout is not None:
        reporter.info(
            f"layout: {result.layout}; {result.rewritten_nodes:,} communication node(s) moved to their "
            f"group of the new mesh; {result.out_prefix}.layout.json written"
        )
    elif result.rewritten_nodes:
        reporter.info(f"{result.rewritten_nodes:,} sub-group collective(s) renamed to their copy's group")
    return 0

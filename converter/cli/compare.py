"""``compare``: two runs of a job (a simulated job and the trace it came from, two traces, two
simulated jobs), where the time went differently: tables, ``--json``, ``--plot``."""

from __future__ import annotations

import argparse
import json
from typing import Any

from .. import api
from ..compare import Row
from .common import PROG, add_output_options, declare, subcommand
from .report import Reporter, write_stdout

_KEY_WIDTH = 44
_SHOWN_RANKS = 16


def add(commands: Any) -> None:
    parser = subcommand(
        commands,
        "compare",
        "compare two runs of a job (traces or simulated timelines): per rank, stream, op class and op",
        f"  {PROG} compare rank0_device.json.gz run.json   # the trace against its simulate --timeline\n"
        f"  {PROG} compare traces_before/ traces_after/     # two jobs' Kineto traces, a folder each\n"
        f"  {PROG} compare ring.json switch.json --json diff.json --plot diff.png   # two simulated runs\n",
    )
    parser.add_argument(
        "a",
        metavar="A",
        help="a Kineto trace (.json/.json.gz, or a folder of one per rank) or a simulated run "
        "(the file simulate --timeline writes)",
    )
    parser.add_argument("b", metavar="B", help="the same kinds as A: what is compared against A")
    parser.add_argument(
        "--step", type=int, metavar="N", help="the traces' ProfilerStep#N (default: the last complete one)"
    )
    parser.add_argument(
        "--rank",
        type=int,
        metavar="R",
        help="the rank whose streams, op classes and ops are compared (default: each side's slowest)",
    )
    parser.add_argument(
        "--json", nargs="?", const="-", metavar="FILE", help="the comparison as JSON: on stdout, or written to FILE"
    )
    parser.add_argument(
        "--plot", metavar="FILE.png", help="per stream and per op class, A and B as bars (needs the plot extra)"
    )
    add_output_options(parser)
    parser.set_defaults(run=_run)
    declare(parser, ("a", "b", "json", "plot"))


def _run(args: argparse.Namespace, reporter: Reporter) -> int:
    if args.step is not None and args.step < 0:
        args.usage_error(f"--step {args.step}: a step number is 0 or more")
    if args.rank is not None and args.rank < 0:
        args.usage_error(f"--rank {args.rank}: a rank is 0 or more")
    result = api.compare(
        args.a,
        args.b,
        step=args.step,
        rank=args.rank,
        json_output=None if args.json in (None, "-") else args.json,
        plot=args.plot,
    )
    if args.json == "-":
        write_stdout(json.dumps(result.as_json(), indent=2) + "\n")
    else:
        write_stdout("".join(f"{line}\n" for line in table_lines(result)))
    for note in result.notes:
        reporter.warning(note)
    written = [p for p in (None if args.json in (None, "-") else args.json, args.plot) if p]
    if written:
        reporter.info(f"wrote {' and '.join(written)}")
    return 0


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value / 1000:,.3f}"


def _row(row: Row, counts: bool = False) -> str:
    key = row.key if len(row.key) <= _KEY_WIDTH else row.key[: _KEY_WIDTH - 3] + "..."
    diff = "-" if row.diff is None else f"{row.diff / 1000:+,.3f}"
    ratio = "-" if row.ratio is None else f"{row.ratio:+.1%}"
    line = f"  {key:<{_KEY_WIDTH}} {_ms(row.a):>12} {_ms(row.b):>12} {diff:>11} {ratio:>9}"
    if counts:
        line += f" {row.count_a or 0:>7,} {row.count_b or 0:>7,}"
    return line


def table_lines(result: api.Comparison) -> list[str]:
    """The comparison for people: a table per section, times in ms, B against A."""
    head = f"  {'':<{_KEY_WIDTH}} {'A (ms)':>12} {'B (ms)':>12} {'B-A (ms)':>11} {'B/A-1':>9}"
    lines = [f"A: {result.a.describe()}", f"B: {result.b.describe()}", "", "per rank", head]
    shown = list(result.ranks)
    if len(shown) > _SHOWN_RANKS:  # the first eight, and each side's slowest
        shown = [*shown[:8], *sorted({f"rank {result.rank_a}", f"rank {result.rank_b}"} - set(shown[:8]))]
    for rank in shown:
        lines.append(f"  {rank}")
        lines += [_row(r) for r in result.ranks[rank]]
    if len(shown) < len(result.ranks):
        lines.append(f"  ... {len(result.ranks) - len(shown):,} more ranks (all of them in --json)")
    which = (
        f"rank {result.rank_a}" if result.rank_a == result.rank_b else f"rank {result.rank_a} (A), {result.rank_b} (B)"
    )
    counts = f" {'n A':>7} {'n B':>7}"
    lines += ["", f"per stream (lane), {which}: time busy", head + counts]
    lines += [_row(r, True) for r in result.lanes]
    lines += ["", f"per op class, {which}: total time", head + counts]
    lines += [_row(r, True) for r in result.classes]
    lines += ["", f"per op, {which}: the {len(result.ops)} that differ most in total time", head + counts]
    lines += [_row(r, True) for r in result.ops]
    step = result.step
    if step.ratio is not None:
        lines += ["", f"step: A {_ms(step.a)} ms, B {_ms(step.b)} ms ({step.ratio:+.2%})"]
    return lines

"""``check``: .et files read back and checked against what ASTRA-sim accepts."""

from __future__ import annotations

import argparse
import json
from typing import Any

from .. import api
from .common import (
    PROG,
    add_output_options,
    declare,
    subcommand,
)
from .report import Reporter, write_stdout


def add(commands: Any) -> None:
    _add_check(commands)


def _add_check(commands: Any) -> None:
    parser = subcommand(
        commands,
        "check",
        "read .et files (one per rank) and check them against what ASTRA-sim accepts",
        f"  {PROG} check et/trace.*.et       # with et/trace.comm_group.json, if there\n"
        f"  {PROG} check et/trace.*.et --comm-groups groups.json\n"
        f"  {PROG} check out.et --json > report.json\n",
    )
    parser.add_argument("files", nargs="+", metavar="FILE.et", help="Chakra traces, one per rank (<prefix>.<rank>.et)")
    parser.add_argument(
        "--comm-groups",
        metavar="F",
        help="the --comm-group-configuration file to check with them (default: "
        "PREFIX.comm_group.json, else comm_group.json, beside files named PREFIX.<rank>.et)",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON on stdout")
    add_output_options(parser)
    parser.set_defaults(run=_run_check)
    declare(parser, ("files", "comm_groups"))  # its --json is a flag: the report on stdout


def _run_check(args: argparse.Namespace, reporter: Reporter) -> int:
    report = api.check(args.files, args.comm_groups)
    if args.json:
        write_stdout(json.dumps(_report_json(report), indent=2) + "\n")
    else:
        write_stdout("".join(f"{line}\n" for line in _report_lines(report)))
    for problem in report.problems:
        (reporter.error if problem.fatal else reporter.warning)(problem.line())
    return 0 if report.ok else 1


def _report_lines(report: api.CheckReport) -> list[str]:
    lines = []
    for f in report.files:
        types = ", ".join(f"{name} {count:,}" for name, count in f.by_type.items())
        lines.append(
            f"{f.path} (rank {f.rank}): {f.nodes:,} nodes ({types}); {f.roots:,} roots; "
            f"{f.dependencies:,} dependencies, {f.missing_dependencies:,} naming no node; "
            f"{f.cycles} cycles"
        )
        for total in f.collective_totals():
            lines.append(
                f"    {total['kind']:<14} group {total['group'] or '0':<4} {total['count']:>6,} x, "
                f"{total['bytes']:>16,} bytes"
            )
    fatal = sum(p.fatal for p in report.problems)
    verdict = "ASTRA-sim would accept" if report.ok else f"ASTRA-sim would refuse or hang on ({fatal} problem(s))"
    if report.comm_group_path is not None:
        lines.append(f"communicator groups: {report.comm_group_path}")
    lines.append(f"{verdict}: {len(report.files)} file(s)")
    return lines


def _report_json(report: api.CheckReport) -> dict[str, Any]:
    return {
        "ok": report.ok,
        "files": [
            {
                "path": f.path,
                "rank": f.rank,
                "nodes": f.nodes,
                "nodes_by_type": f.by_type,
                "roots": f.roots,
                "dependencies": f.dependencies,
                "missing_dependencies": f.missing_dependencies,
                "duplicate_ids": f.duplicate_ids,
                "cycles": f.cycles,
                "collectives": f.collective_totals(),
            }
            for f in report.files
        ],
        "comm_groups": report.comm_groups,
        "comm_group_path": report.comm_group_path,
        "problems": [{"file": p.path, "message": p.message, "fatal": p.fatal} for p in report.problems],
    }

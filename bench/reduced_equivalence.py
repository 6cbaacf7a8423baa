"""The reduced job against the full one, both run in the real ASTRA-sim (issue 30): the table of
docs/reduced.md.

    ASTRA_SIM_HOME=../shared/astra-sim nice python -m bench.reduced_equivalence \\
        [--prefix PREFIX] [--ranks 64,256,1024] [--topology Ring --topology "Ring,Switch:8,*" ...] \\
        [--collective ALGORITHMS ...] [--known RESULT.json ...] [--speed 1048576] \\
        [--out bench/results/reduced_equivalence.md]

PREFIX is a captured job (``PREFIX.<rank>.et``); by default the committed GPT-2 DDP capture
(tests/data/traces/cpu_gpt2_ddp2, 2 CPU ranks) converted with ``--compact`` in a temporary
folder. For each topology (``T`` or ``T:SIZES`` for ``--npus-per-dim``) and each N of
``--ranks``, ``simulate --ranks N`` runs twice: reduced (the default) and full (``--exact``,
the job scaled to N ranks); a row gives both steps, the step's relative difference, the largest
relative difference of a simulated rank's communication time, and both wall times (writing the
job included). ``--known`` adds rows whose full run was made before (``simulate --ranks N --exact
--json RESULT.json``, e.g. 8,192 ranks, 11 minutes): the reduced run is made now and compared.
``--speed N`` adds reduced-only rows at N ranks (the wall time of ``simulate --ranks N``).
``--one-rank`` takes the job's rank 0 alone (one captured rank). ``--collective`` (``simulate
--collective``: one algorithm, or one a dimension) runs each topology with each of them
(default: the ring); a row compares every simulated rank r with the full job's rank r (the same
place in the earlier dimensions).
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from chakra_convert_fast.converter import ConvertOptions, api

CAPTURE = Path(__file__).resolve().parents[1] / "tests/data/traces/cpu_gpt2_ddp2"
DEFAULT_TOPOLOGIES = ["Ring", "Switch", "FullyConnected", "Ring,Switch:8,*"]
STEP_BOUND, COMM_BOUND = 0.001, 0.01


def _options(topology: str, collective: str | None = None) -> api.SimulateOptions:
    name, _, sizes = topology.partition(":")
    return api.SimulateOptions(topology=name, npus_per_dim=sizes or None, collective=collective)


def _timed(
    prefix: Path, ranks: int, topology: str, exact: bool, collective: str | None = None
) -> tuple[api.SimulationResult, float]:
    started = time.perf_counter()
    result = api.simulate(prefix, _options(topology, collective), ranks=ranks, exact=exact)
    return result, time.perf_counter() - started


def _full_from_json(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def _row(
    topology: str,
    ranks: int,
    small: api.SimulationResult,
    small_wall: float,
    full_step: int,
    full_comm: list[int],
    full_wall: float,
    note: str = "",
) -> tuple[str, bool]:
    assert small.plan is not None
    step_err = (small.step_ns - full_step) / full_step
    comm_err = max(abs(r.comm_ns - full_comm[r.rank]) / full_comm[r.rank] for r in small.ranks)
    ok = abs(step_err) <= STEP_BOUND and comm_err <= COMM_BOUND
    ran = (
        f"{small.plan.simulated_ranks:,} on {small.plan.network.name}"
        if small.plan.network
        else f"none: the full job ({small.plan.reason})"
    )
    line = (
        f"| {topology} | {ranks:,} | {ran} | {full_step / 1e6:,.3f} | {small.step_ns / 1e6:,.3f} | "
        f"{step_err:+.4%} | {comm_err:.3%} | {full_wall:,.1f}{note} | {small_wall:,.2f} | "
        f"{full_wall / small_wall:,.0f}x | {'yes' if ok else 'NO'} |"
    )
    return line, ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prefix", type=Path)
    parser.add_argument("--ranks", default="64,256,1024")
    parser.add_argument("--topology", action="append")
    parser.add_argument("--known", type=Path, action="append", default=[])
    parser.add_argument("--speed", type=int, action="append", default=[])
    parser.add_argument("--collective", action="append")
    parser.add_argument(
        "--one-rank",
        action="store_true",
        help="the job's rank 0 alone (one captured rank)",
    )
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results/reduced_equivalence.md")
    args = parser.parse_args(argv)
    topologies = args.topology or DEFAULT_TOPOLOGIES
    scratch = Path(tempfile.mkdtemp(prefix="reduced-bench-"))
    try:
        prefix = args.prefix
        if prefix is None:
            api.convert_all(CAPTURE, scratch, ConvertOptions(compact=True))
            prefix = scratch / "trace"
        if args.one_rank:
            shutil.copy(f"{prefix}.0.et", scratch / "one.0.et")
            prefix = scratch / "one"
        rows, all_ok = [], True
        for topology in topologies:
            for collective in args.collective or [None]:
                for ranks in (int(n) for n in args.ranks.split(",") if n):
                    small, small_wall = _timed(prefix, ranks, topology, False, collective)
                    full, full_wall = _timed(prefix, ranks, topology, True, collective)
                    named = f"{topology} {collective}" if collective else topology
                    comm = [r.comm_ns for r in full.ranks]
                    line, ok = _row(named, ranks, small, small_wall, full.step_ns, comm, full_wall)
                    rows.append(line)
                    all_ok &= ok
                    print(line, flush=True)
        for path in args.known:
            data = _full_from_json(path)
            net = data["network"]
            topology = ",".join(net["topology"])
            sizes = ",".join(map(str, net["npus_per_dim"]))
            spec = f"{topology}:{sizes}" if len(net["topology"]) > 1 else topology
            small, small_wall = _timed(prefix, data["ranks"], spec, exact=False)
            comm = [r["comm_ns"] for r in data["per_rank"]]
            line, ok = _row(
                spec,
                data["ranks"],
                small,
                small_wall,
                data["step_ns"],
                comm,
                data["wall_seconds"],
                " (earlier run)",
            )
            rows.append(line)
            all_ok &= ok
            print(line, flush=True)
        speed = []
        for ranks in args.speed:
            for topology in topologies:
                small, wall = _timed(prefix, ranks, topology, exact=False)
                assert small.plan is not None
                speed.append(
                    f"| {topology} | {ranks:,} | {small.plan.describe()} | {small.step_ns / 1e6:,.3f} | {wall:,.2f} |"
                )
                print(speed[-1], flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    command = "ASTRA_SIM_HOME=../shared/astra-sim nice python -m bench.reduced_equivalence " + shlex.join(
        sys.argv[1:] if argv is None else argv
    )
    job = (
        "the committed GPT-2 DDP capture (tests/data/traces/cpu_gpt2_ddp2: 2 CPU ranks, converted with "
        "--compact: 12 nodes a rank)"
        if args.prefix is None
        else f"`{args.prefix}`"
    ) + (": its rank 0 alone (one captured rank)" if args.one_rank else "")
    text = [
        "# The reduced job against the full one (issue 30)",
        "",
        f"Made by `{command}`, on this project's 2-core machine shared with other work (wall times vary with "
        "the load; each includes writing its job: the full run's N rank files, the reduced run's few, "
        f"compacted). The job: {job}; ring collectives unless the topology column names others (one a "
        "dimension), 50 GB/s and 500 ns a dimension, "
        "congestion-unaware. Bounds: the step within "
        f"{STEP_BOUND:.1%}, each simulated rank's communication (against the full job's same rank) "
        f"within {COMM_BOUND:.0%}.",
        "",
    ]
    if rows:
        text += [
            "| topology | ranks | reduced job (ranks on network) | full step (ms) | reduced step (ms) | step "
            "difference | largest communication difference | full wall (s) | reduced wall (s) | speed-up | "
            "within bounds |",
            "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---|",
            *rows,
            "",
        ]
    if speed:
        text += [
            "Reduced only (no full run at this width):",
            "",
            "| topology | ranks | what ran | step (ms) | wall (s) |",
            "|---|---:|---|---:|---:|",
            *speed,
            "",
        ]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(text))
    print(f"wrote {args.out}; {'every row within bounds' if all_ok else 'SOME ROWS OUT OF BOUNDS'}")
    return 0 if all_ok else 1


if __name__ == "__main__":
    raise SystemExit(main())

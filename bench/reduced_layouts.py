"""The reduced layout job against the full one, both run in the real ASTRA-sim (issue 38): the
tables of docs/reduced.md's "FSDP, tensor and pipeline parallelism".

    ASTRA_SIM_HOME=../shared/astra-sim nice python -m bench.reduced_layouts \\
        [--case tp2fsdp_np4:Ring ...] [--ranks 64,256,1024] [--speed 8192,1048576] \\
        [--steps-per-class 64] [--collective direct] [--out bench/results/reduced_layouts.md]

Each case is a layout capture (``tests/data/layouts/CASE/job``, or a path to a ``job`` prefix with
its ``job.layout.json``), or ``all-to-all`` (``all_to_all_job``: 2 data-parallel ranks exchanging
over every rank; ``all-to-all-1``: its rank 0 alone), and a topology (``T`` or ``T:SIZES`` for
``--npus-per-dim``); ``--collective`` applies to every run. For each N of ``--ranks``, ``simulate
--ranks N`` runs twice: reduced (the default) and full (``--exact --compact``); a row gives both steps, the step's
relative difference, the largest relative difference of a reduced rank's communication time from
the full job's rank at the same place of the mesh, and both wall times. Where the data-parallel
degree is no wider than the reduced one (64 replicas), both runs are the full job (the row says
so); ``--steps-per-class`` lowers that width (``meshreduced.STEPS_PER_EXTRA_CLASS``) to show the
mechanism at small N. ``--speed`` adds reduced-only rows (the wall time of ``simulate --ranks N``
in this process).
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from chakra_convert_fast.converter import api
from chakra_convert_fast.converter.ranks import layoutscale
from chakra_convert_fast.converter.simulate import meshreduced

LAYOUTS = Path(__file__).resolve().parents[1] / "tests" / "data" / "layouts"
DEFAULT_CASES = [
    "tp2fsdp_np4:Ring",
    "tp2fsdp_np4:Switch",
    "fsdp_np2:Ring",
    "pp2_np4:Switch",
    "tp2pp2_np8:Switch",
    "tp2ddp_np4:Ring",
]
STEP_BOUND, COMM_BOUND = 0.001, 0.01


def all_to_all_job(prefix: Path, ranks: int) -> Path:
    """A data-parallel job whose ranks exchange over every rank (expert parallelism as wide as the
    job): per rank a compute node (rank r: 100 + 37 r us), an all-to-all of 1 MiB, compute, an
    all-to-all of 3 MiB, compute, the gradient all-reduce (4 MiB), compute. ``prefix.<r>.et`` for
    r < ranks and an empty group file; returns ``prefix``."""
    from chakra.schema.protobuf import et_def_pb2 as pb
    from chakra.src.third_party.utils.protolib import encodeMessage

    for rank in range(ranks):
        with open(f"{prefix}.{rank}.et", "wb") as fh:
            encodeMessage(fh, pb.GlobalMetadata(version="0.0.4"))
            steps = [(100 + 37 * rank, None), (80, (pb.ALL_TO_ALL, 1 << 20)), (50, (pb.ALL_TO_ALL, 3 << 20))]
            steps += [(30, (pb.ALL_REDUCE, 4 << 20)), (20, None)]
            node_id = 0
            for micros, collective in steps:
                if collective is not None:
                    node_id += 1
                    node = pb.Node(id=node_id, name="c10d::collective", type=pb.COMM_COLL_NODE, data_deps=[node_id - 1])
                    node.attr.extend(
                        [
                            pb.AttributeProto(name="is_cpu_op", bool_val=False),
                            pb.AttributeProto(name="comm_type", int64_val=collective[0]),
                            pb.AttributeProto(name="comm_size", int64_val=collective[1]),
                            pb.AttributeProto(name="pg_name", string_val="0"),
                        ]
                    )
                    encodeMessage(fh, node)
                node_id += 1
                compute = pb.Node(
                    id=node_id,
                    name="aten::mm",
                    type=pb.COMP_NODE,
                    duration_micros=micros,
                    data_deps=[node_id - 1] if node_id > 1 else [],
                )
                compute.attr.extend([pb.AttributeProto(name="is_cpu_op", bool_val=True)])
                encodeMessage(fh, compute)
    Path(f"{prefix}.comm_group.json").write_text("{}")
    return prefix


ALL_TO_ALL = "all-to-all"  # a case: all_to_all_job of 2 ranks (``all-to-all:Ring``); of 1: ``all-to-all-1``


def _prefix(case: str, work: Path) -> Path:
    if case.startswith(ALL_TO_ALL):
        ranks = 1 if case.endswith("-1") else 2
        return all_to_all_job(work / f"job{ranks}", ranks)
    path = Path(case)
    return path if path.parent != Path(".") else LAYOUTS / case / "job"


def _label(prefix: Path) -> str:
    if not Path(f"{prefix}.layout.json").exists():
        ranks = 1 if prefix.name == "job1" else 2
        return f"EP all-to-all x DDP {ranks} (every rank{'; rank 0 alone' if ranks == 1 else ''})"
    layout = layoutscale.read_layout(f"{prefix}.layout.json")
    mesh = layout.mesh
    parts = [f"TP {mesh.tp}"] * (mesh.tp > 1) + [f"PP {mesh.pp}"] * (mesh.pp > 1)
    parts.append(f"{'FSDP' if layout.dp_mode == 'fsdp' else 'DDP'} {mesh.dp}")
    return " x ".join(parts)


COLLECTIVE: list[str | None] = [None]  # --collective, for every run


def _timed(prefix: Path, ranks: int, topology: str, exact: bool) -> tuple[api.SimulationResult, float]:
    started = time.perf_counter()
    name, _, sizes = topology.partition(":")  # "Ring,Switch:8,*": --npus-per-dim 8,*
    options = api.SimulateOptions(topology=name, npus_per_dim=sizes or None, collective=COLLECTIVE[0])
    result = api.simulate(prefix, options, ranks=ranks, exact=exact, compact=exact)
    return result, time.perf_counter() - started


def _worst_comm(prefix: Path, small: api.SimulationResult, full: api.SimulationResult) -> float:
    if not Path(f"{prefix}.layout.json").exists():  # data-parallel: reduced rank r is full rank r
        return max(abs(a.comm_ns - b.comm_ns) / b.comm_ns for a, b in zip(small.ranks, full.ranks, strict=False))
    mesh = layoutscale.read_layout(f"{prefix}.layout.json").mesh
    block = mesh.tp * mesh.pp
    ranks = len(full.ranks)
    a = layoutscale.Mesh(len(small.ranks) // block, mesh.tp, mesh.pp)
    b = layoutscale.Mesh(ranks // block, mesh.tp, mesh.pp)
    worst = 0.0
    for r in range(len(small.ranks)):
        theirs = full.ranks[b.rank(*a.coords(r))].comm_ns
        worst = max(worst, abs(small.ranks[r].comm_ns - theirs) / theirs if theirs else 0.0)
    return worst


def _row(case: str, prefix: Path, topology: str, ranks: int) -> dict[str, Any]:
    small, t_small = _timed(prefix, ranks, topology, exact=False)
    full, t_full = _timed(prefix, ranks, topology, exact=True)
    plan = small.plan
    assert plan is not None
    step = (small.step_ns - full.step_ns) / full.step_ns
    comm = _worst_comm(prefix, small, full)
    return {
        "case": case,
        "layout": _label(prefix),
        "topology": topology,
        "ranks": ranks,
        "simulated": len(small.ranks),
        "reduced": plan.reduced,
        "network": plan.network.name if plan.network is not None else "(full)",
        "step_full_ms": full.step_ns / 1e6,
        "step_reduced_ms": small.step_ns / 1e6,
        "step_diff": step,
        "comm_diff": comm,
        "model_error": plan.worst_error,
        "wall_reduced": t_small,
        "wall_full": t_full,
        "ok": abs(step) <= STEP_BOUND and comm <= COMM_BOUND,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--case", action="append", help="CAPTURE:TOPOLOGY (default: the committed captures)")
    parser.add_argument("--ranks", default="64,256,1024")
    parser.add_argument("--speed", default="")
    parser.add_argument("--steps-per-class", type=int, default=meshreduced.STEPS_PER_EXTRA_CLASS)
    parser.add_argument("--collective", help="simulate --collective for every run (direct, ...)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    meshreduced.STEPS_PER_EXTRA_CLASS = args.steps_per_class
    COLLECTIVE[0] = args.collective
    cases = args.case or DEFAULT_CASES
    widths = [int(n) for n in args.ranks.split(",") if n]
    speeds = [int(n) for n in args.speed.split(",") if n]
    rows, fast = [], []
    work = Path(tempfile.mkdtemp(prefix="reduced-layouts-"))
    for case in cases:
        name, _, topology = case.partition(":")
        prefix = _prefix(name, work)
        for ranks in widths:
            rows.append(_row(Path(name).parent.name if "/" in name else name, prefix, topology or "Ring", ranks))
            print(rows[-1], file=sys.stderr, flush=True)
        for ranks in speeds:
            result, wall = _timed(prefix, ranks, topology or "Ring", exact=False)
            assert result.plan is not None
            fast.append((name, _label(prefix), topology or "Ring", ranks, len(result.ranks), result.step_ns, wall))
            print(fast[-1], file=sys.stderr, flush=True)
    command = "python -m bench.reduced_layouts " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))
    lines = [f"`{command}`", ""]
    if rows:
        lines += [
            "| capture | layout | topology | ranks | simulated | step full (ms) | step reduced (ms) | step diff "
            "| worst comm diff | model error | wall reduced (s) | wall full (s) | within 0.1% / 1% |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in rows:
            simulated = f"{r['simulated']:,} ({r['network']})" if r["reduced"] else f"{r['simulated']:,} (full)"
            lines.append(
                f"| {r['case']} | {r['layout']} | {r['topology']} | {r['ranks']:,} | {simulated} | "
                f"{r['step_full_ms']:,.3f} | {r['step_reduced_ms']:,.3f} | {r['step_diff']:+.4%} | "
                f"{r['comm_diff']:.4%} | {r['model_error']:.1e} | {r['wall_reduced']:.1f} | {r['wall_full']:.1f} | "
                f"{'yes' if r['ok'] else 'NO'} |"
            )
    if fast:
        lines += [
            "",
            "| capture | layout | topology | ranks | simulated | step (ms) | wall (s) |",
            "|---|---|---|---|---|---|---|",
        ]
        for case, label, net, width, npus, step, wall in fast:
            lines.append(f"| {case} | {label} | {net} | {width:,} | {npus:,} | {step / 1e6:,.3f} | {wall:.1f} |")
    shutil.rmtree(work, ignore_errors=True)
    text = "\n".join(lines) + "\n"
    if args.out:
        args.out.write_text(text)
    print(text)
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

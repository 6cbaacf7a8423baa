"""Compact graphs, measured in the real ASTRA-sim: the README's tables and plot (issue 17).

    ASTRA_SIM_HOME=../shared/astra-sim python -m bench.compact_table \\
        captures/gpt2_small_np2/gpt2_small_np2 captures/bert_small_np2/bert_small_np2 ... \\
        [--resnet] [--scaling PREFIX ...] [--ranks 8,16,...,1024] [--timeout 300] [--out bench/results]

Each PREFIX names the ``PREFIX.<rank>.et`` files of a capture (``chakra-profile --convert``
writes them, with ``PREFIX.comm_group.json``). For each capture, and the ResNet GPU trace with
``--resnet`` (converted with ``--astra-sim``, run as two ranks), the ranks are compacted
(``api.compact_ranks``) and both versions simulated: once with ``trace-enabled`` (the
collectives each rank completed, from ASTRA-sim's log) and once as ``simulate.sh`` runs by
default (the wall time). One table row per job: nodes per rank, the simulated step per rank
before and after, the largest difference, the collectives per rank, ASTRA-sim's wall time.

``--scaling``: each captured job PREFIX scaled to N ranks (``api.scale``, with and without
``compact``) for each N of ``--ranks``, simulated on the default Ring of N: wall and CPU seconds
of ASTRA-sim, and how many ranks finished. A run past ``--timeout`` seconds is stopped and larger
N are not tried for that trace (nor uncompacted past ``--max-uncompacted``). Writes ``compact.md``,
``compact_scaling.json`` and ``compact_scaling.png`` to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from bench import astrasim
from chakra_convert_fast.converter import ConvertOptions, api

RESNET = (
    Path(__file__).resolve().parents[1] / "tests/data/traces/resnet_ddp_synthetic_kineto/"
    "rank0_merged_by_chakra_trace_link.json.gz"
)
_FINISHED = re.compile(r"sys\[\d+\] finished")
DEFAULT_RANKS = "8,16,32,64,128,256,512,1024"


def plain_run(prefix: Path, npus: int, comm_groups: Path | None, timeout: float) -> tuple[float, int, bool]:
    """``simulate.sh PREFIX NPUS`` as a user runs it: (wall seconds, ranks finished, timed out);
    the CPU seconds it took are in ``LAST_CPU[0]`` (wall time on a shared machine counts the others)."""
    root = astrasim.home()
    assert root is not None
    env = dict(os.environ)
    if comm_groups is not None:
        env["COMM_GROUPS"] = str(comm_groups)
    with tempfile.TemporaryDirectory() as logs:
        env["LOGDIR"] = logs
        started, cpu = time.perf_counter(), _children_cpu()
        try:
            done = subprocess.run(
                [str(root / "simulate.sh"), str(prefix), str(npus)],
                env=env,
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            LAST_CPU[0] = float("nan")
            return time.perf_counter() - started, 0, True
        LAST_CPU[0] = _children_cpu() - cpu
        return time.perf_counter() - started, len(_FINISHED.findall(done.stdout)), False


LAST_CPU = [0.0]


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def job_row(name: str, prefix: Path, npus: int, comm_groups: Path | None, work: Path) -> str:
    compacted = work / f"{name}-compact" / "trace"
    compacted.parent.mkdir(parents=True)
    results = api.compact_ranks(prefix, compacted)
    sims, walls = {}, {}
    for label, which in (("before", prefix), ("after", compacted)):
        sim = astrasim.simulate(which, npus, comm_groups=comm_groups, workdir=work / f"{name}-{label}")
        if not sim.all_finished:
            raise RuntimeError(f"{name} {label}: not every rank finished:\n{sim.output[-2000:]}")
        sims[label] = sim
        walls[label], finished, _ = plain_run(which, npus, comm_groups, 3600)
        if finished != npus:
            raise RuntimeError(f"{name} {label}: {finished} of {npus} ranks finished without trace-enabled")
    before, after = sims["before"].ranks, sims["after"].ranks
    worst = max(abs(a.cycles - b.cycles) / b.cycles for a, b in zip(after, before, strict=True))
    same_comm = all(a.comm_done == b.comm_done for a, b in zip(after, before, strict=True))
    nodes = " / ".join(f"{r.nodes_read:,} -> {r.nodes_written:,}" for r in results[:1])
    collectives = "same" if same_comm else "DIFFERENT"
    return (
        f"| {name} | {npus} | {nodes} | {' / '.join(f'{r.cycles / 1e6:.3f}' for r in before)} | "
        f"{' / '.join(f'{r.cycles / 1e6:.3f}' for r in after)} | {worst:.1e} | "
        f"{before[0].comm_done.get('collective', 0)}, {collectives} | "
        f"{walls['before']:.2f} / {walls['after']:.2f} |"
    )


def scaling(
    prefixes: list[Path], ranks: list[int], timeout: float, max_uncompacted: int, work: Path
) -> list[dict[str, object]]:
    points: list[dict[str, object]] = []
    for prefix in prefixes:
        for compacted in (False, True):
            for npus in ranks:
                if not compacted and npus > max_uncompacted:
                    break
                job = work / f"{prefix.name}-{'compact' if compacted else 'plain'}-{npus}"
                job.mkdir()
                scaled = api.scale(prefix, job / "trace", npus, compact=compacted)
                wall, finished, timed_out = plain_run(job / "trace", npus, Path(scaled.comm_group_path), timeout)
                shutil.rmtree(job)
                point = {
                    "trace": prefix.name,
                    "compacted": compacted,
                    "nodes_per_rank": scaled.nodes[0],
                    "ranks": npus,
                    "seconds": round(wall, 2),
                    "cpu_seconds": round(LAST_CPU[0], 2),
                    "finished": finished,
                    "timed_out": timed_out,
                }
                points.append(point)
                print(json.dumps(point), flush=True)
                if timed_out:
                    break
    return points


def scaling_table(points: list[dict[str, object]], timeout: float) -> list[str]:
    ranks = sorted({int(str(p["ranks"])) for p in points})
    lines = [
        "| trace | nodes per rank | " + " | ".join(f"{n:,} ranks" for n in ranks) + " |",
        "|---|---:|" + "---:|" * len(ranks),
    ]
    keys = sorted({(str(p["trace"]), int(str(p["nodes_per_rank"]))) for p in points}, key=lambda k: (k[0], -k[1]))
    for trace, nodes in keys:
        cells = []
        for npus in ranks:
            found = [p for p in points if (p["trace"], p["nodes_per_rank"], p["ranks"]) == (trace, nodes, npus)]
            if not found:
                cells.append("not run")
            elif found[0]["timed_out"]:
                cells.append(f"> {timeout:.0f} s (stopped)")
            else:
                p = found[0]
                done = "" if p["finished"] == npus else f" ({p['finished']} finished)"
                cells.append(f"{p['seconds']} s ({p['cpu_seconds']} s CPU){done}")
        lines.append(f"| {trace} | {nodes:,} | " + " | ".join(cells) + " |")
    return lines


def plot(points: list[dict[str, object]], path: Path) -> None:
    import matplotlib  # the bench extra; only to draw

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    keys = sorted({(str(p["trace"]), int(str(p["nodes_per_rank"]))) for p in points})
    for trace, nodes in keys:
        mine = [p for p in points if (p["trace"], p["nodes_per_rank"]) == (trace, nodes) and not p["timed_out"]]
        compacted = bool(mine and mine[0]["compacted"])
        ax.plot(
            [int(str(p["ranks"])) for p in mine],
            [float(str(p["seconds"])) for p in mine],
            marker="o",
            linestyle="-" if compacted else "--",
            label=f"{trace}, {nodes:,} nodes/rank{' (compacted)' if compacted else ''}",
        )
    ax.axhline(60, color="grey", linewidth=0.8)
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="ranks (scaled job, Ring of N)",
        ylabel="ASTRA-sim wall time (s)",
        title="ASTRA-sim wall time against ranks, compacted and not",
    )
    ax.set_xticks([8, 16, 32, 64, 128, 256, 512, 1024], ["8", "16", "32", "64", "128", "256", "512", "1024"])
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.compact_table", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "captures", nargs="*", type=Path, help="PREFIX of PREFIX.<rank>.et (and PREFIX.comm_group.json)"
    )
    parser.add_argument("--resnet", action="store_true", help="also the ResNet GPU trace, as two ranks")
    parser.add_argument(
        "--scaling",
        nargs="*",
        type=Path,
        default=[],
        metavar="PREFIX",
        help="rank 0 of PREFIX copied to N ranks for each N of --ranks",
    )
    parser.add_argument("--ranks", default=DEFAULT_RANKS, help=f"N for --scaling (default {DEFAULT_RANKS})")
    parser.add_argument("--timeout", type=float, default=300, help="seconds before a scaling run is stopped")
    parser.add_argument(
        "--max-uncompacted",
        type=int,
        default=1024,
        metavar="N",
        help="largest job simulated uncompacted (default 1024)",
    )
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    args = parser.parse_args(argv)
    if astrasim.home() is None:
        parser.error(f"set {astrasim.ENV} (e.g. ../shared/astra-sim)")
    args.out.mkdir(parents=True, exist_ok=True)
    lines: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if args.captures or args.resnet:
            lines += [
                "| job | ranks | nodes per rank (rank 0), before -> after | simulated step per rank "
                "before (ms) | after (ms) | largest difference | collectives per rank, after | "
                "ASTRA-sim wall before / after (s) |",
                "|---|---:|---:|---:|---:|---:|---:|---:|",
            ]
            for prefix in args.captures:
                npus = len(list(prefix.parent.glob(f"{prefix.name}.*.et")))
                groups = Path(f"{prefix}.comm_group.json")
                lines.append(job_row(prefix.name, prefix, npus, groups if groups.exists() else None, work))
                print(lines[-1], flush=True)
            if args.resnet:
                api.convert(RESNET, work / "resnet.0.et", ConvertOptions(astra_sim=True))
                shutil.copy(work / "resnet.0.et", work / "resnet.1.et")
                lines.append(job_row("resnet (GPU, NCCL)", work / "resnet", 2, None, work))
                print(lines[-1], flush=True)
            lines.append("")
        if args.scaling:
            points = scaling(
                args.scaling, [int(n) for n in args.ranks.split(",")], args.timeout, args.max_uncompacted, work
            )
            (args.out / "compact_scaling.json").write_text(json.dumps(points, indent=1) + "\n")
            lines += scaling_table(points, args.timeout)
            plot(points, args.out / "compact_scaling.png")
    (args.out / "compact.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

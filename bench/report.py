"""Turn saved pytest-benchmark JSON into the README's Markdown table and a PNG plot.

    pytest bench/ --benchmark-autosave --benchmark-storage=bench/results
    python -m bench.report                      # newest JSON under bench/results
    python -m bench.report run.json --out bench/results

Writes ``benchmark.md`` (the side-by-side table; the ``--jobs`` scaling table; the Ray run, with the
estimate for ``--machines`` machines of ``--cores`` cores converting ``--estimate-ranks`` ranks of
``--estimate-nodes`` nodes) and ``benchmark.png`` (time and peak memory against node count, ours
and the reference) into ``--out``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
MB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Row:
    """One benchmark case, both converters."""

    name: str
    nodes: int
    ranks: int
    ours_s: float
    ours_mb: float  # peak summed RSS
    ref_s: float | None
    ref_mb: float | None
    ours_pss_mb: float | None = None  # peak summed PSS (runs before it was measured: None)
    ref_pss_mb: float | None = None

    @property
    def time_ratio(self) -> float | None:
        return self.ours_s / self.ref_s if self.ref_s else None

    @property
    def mem_ratio(self) -> float | None:
        return self.ours_mb / self.ref_mb if self.ref_mb else None

    @property
    def pss_ratio(self) -> float | None:
        return self.ours_pss_mb / self.ref_pss_mb if self.ours_pss_mb and self.ref_pss_mb else None


@dataclass(frozen=True, slots=True)
class ScalingRow:
    """One ``--jobs`` run."""

    packing: str  # json or gzip
    nodes: int
    jobs: int
    seconds: float
    peak_mb: float
    pss_mb: float | None
    processes: int | None
    sequential_fraction: float | None


@dataclass(frozen=True, slots=True)
class RayRow:
    """One convert-all run on a Ray cluster, and the same ranks by local processes."""

    ranks: int
    nodes_per_rank: int
    cluster_nodes: int
    local_s: float
    ray_s: float
    rank_mean_s: float
    rank_max_s: float


def _extra(paths: list[Path], kind: str) -> list[dict[str, Any]]:
    found = []
    for path in paths:
        doc: dict[str, Any] = json.loads(path.read_text())
        found += [
            b.get("extra_info", {})
            for b in doc.get("benchmarks", [])
            if b.get("extra_info", {}).get("kind", "convert") == kind
        ]
    return found


def load_scaling(paths: list[Path]) -> list[ScalingRow]:
    rows = [
        ScalingRow(
            i["packing"],
            int(i["nodes"]),
            int(i["jobs"]),
            float(i["ours_s"]),
            i["ours_peak_rss"] / MB,
            i["ours_peak_pss"] / MB if i.get("ours_peak_pss") else None,
            i.get("processes"),
            i.get("sequential_fraction"),
        )
        for i in _extra(paths, "scaling")
    ]
    return sorted(rows, key=lambda r: (r.packing != "json", r.nodes, r.jobs))


def load_ray(paths: list[Path]) -> list[RayRow]:
    return [
        RayRow(
            int(i["ranks"]),
            int(i["nodes_per_rank"]),
            int(i["ray_nodes"]),
            float(i["local_s"]),
            float(i["ray_s"]),
            float(i["rank_seconds_mean"]),
            float(i["rank_seconds_max"]),
        )
        for i in _extra(paths, "ray")
    ]


def markdown_scaling(rows: list[ScalingRow]) -> str:
    """Wall time by ``--jobs``, with the speed-up over one job and the sequential stages' share."""
    lines = [
        "| input | nodes | --jobs | processes | seconds | speed-up | sequential share | peak RSS / PSS (MB) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    single = {(r.packing, r.nodes): r.seconds for r in rows if r.jobs == 1}
    for r in rows:
        base = single.get((r.packing, r.nodes))
        lines.append(
            f"| {r.packing} | {r.nodes:,} | {r.jobs} | {r.processes if r.processes is not None else '?'} | "
            f"{r.seconds:.2f} | {_fmt(base / r.seconds if base else None, '.2f')} | "
            f"{_fmt(r.sequential_fraction, '.0%')} | {r.peak_mb:.0f} / {_fmt(r.pss_mb, '.0f')} |"
        )
    return "\n".join(lines) + "\n"


def markdown_ray(rows: list[RayRow], ranks: int, nodes: int, machines: int, cores: int) -> str:
    """The Ray runs, and the estimate for ``ranks`` ranks of ``nodes`` nodes on ``machines`` x ``cores``."""
    lines = [
        "| ranks | nodes / rank | Ray nodes | local processes (s) | Ray (s) | per rank, mean (s) | per rank, max (s) |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r.ranks} | {r.nodes_per_rank:,} | {r.cluster_nodes} | {r.local_s:.2f} | {r.ray_s:.2f} | "
            f"{r.rank_mean_s:.2f} | {r.rank_max_s:.2f} |"
        )
    if rows:
        r = max(rows, key=lambda row: row.nodes_per_rank)
        per_rank = r.rank_mean_s * nodes / r.nodes_per_rank
        waves = math.ceil(ranks / (machines * cores))
        lines += [
            "",
            f"Estimate: {ranks:,} ranks of {nodes:,} nodes on {machines} machines of {cores} cores (one "
            f"rank per core, a wave of {machines * cores}): {waves} wave(s) x {per_rank:,.0f} s a rank "
            f"(measured {r.rank_mean_s:.2f} s for {r.nodes_per_rank:,} nodes, scaled by node count) = "
            f"~{waves * per_rank / 60:,.1f} min, plus reading the inputs from shared storage.",
        ]
    return "\n".join(lines) + "\n"


def latest_json(folder: Path = RESULTS) -> Path:
    """The newest ``*.json`` under ``folder`` (pytest-benchmark autosaves into a subfolder)."""
    found = sorted(folder.rglob("*.json"), key=lambda p: p.stat().st_mtime)
    if not found:
        raise FileNotFoundError(
            f"no benchmark JSON under {folder}; run pytest bench/ --benchmark-autosave --benchmark-storage={folder}"
        )
    return found[-1]


def load_rows(paths: list[Path]) -> list[Row]:
    """Rows from one or more pytest-benchmark JSON files, sorted by node count."""
    rows = []
    for path in paths:
        doc: dict[str, Any] = json.loads(path.read_text())
        for bench in doc.get("benchmarks", []):
            info = bench.get("extra_info", {})
            if "nodes" not in info or "ours_s" not in info or info.get("kind", "convert") != "convert":
                continue
            ref_rss, ours_pss, ref_pss = info.get("ref_peak_rss"), info.get("ours_peak_pss"), info.get("ref_peak_pss")
            rows.append(
                Row(
                    bench["name"],
                    int(info["nodes"]),
                    int(info.get("ranks", 0)),
                    float(info["ours_s"]),
                    info["ours_peak_rss"] / MB,
                    info.get("ref_s"),
                    ref_rss / MB if ref_rss else None,
                    ours_pss / MB if ours_pss else None,
                    ref_pss / MB if ref_pss else None,
                )
            )
    return sorted(rows, key=lambda r: (r.ranks, r.nodes))


def _fmt(v: float | None, spec: str) -> str:
    return "skipped" if v is None else format(v, spec)


def markdown(rows: list[Row]) -> str:
    """The README table: one line per case, ratios are ours / reference (lower is better)."""
    lines = [
        "| trace | nodes | ours (s) | reference (s) | time ratio | ours peak RSS / PSS (MB) "
        "| reference peak RSS / PSS (MB) | memory ratio RSS / PSS | ours nodes/s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r.ranks}-rank GPT-2 | {r.nodes:,} | {r.ours_s:.2f} | {_fmt(r.ref_s, '.2f')} | "
            f"{_fmt(r.time_ratio, '.2f')} | {r.ours_mb:.0f} / {_fmt(r.ours_pss_mb, '.0f')} | "
            f"{_fmt(r.ref_mb, '.0f')} / {_fmt(r.ref_pss_mb, '.0f')} | "
            f"{_fmt(r.mem_ratio, '.3f')} / {_fmt(r.pss_ratio, '.3f')} | {r.nodes / r.ours_s:,.0f} |"
        )
    return "\n".join(lines) + "\n"


def plot(rows: list[Row], path: Path) -> None:
    """Time and peak memory against node count, log-log, ours and reference."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(11, 4.2))
    for ranks in sorted({r.ranks for r in rows}):
        sel = [r for r in rows if r.ranks == ranks]
        ref = [r for r in sel if r.ref_s is not None]
        ax_t.plot([r.nodes for r in sel], [r.ours_s for r in sel], "o-", label=f"ours, {ranks}-rank")
        ax_m.plot([r.nodes for r in sel], [r.ours_mb for r in sel], "o-", label=f"ours (summed RSS), {ranks}-rank")
        pss = [r for r in sel if r.ours_pss_mb is not None]
        if pss:
            ax_m.plot([r.nodes for r in pss], [r.ours_pss_mb for r in pss], "o:", label=f"ours (PSS), {ranks}-rank")
        if ref:
            ax_t.plot([r.nodes for r in ref], [r.ref_s for r in ref], "s--", label=f"reference, {ranks}-rank")
            ax_m.plot([r.nodes for r in ref], [r.ref_mb for r in ref], "s--", label=f"reference, {ranks}-rank")
    for ax, title, unit in ((ax_t, "wall time", "seconds"), (ax_m, "peak memory", "MB")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("nodes in the merged trace")
        ax.set_ylabel(unit)
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("chakra-convert-fast vs chakra_converter (mlc-chakra 1.0.0)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.report", description=__doc__.split("\n\n")[0])
    parser.add_argument("json", nargs="*", type=Path, help="pytest-benchmark JSON files (default: the newest)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="folder for benchmark.md and benchmark.png")
    parser.add_argument("--estimate-ranks", type=int, default=1024)
    parser.add_argument("--estimate-nodes", type=int, default=1_000_000, help="nodes per rank of the estimate")
    parser.add_argument("--machines", type=int, default=32)
    parser.add_argument("--cores", type=int, default=16, help="cores per machine of the estimate")
    args = parser.parse_args(argv)
    try:
        paths = args.json or [latest_json()]
        rows, scaling, ray = load_rows(paths), load_scaling(paths), load_ray(paths)
    except (FileNotFoundError, json.JSONDecodeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not rows and not scaling and not ray:
        print("error: no benchmark rows with extra_info found", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    table = markdown(rows) if rows else ""
    if scaling:
        table += "\n### --jobs scaling\n\n" + markdown_scaling(scaling)
    if ray:
        table += "\n### convert-all on Ray\n\n" + markdown_ray(
            ray, args.estimate_ranks, args.estimate_nodes, args.machines, args.cores
        )
    (args.out / "benchmark.md").write_text(table)
    if rows:
        plot(rows, args.out / "benchmark.png")
    print(table, end="")
    print(f"wrote {args.out / 'benchmark.md'} and {args.out / 'benchmark.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())


def emit_table(lines: list[str], out: Path | None) -> int:
    """Print a table the bench scripts made (and write it to ``out`` if given); the exit status."""
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if out:
        out.write_text(text)
    return 0

"""``chakra_converter Text`` against ``chakra-convert-fast text``: the README's tool-table row.

    python -m bench.text_table [--repeat 3] [--out bench/results/text.md]

Each case converts one ASTRA-sim 1.0 text workload for N NPUs and P passes with both tools, each
in its own process (``bench/measure.py``: wall time, peak RSS; CPU seconds are the children's
``getrusage`` around the run), best of ``--repeat`` runs, and compares every output file byte
for byte. Workloads: ``tests/data/text`` (ASTRA-sim's DLRM example, its Transformer with
re-computation, which the reference refuses) and a generated 54-layer data-parallel one shaped
like ASTRA-sim's ``Resnet50_DataParallel.txt`` (same layer count, values drawn from a fixed seed).
"""

from __future__ import annotations

import argparse
import filecmp
import random
import resource
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from bench.measure import Run, measure

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "text"
RESULTS = ROOT / "bench" / "results"
MB = 1024 * 1024


def resnet_like(path: Path) -> Path:
    rng = random.Random(50)
    lines = ["DATA", "54"]
    for k in range(54):
        fwd, ig, wg = (rng.randint(1_000, 400_000) for _ in range(3))
        size = rng.randint(4_096, 9_437_184)
        lines.append(f"conv{k}\t-1\t{fwd}\tNONE\t0\t{ig}\tNONE\t0\t{wg}\tALLREDUCE\t{size}\t10")
    path.write_text("\n".join(lines) + "\n")
    return path


@dataclass(frozen=True)
class Case:
    label: str
    workload: str  # a file of tests/data/text, or "resnet" for the generated one
    npus: int
    passes: int


CASES = [
    Case("ResNet-50-shaped DATA, 54 layers (tutorial size)", "resnet", 64, 1),
    Case("ResNet-50-shaped DATA, 54 layers", "resnet", 256, 10),
    Case("ResNet-50-shaped DATA, 54 layers (215k nodes a file)", "resnet", 3, 1000),
    Case("ASTRA-sim's DLRM_HybridParallel (HYBRID_DLRM)", "dlrm_hybrid.txt", 64, 100),
    Case("ASTRA-sim's Transformer_HybridParallel_Fwd_In_Bckwd", "transformer_fwd_in_bckwd.txt", 64, 10),
]


def timed(cmd: list[str], cwd: Path) -> tuple[Run, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    run = measure(cmd, cwd=cwd)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return run, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def best(cmd: list[str], cwd: Path, repeat: int) -> tuple[Run, float]:
    runs = [timed(cmd, cwd) for _ in range(repeat)]
    return min(runs, key=lambda r: r[0].seconds)


def run_case(case: Case, workdir: Path, repeat: int) -> dict[str, object]:
    source = resnet_like(workdir / "resnet.txt") if case.workload == "resnet" else DATA / case.workload
    ours_exe = shutil.which("chakra-convert-fast")
    ref_exe = shutil.which("chakra_converter")
    assert ours_exe and ref_exe, "install the package and mlc-chakra (pip install -e '.[bench]')"
    (workdir / "ours").mkdir()
    (workdir / "ref").mkdir()
    ours, ours_cpu = best(
        [
            ours_exe,
            "text",
            str(source),
            str(workdir / "ours" / "w"),
            "--npus",
            str(case.npus),
            "--passes",
            str(case.passes),
            "-q",
        ],
        workdir,
        repeat,
    )
    assert ours.returncode == 0, ours.stderr
    ref, ref_cpu = best(
        [
            ref_exe,
            "--log-filename",
            str(workdir / "ref.log"),
            "Text",
            "--input",
            str(source),
            "--output",
            str(workdir / "ref" / "w"),
            "--num-npus",
            str(case.npus),
            "--num-passes",
            str(case.passes),
        ],
        workdir,
        repeat,
    )
    refused = ref.returncode != 0
    if refused:
        assert "Unsupported parallelism type" in ref.stderr, ref.stderr
        parity = "refused by the reference"
    else:
        same = all(
            filecmp.cmp(workdir / "ours" / f"w.{r}.et", workdir / "ref" / f"w.{r}.et", shallow=False)
            for r in range(case.npus)
        )
        assert same, f"{case.label}: outputs differ"
        parity = "byte-identical"
    total = sum((workdir / "ours" / f"w.{r}.et").stat().st_size for r in range(case.npus))
    return {
        "case": case,
        "kind": source.read_text().split()[0],
        "parity": parity,
        "bytes": total,
        "ours": ours,
        "ours_cpu": ours_cpu,
        "ref": None if refused else ref,
        "ref_cpu": ref_cpu,
    }


def table(rows: list[dict[str, object]]) -> str:
    lines = [
        "| workload | type | NPUs x passes | output (MB) | parity | reference wall / CPU (s) "
        "| ours wall / CPU (s) | CPU ratio | reference peak RSS (MB) | ours peak RSS (MB) |",
        "|---|---|---:|---:|---|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        case: Case = row["case"]  # type: ignore[assignment]
        ours: Run = row["ours"]  # type: ignore[assignment]
        ref: Run | None = row["ref"]  # type: ignore[assignment]
        ours_cpu, ref_cpu = float(row["ours_cpu"]), float(row["ref_cpu"])  # type: ignore[arg-type]
        ref_time = "refused" if ref is None else f"{ref.seconds:.2f} / {ref_cpu:.2f}"
        ratio = "-" if ref is None else f"{ours_cpu / ref_cpu:.2f}"
        ref_mem = "-" if ref is None else f"{ref.peak_rss_bytes / MB:.0f}"
        lines.append(
            f"| {case.label} | {row['kind']} | {case.npus} x {case.passes} | "
            f"{int(row['bytes']) / MB:.1f} | {row['parity']} | {ref_time} | "  # type: ignore[call-overload]
            f"{ours.seconds:.2f} / {ours_cpu:.2f} | {ratio} | {ref_mem} | {ours.peak_rss_bytes / MB:.0f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULTS / "text.md")
    args = parser.parse_args()
    rows = []
    for case in CASES:
        with tempfile.TemporaryDirectory(prefix="chakra-text-bench-") as tmp:
            rows.append(run_case(case, Path(tmp), args.repeat))
            print(table(rows[-1:]).splitlines()[-1], flush=True)
    text = table(rows)
    args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()

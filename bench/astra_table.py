"""From capture to simulation, measured: the README's table of simulated vs measured step times.

    ASTRA_SIM_HOME=../shared/astra-sim python -m bench.astra_table [--size small] [--out bench/results/astra.md]

For GPT-2 and BERT on 2 and 4 CPU ranks: ``chakra-profile --convert`` (which links, converts with
``--astra-sim`` and writes the communicator groups), ``check``, then ``simulate.sh`` (congestion
unaware and aware); one row per job with the measured step times from ``{name}_summary.json``
and, per rank, the simulated time and the time its communication nodes took.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from bench import astrasim
from bench.report import emit_table

JOBS = [("gpt2", 2), ("bert", 2), ("gpt2", 4), ("bert", 4)]


def run_job(model: str, ranks: int, size: str, workdir: Path) -> list[str]:
    name = f"{model}_np{ranks}"
    outdir = workdir / name
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "chakra_convert_fast.profiler.cli",
            "--model",
            model,
            "--size",
            size,
            "--nproc",
            str(ranks),
            "--steps",
            "6",
            "--wait",
            "2",
            "--warmup",
            "1",
            "--active",
            "1",
            "--outdir",
            str(outdir),
            "--name",
            name,
            "--convert",
        ],
        check=True,
        env=env,
        capture_output=True,
    )
    summary = json.loads((outdir / f"{name}_summary.json").read_text())
    groups = outdir / f"{name}.comm_group.json"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "chakra_convert_fast.converter",
            "check",
            *(str(outdir / f"{name}.{r}.et") for r in range(ranks)),
            "--comm-groups",
            str(groups),
        ],
        check=True,
        capture_output=True,
    )
    rows = []
    step = summary["step_time_s"]
    for backend in ("unaware", "aware"):
        sim = astrasim.simulate(
            outdir / name, ranks, backend=backend, comm_groups=groups, workdir=workdir / f"{name}-{backend}"
        )
        if not sim.all_finished:
            raise RuntimeError(f"{name} {backend}: not every rank finished:\n{sim.output[-2000:]}")
        simulated = " / ".join(f"{r.cycles / 1e6:.1f}" for r in sim.ranks)
        comm = " / ".join(f"{r.comm_cycles / 1e6:.2f}" for r in sim.ranks)
        collectives = sum(r.comm_done.get("collective", 0) for r in sim.ranks) // ranks
        rows.append(
            f"| {model} {summary['size']} ({summary['parameters'] / 1e6:.1f}M) | {ranks} | {backend} | "
            f"{step['untraced_median'] * 1e3:.0f} / {step['traced_median'] * 1e3:.0f} | {simulated} | "
            f"{comm} | {collectives} |"
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.astra_table", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size", default="small", help="chakra-profile --size (default: small)")
    parser.add_argument("--out", type=Path, help="also write the table here")
    args = parser.parse_args(argv)
    if astrasim.home() is None:
        parser.error(f"set {astrasim.ENV} to the ASTRA-sim folder (../shared/astra-sim)")
    lines = [
        "| model (parameters) | ranks | ASTRA-sim backend | measured step, untraced / traced (ms) | "
        "simulated step per rank (ms) | simulated communication per rank (ms) | collectives per rank |",
        "|---|---:|---|---:|---:|---:|---:|",
    ]
    with tempfile.TemporaryDirectory(prefix="astra-table-") as tmp:
        for model, ranks in JOBS:
            lines += run_job(model, ranks, args.size, Path(tmp))
            print(lines[-1], file=sys.stderr)
    return emit_table(lines, args.out)


if __name__ == "__main__":
    sys.exit(main())

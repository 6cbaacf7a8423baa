"""Measured against simulated: the README's table of the 4-rank step as measured, as ASTRA-sim
simulates the real 4-rank capture, and as it simulates the 2-rank capture scaled to 4 ranks.

    ASTRA_SIM_HOME=../shared/astra-sim python -m bench.simulate_compare CAPTURES [--out FILE.md]

CAPTURES holds ``{model}_small_np{2,4}/`` as ``chakra-profile --model M --size small --nproc N
--steps 4 --wait 1 --warmup 1 --active 1 --convert`` writes them (``<name>.<rank>.et``, the group
file, ``<name>_summary.json``). Each job is simulated on a Ring of its ranks (50 GB/s, 500 ns,
congestion-unaware); the scaled job is written by ``scale`` into a temporary folder.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from bench.report import emit_table
from chakra_convert_fast.converter import api


def _ms(ns: int) -> str:
    return f"{ns / 1e6:,.0f}"


def row(captures: Path, model: str, workdir: Path) -> str:
    two, four = captures / f"{model}_small_np2", captures / f"{model}_small_np4"
    measured = {
        n: json.loads((captures / f"{model}_small_np{n}" / f"{model}_small_np{n}_summary.json").read_text())
        for n in (2, 4)
    }
    real = api.simulate(four / f"{model}_small_np4")
    started = time.monotonic()
    api.scale(two / f"{model}_small_np2", workdir / f"{model}_scaled4", 4)
    scale_seconds = time.monotonic() - started
    scaled = api.simulate(workdir / f"{model}_scaled4")
    base = api.simulate(two / f"{model}_small_np2")
    same = [(r.collectives, r.sends, r.recvs) for r in real.ranks] == [
        (r.collectives, r.sends, r.recvs) for r in scaled.ranks
    ]
    steps = {n: measured[n]["step_time_s"] for n in (2, 4)}
    return (
        f"| {model} small ({measured[4]['parameters'] / 1e6:.1f}M) | "
        f"{steps[2]['traced_median'] * 1e3:,.0f} / {steps[2]['untraced_median'] * 1e3:,.0f} | "
        f"{_ms(base.step_ns)} | "
        f"{steps[4]['traced_median'] * 1e3:,.0f} / {steps[4]['untraced_median'] * 1e3:,.0f} | "
        f"{_ms(real.step_ns)} ({' / '.join(_ms(r.step_ns) for r in real.ranks)}) | "
        f"{_ms(scaled.step_ns)} ({' / '.join(_ms(r.step_ns) for r in scaled.ranks)}) | "
        f"{_ms(real.slowest.comm_busy_ns)} / {_ms(scaled.slowest.comm_busy_ns)} | "
        f"{'yes' if same else 'NO'} | {real.seconds:.1f} / {scale_seconds:.1f} + {scaled.seconds:.1f} |"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.simulate_compare",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("captures", type=Path, help="the folder of {model}_small_np{2,4}/")
    parser.add_argument("--models", default="gpt2,bert")
    parser.add_argument("--out", type=Path, help="also write the table here")
    args = parser.parse_args(argv)
    lines = [
        "| model | 2 ranks measured, traced / untraced step (ms) | 2 ranks simulated (ms) | 4 ranks measured, "
        "traced / untraced step (ms) | real 4-rank capture simulated: job (per rank) (ms) | 2-rank capture scaled "
        "to 4, simulated: job (per rank) (ms) | communication of the slowest rank, real / scaled (ms) | same "
        "collectives per rank | ASTRA-sim wall time, real / scale + scaled (s) |",
        "|---|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    with tempfile.TemporaryDirectory(prefix="simulate-compare-") as tmp:
        for model in args.models.split(","):
            lines.append(row(args.captures, model, Path(tmp)))
            print(lines[-1], file=sys.stderr)
    return emit_table(lines, args.out)


if __name__ == "__main__":
    sys.exit(main())

"""This machine's own roofline, one thread (as the CPU captures run: ``OMP_NUM_THREADS=1``).

    python -m bench.roofline_machine [--out bench/results/roofline_machine.json] [--seconds S]

Peak FLOP/s: ``torch.mm`` in fp32 on the matrix shapes of the ``--size small`` models (GPT-2's and
BERT's projections, MLP and LM head, forward and backward) and a square 1024 one; the best
shape's rate is the peak (ASTRA-sim's ``peak-perf``: the roofline's flat part). Bandwidth: a
64 MiB fp32 tensor copied into another (``Tensor.copy_``), bytes read + written per second (its
``local-mem-bw``: what ``tensor_size``, bytes read + written, is divided by). Each figure is the
median of timed repeats after a warm-up, in the thread's CPU time (``peak_tflops``,
``mem_bandwidth_gbs``: what a core does, also on a shared machine) and in wall time (``wall_*``:
what it did while sharing the cores with whatever else ran).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

#: (m, k, n) of the matrix products of gpt2/bert --size small (hidden 256, MLP 1024, 512 tokens a
#: step, GPT-2's LM head over its 50,257-token vocabulary), and one square product.
SHAPES = ((512, 256, 768), (512, 256, 256), (512, 256, 1024), (512, 1024, 256), (256, 512, 1024),
          (512, 256, 50257), (512, 50257, 256), (1024, 1024, 1024))
COPY_BYTES = 64 << 20


def _timed(run: Any, seconds: float) -> tuple[float, float]:
    """Median wall and CPU seconds of one call of ``run`` over about ``seconds`` of CPU time of
    repeats (after a warm-up). On a shared machine the wall time includes the time the thread
    waited for a core; the CPU time (``time.thread_time``) is what the core took."""
    run()
    walls: list[float] = []
    cpus: list[float] = []
    spent = 0.0
    while spent < seconds or len(walls) < 3:
        wall, cpu = time.perf_counter(), time.thread_time()
        run()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.thread_time() - cpu)
        spent += cpus[-1]
    return statistics.median(walls), statistics.median(cpus)


def measure(seconds: float = 1.0) -> dict[str, Any]:
    import torch

    torch.set_num_threads(1)
    rates: dict[str, tuple[float, float]] = {}
    for m, k, n in SHAPES:
        a, b = torch.randn(m, k), torch.randn(k, n)
        out = torch.empty(m, n)
        wall, cpu = _timed(lambda a=a, b=b, out=out: torch.mm(a, b, out=out), seconds)
        rates[f"{m}x{k}x{n}"] = (2 * m * k * n / wall, 2 * m * k * n / cpu)
    src, dst = torch.randn(COPY_BYTES // 4), torch.empty(COPY_BYTES // 4)
    copy_wall, copy_cpu = _timed(lambda: dst.copy_(src), seconds)
    return {
        "peak_tflops": max(cpu for _, cpu in rates.values()) / 1e12,
        "mem_bandwidth_gbs": 2 * COPY_BYTES / copy_cpu / 1e9,
        "wall_peak_tflops": max(wall for wall, _ in rates.values()) / 1e12,
        "wall_mem_bandwidth_gbs": 2 * COPY_BYTES / copy_wall / 1e9,
        "matmul_gflops_by_shape": {shape: round(cpu / 1e9, 2) for shape, (_, cpu) in rates.items()},
        "copy_bytes": COPY_BYTES,
        "threads": torch.get_num_threads(),
        "processes": 1,
        "torch": torch.__version__,
        "cpu": platform.processor() or platform.machine(),
        "load_average": os.getloadavg(),
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def measure_in_processes(procs: int, seconds: float) -> dict[str, Any]:
    """``measure`` in ``procs`` processes at once (as many as the capture's ranks, each one thread,
    so that they share the cores as the ranks did); each figure is the median over them."""
    if procs == 1:
        return measure(seconds)
    with multiprocessing.get_context("spawn").Pool(procs) as pool:
        results = pool.map(measure, [seconds] * procs)
    merged = dict(results[0])
    for key in ("peak_tflops", "mem_bandwidth_gbs", "wall_peak_tflops", "wall_mem_bandwidth_gbs"):
        merged[key] = statistics.median(r[key] for r in results)
    merged["processes"] = procs
    merged["load_average"] = os.getloadavg()
    return merged


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("bench/results/roofline_machine.json"))
    parser.add_argument("--seconds", type=float, default=1.0, help="timed repeats per figure (about)")
    parser.add_argument("--procs", type=int, default=1, help="processes measuring at once (the capture's ranks)")
    args = parser.parse_args(argv)
    result = measure_in_processes(args.procs, args.seconds)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"peak {result['peak_tflops'] * 1e3:.1f} GFLOP/s (best of {len(SHAPES)} mm shapes), "
          f"bandwidth {result['mem_bandwidth_gbs']:.1f} GB/s (copy, read + written), one thread, CPU time; "
          f"wall time {result['wall_peak_tflops'] * 1e3:.1f} GFLOP/s, {result['wall_mem_bandwidth_gbs']:.1f} GB/s; "
          f"load average {result['load_average'][0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""This machine's own roofline, one thread (as the CPU captures run: ``OMP_NUM_THREADS=1``).

    python -m bench.roofline_machine [--out bench/results/roofline_machine.json] [--seconds S]

Peak FLOP/s: ``torch.mm`` in fp32 on the matrix shapes of the ``--size small`` models (GPT-2's and
BERT's projections, MLP and LM head, forward and backward) and a square 1024 one; the best
shape's rate is the peak (ASTRA-sim's ``peak-perf``: the roofline's flat part). Bandwidth: a
64 MiB fp32 tensor copied into another (``Tensor.copy_``), bytes read + written per second (its
``local-mem-bw``: what ``tensor_size``, bytes read + written, is divided by). Each figure is the
median of timed repeats after a warm-up, in the thread's CPU time (``peak_tflops``,
``mem_bandwidth_gbs``: what a core does, also on a shared machine) and in wall time (``wall_*``:
what it did while sharing the cores with whatever else ran). And what the capture's tracing adds
to each op's recorded duration (``profiler_us_per_op``: a small ``aten::add`` and an ``aten::view``
timed with and without it; ``untraced_us_per_op``: their time without it), for
``bench.roofline_check`` to take the profiler's cost out of the measured compute.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

#: (m, k, n) of the matrix products of gpt2/bert --size small (hidden 256, MLP 1024, 512 tokens a
#: step, GPT-2's LM head over its 50,257-token vocabulary), and one square product.
SHAPES = (
    (512, 256, 768),
    (512, 256, 256),
    (512, 256, 1024),
    (512, 1024, 256),
    (256, 512, 1024),
    (512, 256, 50257),
    (512, 50257, 256),
    (1024, 1024, 1024),
)
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


_BARRIER: Any = None  # set in each process of ``measure_in_processes``: they start each figure together


def _start_together(barrier: Any) -> None:
    global _BARRIER
    _BARRIER = barrier


def _together() -> None:
    if _BARRIER is not None:
        _BARRIER.wait()


def measure(seconds: float = 1.0) -> dict[str, Any]:
    import torch

    torch.set_num_threads(1)
    rates: dict[str, tuple[float, float]] = {}
    for m, k, n in SHAPES:
        a, b = torch.randn(m, k), torch.randn(k, n)
        out = torch.empty(m, n)
        _together()
        wall, cpu = _timed(lambda a=a, b=b, out=out: torch.mm(a, b, out=out), seconds)
        rates[f"{m}x{k}x{n}"] = (2 * m * k * n / wall, 2 * m * k * n / cpu)
    src, dst = torch.randn(COPY_BYTES // 4), torch.empty(COPY_BYTES // 4)
    _together()
    copy_wall, copy_cpu = _timed(lambda: dst.copy_(src), seconds)
    _together()
    profiler_us, untraced_us = profiler_cost()
    return {
        "peak_tflops": max(cpu for _, cpu in rates.values()) / 1e12,
        "mem_bandwidth_gbs": 2 * COPY_BYTES / copy_cpu / 1e9,
        "wall_peak_tflops": max(wall for wall, _ in rates.values()) / 1e12,
        "wall_mem_bandwidth_gbs": 2 * COPY_BYTES / copy_wall / 1e9,
        "profiler_us_per_op": {name: round(us, 2) for name, us in profiler_us.items()},
        "untraced_us_per_op": {name: round(us, 2) for name, us in untraced_us.items()},
        "matmul_gflops_by_shape": {shape: round(cpu / 1e9, 2) for shape, (_, cpu) in rates.items()},
        "copy_bytes": COPY_BYTES,
        "threads": torch.get_num_threads(),
        "processes": 1,
        "torch": torch.__version__,
        "cpu": platform.processor() or platform.machine(),
        "load_average": os.getloadavg(),
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def profiler_cost(ops: int = 2000) -> tuple[dict[str, float], dict[str, float]]:
    """What ``chakra-profile``'s tracing (Kineto with shapes, and the execution trace observer, as
    ``profiler/tracing.py`` sets them up) adds to the duration it records for an op: per op name
    (a 1,024-element ``aten::add`` and an ``aten::view``), the mean recorded duration less the
    same op's mean time untraced, and that untraced time, in microseconds."""
    import torch
    from torch.profiler import ExecutionTraceObserver, ProfilerActivity, profile

    x, y, v = torch.randn(1024), torch.randn(1024), torch.randn(64, 64)
    runs: dict[str, Callable[[], Any]] = {"aten::add": lambda: torch.add(x, y), "aten::view": lambda: v.view(4096)}
    untraced: dict[str, float] = {}
    for name, run in runs.items():
        for _ in range(ops):
            run()
        start = time.perf_counter()
        for _ in range(ops):
            run()
        untraced[name] = (time.perf_counter() - start) / ops * 1e6
    with tempfile.TemporaryDirectory(prefix="roofline-machine-") as tmp:
        observer = ExecutionTraceObserver().register_callback(str(Path(tmp) / "host.json"))
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True, execution_trace_observer=observer) as prof:
            for run in runs.values():
                for _ in range(ops):
                    run()
        recorded: dict[str, list[float]] = {name: [] for name in runs}
        for event in prof.events():
            if event.name in recorded:
                recorded[event.name].append(event.cpu_time_total)  # us, the op's recorded span
    added = {name: statistics.mean(recorded[name]) - untraced[name] for name in runs if recorded[name]}
    return added, untraced


def measure_in_processes(procs: int, seconds: float) -> dict[str, Any]:
    """``measure`` in ``procs`` processes at once (as many as the capture's ranks, each one thread,
    so that they share the cores and the memory bus as the ranks did, each figure started by all at
    once); each figure is the median over them."""
    if procs == 1:
        return measure(seconds)
    context = multiprocessing.get_context("spawn")
    with context.Pool(procs, initializer=_start_together, initargs=(context.Barrier(procs),)) as pool:
        results = pool.map(measure, [seconds] * procs)
    merged = dict(results[0])
    for key in ("peak_tflops", "mem_bandwidth_gbs", "wall_peak_tflops", "wall_mem_bandwidth_gbs"):
        merged[key] = statistics.median(r[key] for r in results)
    for key in ("profiler_us_per_op", "untraced_us_per_op"):
        merged[key] = {name: round(statistics.median(r[key][name] for r in results), 2) for name in results[0][key]}
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
    print(
        f"peak {result['peak_tflops'] * 1e3:.1f} GFLOP/s (best of {len(SHAPES)} mm shapes), "
        f"bandwidth {result['mem_bandwidth_gbs']:.1f} GB/s (copy, read + written), one thread, CPU time; "
        f"wall time {result['wall_peak_tflops'] * 1e3:.1f} GFLOP/s, {result['wall_mem_bandwidth_gbs']:.1f} GB/s; "
        f"load average {result['load_average'][0]:.1f}; the profiler adds "
        + ", ".join(f"{us:.1f} us to each {name}" for name, us in result["profiler_us_per_op"].items())
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

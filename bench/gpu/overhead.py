"""What the tracing costs each op it records, on the machine it runs on (issue 27).

chakra-profile traces with an ExecutionTraceObserver and the Kineto profiler (``record_shapes``,
CPU and CUDA activities; ``profiler/tracing.py``). Both hooks run at every op's entry and exit, so
a traced op's measured duration holds their cost, and a traced step is slower than an untraced
one. This times N calls of one op untraced and traced, the same way, and reports the difference
per call: per recorded op, for an op that launches no kernel (``aten::view``), one that launches
one (``aten::add_`` on the GPU) and one with three tensor inputs (``aten::addmm``, one kernel).

Two parts of that cost matter apart: what lands *inside* the op's recorded span (its traced
duration is that much too long) and what lands outside it (between ops: a parent's exclusive time,
or no op's). The inside part is the op's mean recorded duration under chakra-profile's tracing
less its mean recorded duration under the lightest tracing (Kineto, CPU activity alone, no shapes,
no observer), which stands for the untraced op.

    python -m bench.gpu.overhead [--ops 20000] [--repeats 5] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch


def _ops(device: torch.device) -> dict[str, Callable[[], object]]:
    x = torch.ones(16, device=device)
    m = torch.ones(8, 8, device=device)
    b = torch.ones(8, device=device)
    return {
        "aten::view (no kernel)": lambda: x.view(-1),
        "aten::add_ (one kernel)": lambda: x.add_(1.0),
        "aten::addmm (3 inputs, one kernel)": lambda: torch.addmm(b, m, m),
    }


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def _time(op: Callable[[], object], n: int, device: torch.device) -> float:
    _sync(device)
    start = time.perf_counter()
    for _ in range(n):
        op()
    _sync(device)
    return time.perf_counter() - start


def _traced(
    op: Callable[[], object], name: str, n: int, device: torch.device, folder: Path, full: bool
) -> tuple[float, float]:
    """The same loop inside an active profiler window: configured as chakra-profile's capture
    (``full``) or the lightest (CPU activity alone); (wall seconds, mean recorded span in us)."""
    from torch.profiler import ExecutionTraceObserver, ProfilerActivity, profile

    observer = ExecutionTraceObserver().register_callback(str(folder / "host.json")) if full else None
    activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if device.type == "cuda" and full else [])]
    with profile(activities=activities, record_shapes=full, execution_trace_observer=observer) as prof:
        elapsed = _time(op, n, device)
    spans = [e.cpu_time_total for e in prof.events() if e.name == name]
    if observer is not None:
        observer.unregister_callback()
    return elapsed, statistics.mean(spans) if spans else float("nan")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    result: dict[str, Any] = {
        "device": torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "ops_per_loop": args.ops,
        "repeats": args.repeats,
        "per_op_us": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        for label, op in _ops(device).items():
            name = label.split()[0]
            _time(op, 1000, device)  # warm up
            plain, traced, span, light = [], [], [], []
            for _ in range(args.repeats):
                plain.append(_time(op, args.ops, device) / args.ops * 1e6)
                wall, mean_span = _traced(op, name, args.ops, device, Path(tmp), True)
                traced.append(wall / args.ops * 1e6)
                span.append(mean_span)
                light.append(_traced(op, name, args.ops, device, Path(tmp), False)[1])
            row = {
                "untraced_wall_us": round(statistics.median(plain), 3),
                "traced_wall_us": round(statistics.median(traced), 3),
                "traced_span_us": round(statistics.median(span), 3),
                "light_span_us": round(statistics.median(light), 3),
            }
            row["tracing_us"] = round(row["traced_wall_us"] - row["untraced_wall_us"], 3)
            row["inside_span_us"] = round(row["traced_span_us"] - row["light_span_us"], 3)
            result["per_op_us"][label] = row
            print(
                f"{label:36s} wall untraced {row['untraced_wall_us']:7.2f} traced {row['traced_wall_us']:7.2f} us; "
                f"span traced {row['traced_span_us']:7.2f} light {row['light_span_us']:7.2f} us; tracing adds "
                f"{row['tracing_us']:7.2f} us, {row['inside_span_us']:7.2f} inside the span",
                flush=True,
            )
    text = json.dumps(result, indent=1) + "\n"
    if args.json:
        args.json.write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Issue 27's captures from one GPU, simulated and put beside what the GPU measured.

    ASTRA_SIM_HOME=../shared/astra-sim python -m bench.gpu.analyze CAPTURES [--cpu CPU_CAPTURES] \\
        [--out bench/results/gpu.md] [--json bench/results/gpu.json]

CAPTURES holds ``chakra-profile`` output folders made on the GPU (``bench/gpu/capture.sh``): each
``{name}_summary.json``, ``{name}_rank0_device.json`` (Kineto) and, unless captured with
``--no-host-trace``, ``{name}_rank0_host.json``. For each:

* **replay**: the host + Kineto pair linked and converted (``convert --astra-sim``), or the Kineto
  trace alone (``convert --kineto``), the profiler's time left in (``--tracing-overhead none``:
  ``bench/overhead_replay.py`` has the default, corrected replays); the one-GPU job made two
  identical ranks (``scale --ranks 2``: ASTRA-sim's network needs two NPUs; a replay moves
  nothing between them) and simulated
  with ``--replay`` (every node its traced duration). Against the untraced steps' median, the
  step a user's training runs at, and the traced step (the step the trace holds);
* **roofline** (host + Kineto captures): converted ``--roofline`` (durations kept), each GPU
  kernel's traced duration beside ``max(num_ops / peak, tensor_size / bandwidth)`` at the GPU's
  datasheet numbers (``--accelerator``), summed per class of the op that launched it; and
  converted ``--roofline --target accelerator``, simulated ``--accelerator``: the what-if's step,
  its exposed communication left out (the two ranks' all-reduces, which one GPU never ran).

``--cpu`` adds the same models captured on this machine's CPU (``--convert --roofline --target
accelerator``), simulated ``--accelerator`` against the GPU capture of the same model, precision
and batch: the what-if a user without the GPU would run.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

from chakra_convert_fast.converter.schema.opcost import op_class
from chakra_convert_fast.converter.simulate.configs import ACCELERATORS

CLI = [sys.executable, "-m", "chakra_convert_fast.converter"]


def _run(*args: str) -> str:
    done = subprocess.run([*CLI, *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"chakra-convert-fast {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout + done.stderr


def _simulate(prefix: Path, *options: str) -> dict[str, Any]:
    out = prefix.parent / f"{prefix.name}.sim.json"
    _run("simulate", str(prefix), "--json", str(out), *options)
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def _two_ranks(et_prefix: Path, work: Path) -> Path:
    """The one-GPU job as two identical ranks (ASTRA-sim's network needs two NPUs)."""
    out = work / f"{et_prefix.name}-x2" / et_prefix.name
    _run("scale", str(et_prefix), str(out), "--ranks", "2")
    return out


def _trace(capture: Path, name: str, kind: str) -> Path | None:
    """``{name}_rank0_{kind}.json``, or its ``.gz`` (as committed)."""
    return next(
        (p for p in (capture / f"{name}_rank0_{kind}.json", capture / f"{name}_rank0_{kind}.json.gz") if p.exists()),
        None,
    )


def _convert(capture: Path, name: str, out: Path, *extra: str) -> Path:
    """``out``.0.et from the capture (host + Kineto, or the Kineto trace alone); returns ``out``."""
    host = _trace(capture, name, "host")
    device = _trace(capture, name, "device")
    assert device is not None, f"{capture}: no {name}_rank0_device.json[.gz]"
    out.parent.mkdir(parents=True, exist_ok=True)
    if host is not None:
        _run(
            "convert",
            "-q",
            "--host",
            str(host),
            "--device",
            str(device),
            "--rank",
            "0",
            "--astra-sim",
            "--tracing-overhead",
            "none",
            *extra,
            f"{out}.0.et",
        )
    else:
        _run("convert", "--kineto", str(device), f"{out}.0.et", "--tracing-overhead", "none", *extra)
    return out


def _et_nodes(path: Path) -> list[Any]:
    from chakra.schema.protobuf.et_def_pb2 import GlobalMetadata, Node
    from chakra.src.third_party.utils.protolib import decodeMessage, openFileRd

    handle = openFileRd(str(path))
    decodeMessage(handle, GlobalMetadata())
    nodes = []
    while True:
        node = Node()
        if not decodeMessage(handle, node):
            return nodes
        nodes.append(node)


def kernel_classes(et: Path, peak_flops: float, bandwidth: float) -> dict[str, list[float]]:
    """class -> [kernels, traced ms, roofline ms] over the GPU compute nodes of a ``--roofline``
    .et (durations kept), each kernel classed by the op that launched it (its CPU parent)."""
    nodes = _et_nodes(et)
    by_id = {n.id: n for n in nodes}
    out: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
    for node in nodes:
        attrs = {a.name: a for a in node.attr}
        if node.type != 4 or attrs["is_cpu_op"].bool_val:
            continue
        parents = [by_id[d] for d in node.data_deps if d in by_id]
        launcher = next((p.name for p in parents if {a.name: a for a in p.attr}["is_cpu_op"].bool_val), "")
        if launcher and not launcher.startswith("aten::"):  # a Kineto trace alone: the runtime call launched it
            cls = "all kernels (by their launch call)"
        else:
            cls = op_class(launcher).value if launcher else "no launching op"
        if cls == "unknown" and "multi_tensor" in node.name:
            cls = "optimizer (multi-tensor)"
        elif cls == "unknown" and launcher:
            cls = f"other ({launcher.split('::')[-1]})" if launcher.startswith("aten::") else "other"
        entry = out[cls]
        entry[0] += 1
        entry[1] += node.duration_micros / 1e3
        if "num_ops" in attrs:
            flops, size = attrs["num_ops"].int64_val, attrs["tensor_size"].uint64_val
            if flops or size:
                entry[2] += max(flops / peak_flops, size / bandwidth) * 1e3
    return dict(out)


def _ms(ns: float) -> float:
    return ns / 1e6


def analyze(capture: Path, work: Path, accelerator: str) -> dict[str, Any]:
    summary = json.loads(next(capture.glob("*_summary.json")).read_text())
    name = summary["name"]
    row: dict[str, Any] = {
        "name": name,
        "model": summary["model"],
        "precision": summary.get("precision", "fp32"),
        "batch": summary["batch_size"],
        "seq_len": summary["shape"]["seq_len"],
        "host_trace": _trace(capture, name, "host") is not None,
        "record_shapes": summary.get("record_shapes", True),
        "gpu": summary.get("gpu"),
        "torch": summary["torch"],
        "cuda": summary.get("cuda"),
        "nccl": summary.get("nccl"),
        "untraced_ms": summary["step_time_s"]["untraced_median"] * 1e3,
        "traced_ms": summary["step_time_s"]["traced_median"] * 1e3,
        "untraced_steps": [
            round(t * 1e3, 3)
            for i, (t, ph) in enumerate(
                zip(summary["ranks"][0]["step_times_s"], summary["ranks"][0]["phases"], strict=True)
            )
            if i > 0 and ph in ("wait", "untraced")
        ],
    }
    et = _convert(capture, name, work / name / name)
    replay = _simulate(_two_ranks(et, work), "--replay")
    row["replay_ms"] = _ms(replay["step_ns"])
    row["trace_step_ms"] = _ms(replay["traced_step_ns"]) if replay.get("traced_step_ns") else None  # the traced one
    row["replay_error_pct"] = (row["replay_ms"] / row["untraced_ms"] - 1) * 100
    row["replay_vs_traced_pct"] = (row["replay_ms"] / row["traced_ms"] - 1) * 100
    if row["host_trace"] or row["record_shapes"]:  # the roofline needs the ops' shapes
        spec = ACCELERATORS[accelerator.lower()]
        kept = _convert(capture, name, work / f"{name}-rf" / name, "--roofline")
        row["classes"] = kernel_classes(Path(f"{kept}.0.et"), spec.peak_tflops * 1e12, spec.mem_bandwidth_gbps * 1e9)
        acc = _convert(capture, name, work / f"{name}-acc" / name, "--roofline", "--target", "accelerator")
        sim = _simulate(_two_ranks(acc, work), "--accelerator", accelerator)
        row.update(_whatif(sim))
    return row


def _whatif(sim: dict[str, Any]) -> dict[str, Any]:
    rank = sim["per_rank"][sim["slowest_rank"]] if isinstance(sim["per_rank"], list) else sim["per_rank"]
    exposed = rank.get("exposed_comm_ns", 0)
    return {
        "whatif_step_ms": _ms(sim["step_ns"]),
        "whatif_exposed_comm_ms": _ms(exposed),
        "whatif_ms": _ms(sim["step_ns"] - exposed),
    }


def analyze_cpu(capture: Path, work: Path, accelerator: str) -> dict[str, Any]:
    """A CPU capture converted --roofline --target accelerator, simulated on ``accelerator``."""
    summary = json.loads(next(capture.glob("*_summary.json")).read_text())
    name = summary["name"]
    acc = _convert(capture, name, work / f"cpu-{name}-acc" / name, "--roofline", "--target", "accelerator")
    sim = _simulate(_two_ranks(acc, work / "cpu"), "--accelerator", accelerator)
    spec = ACCELERATORS[accelerator.lower()]
    kept = _convert(capture, name, work / f"cpu-{name}-rf" / name, "--roofline")
    classes = _cpu_classes(Path(f"{kept}.0.et"), spec.peak_tflops * 1e12, spec.mem_bandwidth_gbps * 1e9)
    return {
        "name": name,
        "model": summary["model"],
        "precision": summary.get("precision", "fp32"),
        "batch": summary["batch_size"],
        "cpu_traced_ms": summary["step_time_s"]["traced_median"] * 1e3,
        "classes": classes,
        **_whatif(sim),
    }


def _cpu_classes(et: Path, peak_flops: float, bandwidth: float) -> dict[str, list[float]]:
    """class -> [ops, 0, roofline ms] over a CPU capture's compute nodes that do work."""
    out: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
    for node in _et_nodes(et):
        attrs = {a.name: a for a in node.attr}
        if node.type != 4 or "num_ops" not in attrs:
            continue
        flops, size = attrs["num_ops"].int64_val, attrs["tensor_size"].uint64_val
        if (flops == 1 and size == 1) or not (flops or size):
            continue
        entry = out[op_class(node.name).value]
        entry[0] += 1
        entry[2] += max(flops / peak_flops, size / bandwidth) * 1e3
    return dict(out)


def report(rows: list[dict[str, Any]], cpu_rows: list[dict[str, Any]], accelerator: str) -> str:
    first = rows[0]
    lines = [
        f"GPU: {first['gpu']}, torch {first['torch']}, CUDA {first['cuda']}, NCCL {first['nccl']}; one GPU, NCCL "
        "(world size 1). Measured: the median of the untraced steps of the run that made the trace (steps 2-10 "
        "and 14-30 of 30); traced: the one traced step (13). Simulated: ASTRA-sim, `simulate --replay` (every "
        "node its traced duration) of the one-GPU job as two identical ranks.",
        "",
        "| capture | tracing | measured step (ms) | traced step (ms) | simulated (ms) | error vs measured | "
        "error vs traced |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        tracing = (
            "host + Kineto, shapes"
            if r["host_trace"]
            else ("Kineto alone, shapes" if r["record_shapes"] else "Kineto alone")
        )
        lines.append(
            f"| {r['model']} base, {r['precision']}, batch {r['batch']} x {r['seq_len']} (`{r['name']}`) | {tracing} | "
            f"{r['untraced_ms']:.1f} | {r['traced_ms']:.1f} | {r['replay_ms']:.1f} | {r['replay_error_pct']:+.1f}% | "
            f"{r['replay_vs_traced_pct']:+.1f}% |"
        )
    spec = ACCELERATORS[accelerator.lower()]
    lines += [
        "",
        f"The roofline ({spec.name}: {spec.peak_tflops:g} TFLOP/s, {spec.mem_bandwidth_gbps:g} GB/s, "
        f"{spec.source}) against the same GPU. What-if: the capture converted `--roofline --target "
        "accelerator` and simulated `--accelerator` (its exposed communication, the two ranks' all-reduces "
        "one GPU never ran, left out).",
        "",
        "| capture | measured step (ms) | GPU kernels, traced (ms) | GPU kernels, roofline (ms) | what-if step (ms) "
        "| what-if vs measured |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        if "classes" not in r:
            continue
        traced = sum(v[1] for v in r["classes"].values())
        roof = sum(v[2] for v in r["classes"].values())
        lines.append(
            f"| `{r['name']}` | {r['untraced_ms']:.1f} | {traced:.1f} | {roof:.1f} | {r['whatif_ms']:.1f} | "
            f"{(r['whatif_ms'] / r['untraced_ms'] - 1) * 100:+.1f}% |"
        )
    for c in cpu_rows:  # against every GPU run of the same model, precision and batch
        for g in (
            r for r in rows if (r["model"], r["precision"], r["batch"]) == (c["model"], c["precision"], c["batch"])
        ):
            lines.append(
                f"| CPU capture `{c['name']}` (2-core CPU), what-if for `{g['name']}` | {g['untraced_ms']:.1f} | - | "
                f"{sum(v[2] for v in c['classes'].values()):.1f} | {c['whatif_ms']:.1f} | "
                f"{(c['whatif_ms'] / g['untraced_ms'] - 1) * 100:+.1f}% |"
            )
    lines += [
        "",
        "Per class of the op that launched each kernel (GPU captures with a host trace): traced kernel time "
        "against the roofline's, and the CPU capture's roofline where there is one.",
        "",
        "| capture | class | kernels | traced (ms) | roofline (ms) | roofline / traced | CPU capture's roofline (ms) |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    cpu_by_key = {(c["model"], c["precision"], c["batch"]): c for c in cpu_rows}
    for r in rows:
        if "classes" not in r:
            continue
        c = cpu_by_key.get((r["model"], r["precision"], r["batch"]))
        for cls, (count, traced, roof) in sorted(r["classes"].items(), key=lambda kv: -kv[1][1]):
            ratio = f"{roof / traced:.2f}" if traced else "-"
            cpu = f"{c['classes'][cls][2]:.1f}" if c and cls in c["classes"] else "-"
            lines.append(f"| `{r['name']}` | {cls} | {count:,} | {traced:.2f} | {roof:.2f} | {ratio} | {cpu} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("captures", type=Path)
    parser.add_argument("--cpu", type=Path, default=None, help="CPU captures of the same models (what-if)")
    parser.add_argument("--accelerator", default="H200")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        rows = [
            analyze(c, Path(tmp), args.accelerator)
            for c in sorted(p for p in args.captures.iterdir() if p.is_dir() and any(p.glob("*_summary.json")))
        ]
        cpu_rows = (
            [analyze_cpu(c, Path(tmp), args.accelerator) for c in sorted(p for p in args.cpu.iterdir() if p.is_dir())]
            if args.cpu
            else []
        )
    text = report(rows, cpu_rows, args.accelerator)
    if args.out:
        args.out.write_text(text, encoding="utf-8")
    if args.json:
        args.json.write_text(json.dumps({"gpu": rows, "cpu": cpu_rows}, indent=1) + "\n", encoding="utf-8")
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The roofline against reality: a CPU capture's compute, simulated on this machine's own roofline.

    ASTRA_SIM_HOME=../shared/astra-sim python -m bench.roofline_check CAPTURE_DIR [CAPTURE_DIR ...] \\
        [--machine bench/results/roofline_machine.json] [--out bench/results/roofline_check.md]

CAPTURE_DIR is a ``chakra-profile`` output folder (``{name}_rank{R}_{host,device}.json`` and
``{name}_summary.json``). Each rank is converted twice: ``--astra-sim --roofline`` (durations
kept: the *measured* compute of each node) and ``--astra-sim --roofline --target accelerator``,
which ASTRA-sim simulates with ``roofline-enabled``, ``peak-perf`` and ``local-mem-bw`` from
``bench.roofline_machine``. The simulated compute of a rank is its ``finished`` cycles less its
``exposed communication`` (ASTRA-sim's ``tics_gpu_ops``: the roofline nodes' time); per operator
class it is each node's ``max(num_ops / peak, tensor_size / bandwidth)`` in whole ns, as ASTRA-sim
times it (their sum is checked against ASTRA-sim's figure). Measured: the same nodes' durations
from the trace (compute nodes; the collectives and the gloo work the network simulates are left
out), summed per class; the ``no work`` class is the views, allocations and wrappers, which the
roofline gives no time. The measured durations include the tracing's own cost; two more rows
take it out: at least what the tracing adds to each recorded op (``profiler_us_per_op`` of
``bench.roofline_machine``) times the nodes, at most the traced step's excess over the untraced
one (``chakra-profile``'s summary). The notes name the nodes the roofline misses most.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

from bench import astrasim
from chakra_convert_fast.converter.schema.opcost import op_class

NO_WORK = "no work (views, wrappers)"
GAPS = 5  # the nodes (rank 0) whose measured time the roofline misses most


def et_nodes(path: Path) -> list[Any]:
    from chakra.schema.protobuf.et_def_pb2 import GlobalMetadata, Node
    from chakra.src.third_party.utils.protolib import decodeMessage, openFileRd

    handle = openFileRd(str(path))
    decodeMessage(handle, GlobalMetadata())
    out = []
    while True:
        node = Node()
        if not decodeMessage(handle, node):
            return out
        out.append(node)


def node_times(
    path: Path, peak: float, bandwidth: float, gaps: list[tuple[float, str, float, float, int, int]] | None = None
) -> dict[str, list[float]]:
    """class -> [nodes, measured us, roofline ns] over the compute nodes of a ``--roofline`` .et;
    with ``gaps``, each node that does work is added to it as (measured - roofline in ms, name,
    measured ms, roofline ms, FLOPs, bytes)."""
    by: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
    for node in et_nodes(path):
        attrs = {a.name: a for a in node.attr}
        if node.type != 4 or "num_ops" not in attrs:
            continue
        flops, size = attrs["num_ops"].int64_val, attrs["tensor_size"].uint64_val
        work = not (flops == 1 and size == 1)
        cls = op_class(node.name).value if work else NO_WORK
        entry = by[cls]
        entry[0] += 1
        entry[1] += node.duration_micros
        if work:
            roofline = int(flops / min(bandwidth * flops / size, peak) * 1e9)
            entry[2] += roofline
            if gaps is not None:
                gaps.append(
                    (
                        node.duration_micros / 1e3 - roofline / 1e6,
                        node.name,
                        node.duration_micros / 1e3,
                        roofline / 1e6,
                        flops,
                        size,
                    )
                )
    return by


def convert(capture: Path, name: str, rank: int, out: Path, *extra: str) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "chakra_convert_fast.converter",
            "convert",
            "-q",
            "--host",
            str(capture / f"{name}_rank{rank}_host.json"),
            "--device",
            str(capture / f"{name}_rank{rank}_device.json"),
            "--rank",
            str(rank),
            "--astra-sim",
            "--roofline",
            *extra,
            str(out),
        ],
        check=True,
        capture_output=True,
    )


def check(capture: Path, machine: dict[str, Any], workdir: Path) -> tuple[list[str], dict[str, Any]]:
    summary = json.loads(next(capture.glob("*_summary.json")).read_text())
    name, ranks = summary["name"], summary["world_size"]
    peak, bandwidth = machine["peak_tflops"] * 1e12, machine["mem_bandwidth_gbs"] * 1e9
    roofline_system = {
        "roofline-enabled": 1,
        "peak-perf": machine["peak_tflops"],
        "local-mem-bw": machine["mem_bandwidth_gbs"],
    }
    for rank in range(ranks):
        convert(capture, name, rank, workdir / f"{name}.{rank}.et")
        convert(capture, name, rank, workdir / f"{name}-acc.{rank}.et", "--target", "accelerator")
        convert(
            capture,
            name,
            rank,
            workdir / f"{name}-host.{rank}.et",
            "--target",
            "accelerator",
            "--host-time",
            "captured",
        )
    sim = astrasim.simulate(
        workdir / f"{name}-acc", ranks, workdir=workdir / f"{name}-sim", system_overrides=roofline_system
    )
    host_sim = astrasim.simulate(
        workdir / f"{name}-host", ranks, workdir=workdir / f"{name}-host-sim", system_overrides=roofline_system
    )
    for run in (sim, host_sim):
        if not run.all_finished:
            raise RuntimeError(f"{name}: not every rank finished:\n{run.output[-2000:]}")
    totals: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
    gaps: list[tuple[float, str, float, float, int, int]] = []
    host_total = 0.0
    for rank in range(ranks):
        by = node_times(workdir / f"{name}.{rank}.et", peak, bandwidth, gaps if rank == 0 else None)
        simulated = sim.ranks[rank].cycles - sim.ranks[rank].exposed_communication
        predicted = sum(v[2] for v in by.values())
        if abs(simulated - predicted) > 1e-3 * predicted + by[NO_WORK][0] + 10:  # each CPU no-work node: 1 ns
            raise RuntimeError(
                f"{name} rank {rank}: ASTRA-sim's compute {simulated} ns is not the roofline's {predicted:.0f} ns"
            )
        host_simulated = host_sim.ranks[rank].cycles - host_sim.ranks[rank].exposed_comm_ns
        host_predicted = predicted + by[NO_WORK][1] * 1e3  # the no-work nodes' captured durations, replayed
        if abs(host_simulated - host_predicted) > 1e-3 * host_predicted + 10:
            raise RuntimeError(
                f"{name} rank {rank}: ASTRA-sim's compute with the host replayed, {host_simulated} ns, "
                f"is not the roofline's plus the host's {host_predicted:.0f} ns"
            )
        host_total += host_simulated
        for cls, (nodes, measured, roofline) in by.items():
            entry = totals[cls]
            entry[0] += nodes
            entry[1] += measured
            entry[2] += roofline
    rows = []
    malloc = summary.get("malloc", "malloc not recorded")
    label = f"{summary['model']} {summary['size']}, {ranks} ranks, {malloc} (`{capture}`)"
    for cls, (nodes, measured, roofline) in sorted(totals.items(), key=lambda kv: -kv[1][1]):
        rows.append(_row(label, cls, nodes / ranks, measured / ranks / 1e3, roofline / ranks / 1e6))
    nodes = sum(v[0] for v in totals.values())
    measured = sum(v[1] for v in totals.values())
    roofline = sum(v[2] for v in totals.values())
    rows.append(_row(label, "**total**", nodes / ranks, measured / ranks / 1e3, roofline / ranks / 1e6))
    # The tracing's own cost, inside the measured durations: at least what it adds to each recorded op
    # (bench.roofline_machine's microbenchmark), at most the traced step's excess over the untraced one
    # (each step figure is one or two steps' median: where the excess is the smaller, it is that bound).
    least_ms = nodes * machine["profiler_us_per_op"] / 1e3 / ranks if "profiler_us_per_op" in machine else 0.0
    if least_ms:
        per_op = machine["profiler_us_per_op"]
        rows.append(
            _row(
                label,
                f"total less the tracing's cost, at least ({per_op:.1f} us an op)",
                nodes / ranks,
                measured / ranks / 1e3 - least_ms,
                roofline / ranks / 1e6,
            )
        )
    step = summary["step_time_s"]
    most_ms = max(least_ms, (step["traced_median"] - step["untraced_median"]) * 1e3)
    rows.append(
        _row(
            label,
            f"total less the tracing's cost, at most (the traced step's excess, {most_ms:,.0f} ms)",
            nodes / ranks,
            measured / ranks / 1e3 - most_ms,
            roofline / ranks / 1e6,
        )
    )
    rows.append(
        _row(
            label,
            "total, the host's work replayed (`--host-time captured`, ASTRA-sim)",
            nodes / ranks,
            measured / ranks / 1e3,
            host_total / ranks / 1e6,
        )
    )
    facts = {
        "gaps": sorted(gaps, reverse=True)[:GAPS],
        "name": name,
        "ranks": ranks,
        "measured_ms": measured / ranks / 1e3,
        "simulated_ms": roofline / ranks / 1e6,
        "step": summary["step_time_s"],
        "astra_sim_compute_ms": [(r.cycles - r.exposed_communication) / 1e6 for r in sim.ranks],
        "astra_sim_step_ms": [r.cycles / 1e6 for r in sim.ranks],
    }
    return rows, facts


def _row(label: str, cls: str, nodes: float, measured_ms: float, simulated_ms: float) -> str:
    ratio = f"{simulated_ms / measured_ms:.2f}" if measured_ms else "-"
    return f"| {label} | {cls} | {nodes:,.0f} | {measured_ms:,.1f} | {simulated_ms:,.1f} | {ratio} |"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.roofline_check", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("captures", nargs="+", type=Path, help="chakra-profile output folders")
    parser.add_argument(
        "--machine",
        type=Path,
        nargs="+",
        default=[Path("bench/results/roofline_machine.json")],
        help="bench.roofline_machine outputs (several: their mean, e.g. before and after a capture)",
    )
    parser.add_argument(
        "--figures",
        choices=("cpu", "wall"),
        default="cpu",
        help="the machine's figures in CPU time (a free core) or wall time (as it was shared)",
    )
    parser.add_argument("--out", type=Path, help="also write the table here")
    args = parser.parse_args(argv)
    if astrasim.home() is None:
        parser.error(f"set {astrasim.ENV} to the ASTRA-sim folder (../shared/astra-sim)")
    machines = [json.loads(path.read_text()) for path in args.machine]
    prefix = "wall_" if args.figures == "wall" else ""
    machine = {key: statistics.mean(m[prefix + key] for m in machines) for key in ("peak_tflops", "mem_bandwidth_gbs")}
    if all("profiler_us_per_op" in m for m in machines):
        machine["profiler_us_per_op"] = statistics.mean(
            statistics.mean(m["profiler_us_per_op"].values()) for m in machines
        )
    loads = ", ".join(f"{m['load_average'][0]:.1f}" for m in machines)
    lines = [
        f"Roofline: peak {machine['peak_tflops'] * 1e3:.1f} GFLOP/s, bandwidth {machine['mem_bandwidth_gbs']:.1f} "
        f"GB/s ({args.figures} time; mean of {', '.join(f'`{p}`' for p in args.machine)}, measured "
        f"{', '.join(m['measured_at'] for m in machines)}, load average {loads})."
        + (
            f" The tracing adds {machine['profiler_us_per_op']:.1f} us to each op it records."
            if "profiler_us_per_op" in machine
            else ""
        ),
        "",
        "| capture | operator class | nodes per rank | measured per rank (ms) | simulated per rank (ms) | "
        "simulated / measured |",
        "|---|---|---:|---:|---:|---:|",
    ]
    notes = []
    with tempfile.TemporaryDirectory(prefix="roofline-check-") as tmp:
        for capture in args.captures:
            rows, facts = check(capture, machine, Path(tmp))
            lines += rows
            step = facts["step"]
            notes.append(
                f"{facts['name']}: measured step (untraced / traced) "
                f"{step['untraced_median'] * 1e3:.0f} / {step['traced_median'] * 1e3:.0f} ms;"
                f" ASTRA-sim's roofline compute per rank "
                f"{' / '.join(f'{v:.1f}' for v in facts['astra_sim_compute_ms'])} ms, simulated step "
                f"{' / '.join(f'{v:.1f}' for v in facts['astra_sim_step_ms'])} ms; the largest gaps "
                "(rank 0, measured / roofline): "
                + "; ".join(
                    f"{gap_name} {measured:,.1f} / {roofline:,.1f} ms ({flops / measured / 1e6:,.1f} "
                    f"GFLOP/s, {size / measured / 1e6:,.1f} GB/s measured)"
                    for _, gap_name, measured, roofline, flops, size in facts["gaps"]
                )
            )
            print("\n".join(rows), file=sys.stderr)
    text = "\n".join(lines + [""] + [f"- {note}" for note in notes]) + "\n"
    print(text, end="")
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

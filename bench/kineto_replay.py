"""Kineto traces alone, replayed in ASTRA-sim, against their measured step; and the ablation.

    ASTRA_SIM_HOME=../shared/astra-sim python -m bench.kineto_replay --hta HTA/tests/data \\
        [--out bench/results/kineto_replay.md]

Every public GPU Kineto trace with a ``ProfilerStep`` we could get: the repository's
(``tests/data/traces``: PARAM's 8 DLRM workers, five of HTA's, chakra-profile's CPU GPT-2 pair)
and, with ``--hta``, the larger ones of HTA's ``tests/data`` (a checkout of
facebookresearch/HolisticTraceAnalysis @ f4d0062). Each job is converted (default step: the last
complete one), replayed (``simulate --replay``: every node its traced duration) and its simulated
step (the slowest rank's, from ASTRA-sim's log) held against the measured one (the slowest rank's
ProfilerStep span to the end of the GPU work it launched), the profiler's time left in
(``tracing_overhead="none"``: the measured step is the traced one). A one-rank trace is scaled to two
identical ranks first (ASTRA-sim's networks need two NPUs). Then the ablation: each dependency
kind left out in turn (``convert --drop-dependency KIND``), every job replayed again.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from chakra_convert_fast.converter import api
from chakra_convert_fast.converter.et.decode import read_metadata
from chakra_convert_fast.converter.simulate.configs import REMOTE_MEMORY, network, system_config

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "traces"


@dataclass
class Job:
    name: str
    gpu: str
    ranks_of: str  # "1 of 1", "8 of 8", ...
    paths: list[Path]


def jobs(hta: Path | None, work: Path) -> list[Job]:
    dlrm = work / "dlrm"
    with tarfile.open(DATA / "gpu_public" / "dlrm_kineto.tar.gz") as tar:
        tar.extractall(dlrm, filter="data")
    public = DATA / "kineto_public"
    found = [
        Job(
            "PARAM DLRM (NCCL)",
            "V100-SXM2-32GB",
            "8 of 8",
            sorted((dlrm / "dlrm_kineto").glob("worker*.json"), key=lambda p: int(p.name[6:].split("_")[0])),
        ),
        Job(
            "HTA trace_filter sampled (NCCL)",
            "(not recorded)",
            "2 of 128",
            [public / f"hta_sampled_rank{r}of128.json.gz" for r in (0, 1)],
        ),
        Job("HTA nccl_parser_config (NCCL)", "A100-PG509-200", "1 of 2", [public / "hta_a100_nccl_rank0of2.json.gz"]),
        Job("HTA cuda_event_sync", "A100-PG509-200", "1 of 1", [public / "hta_a100_cuda_event_sync.json.gz"]),
        Job("HTA amd_trace (ROCm 6.2)", "MI250", "1 of 1", [public / "hta_mi250_rocm6.json.gz"]),
        Job(
            "chakra-profile GPT-2 DDP (gloo, CPU)",
            "CPU",
            "2 of 2",
            [DATA / "cpu_gpt2_ddp2" / f"rank{r}_device.json.gz" for r in (0, 1)],
        ),
    ]
    if hta is not None:
        found += [
            Job(
                "HTA df_index_resolver (NCCL)",
                "V100-SXM2-32GB",
                "1 of 2",
                [hta / "df_index_resolver/df_index_resolver.json.gz"],
            ),
            Job(
                "HTA negative_queue_length (NCCL)",
                "A100-SXM4-80GB",
                "1 of 16",
                [hta / "negative_queue_length_values_check/rank0.json.gz"],
            ),
            Job(
                "HTA ns_resolution_trace",
                "V100-SXM2-32GB",
                "1 of 1",
                [hta / "ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"],
            ),
            Job(
                "HTA trace_diff control (NCCL)",
                "A100-PG509-200",
                "1 of 8",
                [hta / "trace_diff/control/control.json.gz"],
            ),
            Job("HTA trace_diff test (NCCL)", "V100-SXM2-16GB", "1 of 2", [hta / "trace_diff/test/test.json.gz"]),
            Job("HTA triton_example", "A100-PG509-200", "1 of 1", [hta / "triton_example/triton_example.json.gz"]),
        ]
    return found


@dataclass
class Replay:
    measured_ns: int
    simulated_ns: int
    nodes: int
    events: int
    seconds: float
    step: str
    tail_ns: int  # the slowest rank's GPU work past its CPU span

    @property
    def error(self) -> float:
        return (self.simulated_ns - self.measured_ns) / self.measured_ns


def replay(job: Job, work: Path, drop: tuple[str, ...] = ()) -> Replay:
    prefix = work / "job"
    for old in work.glob("job*"):
        old.unlink()
    started = time.perf_counter()
    steps, nodes, events, tails = set(), 0, 0, {}
    for rank, path in enumerate(job.paths):
        result = api.convert_kineto(path, f"{prefix}.{rank}.et", rank=rank, drop=drop, tracing_overhead="none")
        steps.add(result.step)
        nodes += result.nodes
        events += result.events
        tails[rank] = round((result.measured_us - result.cpu_span_us) * 1000)
    seconds = time.perf_counter() - started
    if len(job.paths) == 1:
        api.scale(prefix, work / "job2", 2, layout="ddp")  # two copies of the one rank, every byte kept
        prefix = work / "job2"
    ranks = max(2, len(job.paths))
    spans = [(m["finish_ts"] - m["start_ts"]) * 1000 for m in (read_metadata(f"{prefix}.{r}.et") for r in range(ranks))]
    slowest = spans.index(max(spans)) % len(job.paths)
    return Replay(
        max(spans),
        run_replay(prefix, ranks, work),
        nodes,
        events,
        seconds,
        ",".join(map(str, sorted(steps))),
        tails[slowest],
    )


TIMEOUT = 120  # s: past it a run is reported as not finished (a graph of thousands of roots is slow)
_FINISHED = re.compile(r"sys\[(\d+)\] finished, (\d+) cycles")


def run_replay(prefix: Path, ranks: int, work: Path) -> int:
    """ASTRA-sim run directly with ``replay-only: 1`` and no per-node log (``simulate --replay``
    reads every node's issue and callback; on a loaded machine that costs minutes a job): the
    slowest rank's ``finished`` time in ns. Every rank must finish."""
    home = Path(os.environ["ASTRA_SIM_HOME"])
    system = system_config(1, None, replay=True)
    system["trace-enabled"] = 0
    (work / "system.json").write_text(json.dumps(system))
    (work / "network.yml").write_text(network("Ring", ranks).yaml())
    (work / "memory.json").write_text(json.dumps(REMOTE_MEMORY))
    done = subprocess.run(
        [
            home / "bin" / "AstraSim_Analytical_Congestion_Unaware",
            f"--workload-configuration={prefix}",
            f"--system-configuration={work / 'system.json'}",
            f"--remote-memory-configuration={work / 'memory.json'}",
            f"--network-configuration={work / 'network.yml'}",
            f"--logging-folder={work / 'log'}",
            "--comm-group-configuration=empty",
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=TIMEOUT,
    )
    finished = {int(r): int(c) for r, c in _FINISHED.findall(done.stdout + done.stderr)}
    if done.returncode != 0 or sorted(finished) != list(range(ranks)):
        raise RuntimeError(
            f"ASTRA-sim on {prefix}: exit {done.returncode}, finished {sorted(finished)}; {done.stderr[-500:]}"
        )
    return max(finished.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hta", type=Path, help="HTA's tests/data folder (the larger public traces)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "kineto_replay.md")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        found = jobs(args.hta, work)
        (work / "et").mkdir()
        rows = [
            "| trace | GPU | ranks (of the job) | step | nodes | measured (ms) | of it GPU tail (ms) "
            "| simulated (ms) | error |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        errors: list[float] = []
        for job in found:
            r = replay(job, work / "et")
            errors.append(abs(r.error))
            rows.append(
                f"| {job.name} | {job.gpu} | {job.ranks_of} | #{r.step} | {r.nodes:,} | "
                f"{r.measured_ns / 1e6:,.3f} | {r.tail_ns / 1e6:,.3f} | {r.simulated_ns / 1e6:,.3f} | "
                f"{r.error:+.2%} |"
            )
            print(rows[-1], flush=True)
        gpu = [e for job, e in zip(found, errors, strict=True) if job.gpu != "CPU"]
        ablation = ["| left out | median abs. error | max abs. error | worst trace |", "|---|---|---|---|"]
        ablation.append(
            f"| nothing (the full graph) | {statistics.median(gpu):.2%} | {max(gpu):.2%} | "
            f"{found[errors.index(max(errors))].name} |"
        )
        gpu_jobs = [job for job in found if job.gpu != "CPU"]
        for kind in ("launch", "sync", "stream", "gaps", "cpu"):
            dropped: list[float] = []
            unfinished: list[str] = []
            for job in gpu_jobs:
                try:
                    dropped.append(abs(replay(job, work / "et", (kind,)).error))
                except subprocess.TimeoutExpired:
                    unfinished.append(job.name)
            worst = max(range(len(dropped)), key=dropped.__getitem__)
            note = f" ({len(unfinished)} not finished in {TIMEOUT} s: {', '.join(unfinished)})" if unfinished else ""
            ablation.append(
                f"| {_KINDS[kind]} | {statistics.median(dropped):.2%} | {max(dropped):.2%} | "
                f"{[j for j in gpu_jobs if j.name not in unfinished][worst].name}{note} |"
            )
            print(ablation[-1], flush=True)
    text = "\n".join(
        [
            "# Kineto traces alone, replayed in ASTRA-sim",
            "",
            "Generated by `ASTRA_SIM_HOME=../shared/astra-sim python -m bench.kineto_replay --hta HTA/tests/data`",
            "(HTA = facebookresearch/HolisticTraceAnalysis @ f4d0062); see docs/kineto.md.",
            "Measured: the slowest rank's ProfilerStep span to the end of the GPU work it launched. Simulated:",
            "ASTRA-sim (analytical, congestion-unaware, `replay-only: 1`, as `simulate --replay` runs it but",
            "without the per-node log), the slowest rank's `finished` time.",
            "One-rank traces are replayed as two identical ranks. GPU tail: how much of the measured step is",
            "GPU work running past the step's CPU span (the rest is the CPU span, which the host timeline tiles).",
            "",
            *rows,
            "",
            f"GPU traces: median absolute error {statistics.median(gpu):.2%}, largest {max(gpu):.2%} "
            f"({len(gpu)} traces).",
            "",
            "## Ablation: one dependency kind left out (GPU traces)",
            "",
            *ablation,
            "",
        ]
    )
    args.out.write_text(text)
    print(f"wrote {args.out}")


_KINDS = {
    "cpu": "CPU order (the host timeline's chain)",
    "launch": "CPU -> GPU (launch)",
    "sync": "GPU -> CPU (synchronising calls wait for their GPU work)",
    "stream": "GPU -> GPU (stream order, cross-stream waits, earlier steps' backlog)",
    "gaps": "host gaps (idle and launch time between host events)",
}


if __name__ == "__main__":
    main()

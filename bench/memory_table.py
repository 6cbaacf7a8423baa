"""``memory`` against the truth each capture records, and scaled jobs against real ones.

    python -m bench.memory_table CAPTURES [CAPTURES ...] [--out bench/results/memory.md]
    python -m bench.memory_table tests/data/traces/gpu_memory/h100 tests/data/traces/gpu_memory/h200 \
        tests/data/traces/gpu_h100 --out bench/results/memory.md   # the GPU table, from the committed captures

Each ``CAPTURES`` holds one folder per capture, ``NAME/NAME_rank<r>_{host,device}.json[.gz]`` and
``NAME_summary.json``; a CPU capture also ``NAME/NAME.<r>.et`` and ``NAME.layout.json``
(``chakra-profile --size tiny --steps 4 --profile-memory --convert``). A capture is a GPU one where
its summary says ``"device": "cuda"``. The truth (docs/memory.md): on a GPU
``torch.cuda.max_memory_allocated`` over the traced step (the summary's ``cuda_max_allocated``); on
CPU the summary's ``truth_bytes``, the window's peak Kineto "Total Allocated" plus the parameters',
gradients' and optimizer state's bytes live when the traced step began.

Tables: (1) per CPU capture and rank, the truth, ``memory`` from Kineto's events over the host
trace's pre-existing tensors (the ``kineto`` source), and from the host trace's tensors alone
(``host``); (2) each captured CPU job of ``PAIRS`` scaled with ``scale`` (its memory sidecars
written first) to the ranks of the real job with twice its data-parallel degree, rank by rank
against the real capture's truth and its own ``memory``; (3) per GPU capture, the same two sources
against ``max_memory_allocated`` (the host source where the capture keeps its host trace).

With ``--out``, the tables made replace the sections of the same heading in that file and the
others are kept: the GPU table can be remade from the committed captures alone while the CPU
tables (captures that are not committed) stay as they were.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from chakra_convert_fast.converter import api
from chakra_convert_fast.converter.memory.host import read_host
from chakra_convert_fast.converter.memory.job import from_folder, from_sidecars, write_job_sidecars
from chakra_convert_fast.converter.memory.kineto import read_memory
from chakra_convert_fast.converter.memory.profile import from_host, from_kineto

_MIB = 1 << 20


def truths(folder: Path) -> list[int | None]:
    summary = json.loads(next(folder.glob("*_summary.json")).read_text())
    return [(r.get("memory") or {}).get("truth_bytes") for r in summary["ranks"]]


def buckets(folder: Path) -> list[int]:
    """DDP's gradient bucket bytes per rank (0 where the job has none or the summary predates them)."""
    summary = json.loads(next(folder.glob("*_summary.json")).read_text())
    return [int((r.get("memory") or {}).get("ddp_bucket_bytes", 0)) for r in summary["ranks"]]


def err(estimate: int, truth: int | None) -> str:
    return "" if not truth else f"{100 * (estimate - truth) / truth:+.1f}%"


def host_trace(folder: Path, rank: int) -> Path | None:
    return next(iter(sorted(folder.glob(f"*_rank{rank}_host.json*"))), None)


def is_gpu(folder: Path) -> bool:
    return bool(json.loads(next(folder.glob("*_summary.json")).read_text()).get("device") == "cuda")


def accuracy(folder: Path) -> list[dict[str, Any]]:
    rows = []
    truth = truths(folder)
    bucket = buckets(folder)
    kineto = from_folder(str(folder))
    for m in kineto:
        host = from_host(m.rank, read_host(str(host_trace(folder, m.rank))))
        rows.append(
            {
                "capture": folder.name,
                "rank": m.rank,
                "truth": truth[m.rank],
                "buckets": bucket[m.rank],
                "kineto": m.peak_bytes,
                "host": host.peak_bytes,
                "at_peak": m.at_peak,
            }
        )
    return rows


def gpu_accuracy(folder: Path) -> list[dict[str, Any]]:
    """Each rank of a GPU capture: ``memory`` from Kineto's events (where the capture has them: the
    allocator's own total counts what was live before the window) and from the host trace's
    tensors alone (where it keeps the host trace), against ``max_memory_allocated``. A capture
    with neither, or without the truth, gives no row."""
    summary = json.loads(next(folder.glob("*_summary.json")).read_text())
    rows = []
    for r, rank in enumerate(summary["ranks"]):
        truth = rank.get("memory") or {}
        trace = host_trace(folder, r)
        device = next(iter(sorted(folder.glob(f"*_rank{r}_device.json*"))), None)
        events = read_memory(str(device)) if device is not None and summary.get("profile_memory") else None
        if "cuda_max_allocated" not in truth or (trace is None and not (events and events.events)):
            continue
        host = from_host(r, read_host(str(trace))) if trace is not None else None
        kineto = from_kineto(r, events, read_host(str(trace)) if trace is not None else None) if events else None
        rows.append(
            {
                "gpu": summary.get("gpu", "?"),
                "capture": f"{folder.name}{'' if summary.get('profile_memory') else ' (no memory events)'}",
                "rank": r,
                "truth": int(truth["cuda_max_allocated"]),
                "reserved": int(truth["cuda_max_reserved"]),
                "kineto": None if kineto is None else kineto.peak_bytes,
                "host": None if host is None else host.peak_bytes,
                "at_peak": None if kineto is None else kineto.at_peak,
                "host_at_peak": None if host is None else host.at_peak,
            }
        )
    return rows


#: (captured, real) job pairs of the second table: the real job has twice the data-parallel degree.
PAIRS = (
    ("bert_ddp2", "bert_ddp4"),
    ("bert_fsdp2", "bert_fsdp4"),
    ("gpt2_ddp2", "gpt2_ddp4"),
    ("gpt2_fsdp2", "gpt2_fsdp4"),
    ("gpt2_fsdp2tp2", "gpt2_fsdp4tp2"),
    ("gpt2_dp2pp2", "gpt2_dp4pp2"),
)


def scaled(two: Path, four: Path, work: Path) -> list[dict[str, Any]]:
    job = work / two.name
    job.mkdir()
    for f in two.iterdir():
        if f.suffix == ".et" or f.name.endswith((".layout.json", ".comm_group.json")):
            shutil.copy(f, job / f.name)
    memories = from_folder(str(two))
    write_job_sidecars(memories, str(job), two.name, [m.rank for m in memories])
    real = from_folder(str(four))
    api.scale(str(job / two.name), str(work / f"{two.name}_scaled"), len(real))
    predicted = from_sidecars(str(work / f"{two.name}_scaled"))
    truth = truths(four)
    return [
        {
            "capture": f"{two.name} ({len(memories)} ranks) -> {len(real)}",
            "rank": p.rank,
            "predicted": p.peak_bytes,
            "real_truth": truth[p.rank],
            "real_memory": real[p.rank].peak_bytes,
        }
        for p in predicted
    ]


def mib(n: int | None) -> str:
    return "" if n is None else f"{n / _MIB:,.2f}"


TITLE = "# Memory: `memory` against each rank's truth, and scaled jobs against real ones"
PREAMBLE = (
    "Generated by `python -m bench.memory_table CAPTURES... --out bench/results/memory.md` (see the script's "
    "docstring and docs/memory.md); each section is remade from the captures given and the others are kept. "
    "MiB = 2^20 bytes. kineto: `memory` from Kineto's memory events (over the host trace's pre-existing "
    "tensors on CPU; on a GPU the caching allocator's own total counts what was live before the window); "
    "host: the host trace's tensors alone (each storage from the op that made it to its last use)."
)
CPU_RANKS = "## CPU captures: each rank against its truth"
CPU_SCALED = "## CPU captures: scaled to twice the data-parallel degree, against the real capture"
GPU_RANKS = "## GPU captures: each against torch.cuda.max_memory_allocated"
#: Written by hand (how the captures were made, what the numbers say), kept as they are.
GPU_NOTES = "## GPU captures: reading the table"
CPU_NOTES = "## CPU captures: how they were made, and reading the tables"
ORDER = (GPU_RANKS, GPU_NOTES, CPU_RANKS, CPU_SCALED, CPU_NOTES)


def held(at_peak: dict[str, int] | None) -> str:
    if at_peak is None:
        return ""
    return ", ".join(f"{k} {v / _MIB:,.1f}" for k, v in at_peak.items() if v >= _MIB // 10)


def render_cpu(rows: list[dict[str, Any]]) -> str:
    out = [
        CPU_RANKS,
        "",
        'truth: the window\'s peak Kineto "Total Allocated" plus the parameters, gradients and optimizer state '
        "live when the traced step began (chakra-profile records both). DDP buckets: the gradient buckets DDP "
        "allocates when it wraps the model, live throughout the step, which `memory` counts (communication) and "
        "the truth does not (the summary records their bytes, `ddp_bucket_bytes`).",
        "",
        "| capture | rank | truth (MiB) | kineto (MiB) | error | error against truth + DDP buckets | host (MiB) "
        "| error | at the peak (kineto, MiB) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        out.append(
            f"| {r['capture']} | {r['rank']} | {mib(r['truth'])} | {mib(r['kineto'])} | {err(r['kineto'], r['truth'])} "
            f"| {err(r['kineto'], r['truth'] + r['buckets']) if r['buckets'] and r['truth'] else ''} "
            f"| {mib(r['host'])} | {err(r['host'], r['truth'])} | {held(r['at_peak'])} |"
        )
    return "\n".join(out) + "\n"


def render_scaled(scaled_rows: list[dict[str, Any]]) -> str:
    out = [
        CPU_SCALED,
        "",
        "| job | rank | predicted (MiB) | real truth (MiB) | error | real `memory` (MiB) | error |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in scaled_rows:
        out.append(
            f"| {r['capture']} | {r['rank']} | {mib(r['predicted'])} | {mib(r['real_truth'])} | "
            f"{err(r['predicted'], r['real_truth'])} | {mib(r['real_memory'])} | "
            f"{err(r['predicted'], r['real_memory'])} |"
        )
    return "\n".join(out) + "\n"


def pct(estimate: int | None, truth: int) -> str:
    return "" if estimate is None else f"{100 * (estimate - truth) / truth:+.3f}%"


def render_gpu(rows: list[dict[str, Any]]) -> str:
    out = [
        GPU_RANKS,
        "",
        "truth: `torch.cuda.max_memory_allocated` over the traced step (reset as it began; the summary's "
        "`cuda_max_allocated`), on one GPU, `chakra-profile --size base --precision bf16` "
        "(tests/data/traces/gpu_memory/PROVENANCE.md, with `--profile-memory`; tests/data/traces/gpu_h100/"
        "PROVENANCE.md). reserved: `max_memory_reserved`, what the caching "
        "allocator held. kineto: where the capture has Kineto's memory events (`--profile-memory`); host: "
        "where it keeps its host execution trace (the memory captures at batch 8; the H100 set of "
        "tests/data/traces/gpu_h100, host + Kineto without memory events, records the same truth).",
        "",
        "| GPU | capture | truth (MiB) | reserved (MiB) | kineto (MiB) | error | host (MiB) | error "
        "| at the peak (kineto, MiB) | at the peak (host, MiB) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for r in rows:
        name = r["capture"] + (f" rank {r['rank']}" if r["rank"] else "")
        out.append(
            f"| {r['gpu']} | {name} | {mib(r['truth'])} | {mib(r['reserved'])} | {mib(r['kineto'])} "
            f"| {pct(r['kineto'], r['truth'])} | {mib(r['host'])} | {pct(r['host'], r['truth'])} "
            f"| {held(r['at_peak'])} | {held(r['host_at_peak'])} |"
        )
    kin = [(abs(r["kineto"] - r["truth"]), r["truth"]) for r in rows if r["kineto"] is not None]
    host = [(r["host"] - r["truth"]) / r["truth"] for r in rows if r["host"] is not None]
    out += ["", ""]
    if kin:
        off, truth = max(kin, key=lambda k: k[0] / k[1])
        out[-1] += f"kineto: {len(kin)} captures, the largest difference {off:,} B ({100 * off / truth:.3f}%). "
    if host:
        out[-1] += f"host: {len(host)} captures, {100 * min(host):+.2f}% to {100 * max(host):+.2f}%."
    out[-1] = out[-1].rstrip()
    return "\n".join(out) + "\n"


def sections(text: str) -> dict[str, str]:
    """The ``## `` sections of a generated file, by heading (the title and preamble left out)."""
    found: dict[str, str] = {}
    heading = None
    for line in text.splitlines(keepends=True):
        if line.startswith("## "):
            heading = line.rstrip("\n")
            found[heading] = ""
        if heading is not None:
            found[heading] += line
    return {h: body.rstrip("\n") + "\n" for h, body in found.items()}


def render(made: dict[str, str], kept: dict[str, str] | None = None) -> str:
    """The file: the sections made, the others of ``kept`` as they were (known ones in ``ORDER``)."""
    merged = {**(kept or {}), **made}
    names = [h for h in ORDER if h in merged] + [h for h in merged if h not in ORDER]
    return "\n".join([TITLE, "", PREAMBLE, "", *(merged[h] for h in names)]).rstrip("\n") + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("captures", type=Path, nargs="+")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    folders = [
        p for root in args.captures for p in sorted(root.iterdir()) if p.is_dir() and any(p.glob("*_summary.json"))
    ]
    gpu = [f for f in folders if is_gpu(f)]
    cpu = [f for f in folders if not is_gpu(f)]
    made: dict[str, str] = {}
    if gpu:
        made[GPU_RANKS] = render_gpu([row for folder in gpu for row in gpu_accuracy(folder)])
    if cpu:
        made[CPU_RANKS] = render_cpu([row for folder in cpu for row in accuracy(folder)])
        scaled_rows = []
        by_name = {f.name: f for f in cpu}
        with tempfile.TemporaryDirectory() as tmp:
            for captured, real in PAIRS:
                if captured in by_name and real in by_name:
                    scaled_rows += scaled(by_name[captured], by_name[real], Path(tmp))
        made[CPU_SCALED] = render_scaled(scaled_rows)
    kept = sections(args.out.read_text()) if args.out is not None and args.out.is_file() else None
    text = render(made, kept)
    if args.out:
        args.out.write_text(text)
    print(text, end="")


if __name__ == "__main__":
    main()

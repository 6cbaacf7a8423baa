"""``memory``: each rank's peak memory over the traced step, what holds it, and whether it fits."""

from __future__ import annotations

import argparse
import json
import os
import re
from typing import Any

from ..job.files import job_rank_files
from ..memory import fit as fitting
from ..memory.astra import write_job_fields
from ..memory.host import CATEGORIES
from ..memory.job import job_memory
from ..memory.plot import timeline_png
from ..memory.profile import RankMemory, sidecar_path
from .common import PROG, add_output_options, declare, subcommand
from .numbers import whole
from .report import Reporter, write_stdout

_MIB = 1 << 20


def add(commands: Any) -> None:
    parser = subcommand(
        commands,
        "memory",
        "each rank's peak memory over the traced step, what holds it at the peak, and a timeline",
        f"  {PROG} memory outputs/                 # raw traces (chakra-profile --profile-memory)\n"
        f"  {PROG} memory et/gpt2_np2 --json       # a converted job (convert-all --memory)\n"
        f"  {PROG} memory et/gpt2_np8 --accelerator H100 --plot mem.png   # a scaled job: does it fit?\n"
        f"  {PROG} memory et/gpt2_np2 --astra-sim-fields mem/gpt2_np2   # for ASTRA-sim's track-local-mem\n"
        "\nsources: Kineto's [memory] events over the host trace's pre-existing tensors, else the host\n"
        "trace's tensors alone (see docs/memory.md for how close each is)\n",
    )
    parser.add_argument(
        "source",
        metavar="PREFIX|DIRECTORY",
        help="a converted job's prefix (PREFIX.<rank>.et with PREFIX.<rank>.memory.json), or a folder of raw "
        "host and Kineto traces",
    )
    parser.add_argument("--json", action="store_true", help='print {"ranks": [{"rank", "peak_bytes", ...}]}')
    parser.add_argument("--plot", metavar="FILE.png", help="draw each rank's timeline (needs matplotlib)")
    parser.add_argument("--accelerator", metavar="A", help="check the peaks against this accelerator's memory")
    parser.add_argument(
        "--gpu-memory", type=whole(1, 1 << 60), metavar="BYTES", help="check the peaks against this many bytes"
    )
    parser.add_argument(
        "--astra-sim-fields",
        metavar="OUT_PREFIX",
        help="write copies of the converted job's .et files (OUT_PREFIX.<rank>.et) with the inputs and outputs "
        "fields ASTRA-sim's track-local-mem reads, compute nodes marked device compute (its report needs it): "
        "for its memory tracker, not for the step time (docs/memory.md)",
    )
    add_output_options(parser)
    parser.set_defaults(run=_run_memory)
    declare(parser, ("plot",), uses_file=_writes_fields, used_as="an output of --astra-sim-fields")


def _writes_fields(path: str, args: argparse.Namespace) -> bool:
    out = getattr(args, "astra_sim_fields", None)
    if not out:
        return False
    return re.fullmatch(re.escape(os.path.abspath(out)) + r"\.[0-9]+\.et", os.path.abspath(path)) is not None


def _run_memory(args: argparse.Namespace, reporter: Reporter) -> int:
    room = fitting.capacity(args.accelerator, args.gpu_memory)
    if args.accelerator and room is None and args.gpu_memory is None:
        known = ", ".join(n.upper() if n != "mi300x" else "MI300X" for n in fitting.CAPACITIES)
        args.usage_error(f"--accelerator {args.accelerator}: no memory size known (one of {known}; or --gpu-memory)")
    if args.astra_sim_fields is not None:
        return _write_fields(args, reporter)
    ranks = job_memory(args.source)
    result = fitting.fit([m.peak_bytes for m in ranks], room) if room is not None else None
    if args.plot:
        timeline_png(args.plot, ranks, result.capacity if result is not None else None, _inputs(args.source))
    if args.json:
        out: dict[str, Any] = {"source": args.source, "ranks": [_rank_json(m) for m in ranks]}
        if result is not None:
            out["fit"] = result.as_json()
        write_stdout(json.dumps(out, indent=2) + "\n")
        return 0
    header = f"{'rank':>4}  {'source':11}  {'peak MiB':>10}  " + "  ".join(f"{c[:13]:>13}" for c in CATEGORIES)
    write_stdout(header + "\n")
    for m in ranks:
        cells = "  ".join(f"{m.at_peak.get(c, 0) / _MIB:>13,.1f}" for c in CATEGORIES)
        write_stdout(f"{m.rank:>4}  {m.source:11}  {m.peak_bytes / _MIB:>10,.1f}  {cells}\n")
    notes = {n for m in ranks for n in m.notes}
    for note in sorted(notes):
        reporter.info(f"note: {note}")
    scaled = [m for m in ranks if m.scaled_from]
    if scaled:
        reporter.info(f"{len(scaled)} rank(s) are a what-if: scaled from a captured rank (docs/memory.md)")
    if result is not None:
        write_stdout(result.line() + "\n")
    if args.plot:
        reporter.info(f"wrote {args.plot}")
    return 0


def _write_fields(args: argparse.Namespace, reporter: Reporter) -> int:
    if os.path.isdir(args.source):
        args.usage_error("--astra-sim-fields: give a converted job's PREFIX (PREFIX.<rank>.et), not a folder")
    for other in ("json", "plot", "accelerator", "gpu_memory"):
        if getattr(args, other):
            args.usage_error(f"--astra-sim-fields writes files only; --{other.replace('_', '-')} does not apply")
    written = write_job_fields(args.source, args.astra_sim_fields, len(job_rank_files(args.source)))
    dropped = sum(s.dropped for s in written)
    reporter.info(
        f"wrote {len(written)} rank(s) to {args.astra_sim_fields}.<rank>.et: "
        f"{sum(s.tensors for s in written):,} tensors, {sum(s.reads for s in written):,} reads"
        + (f" ({dropped:,} left out: the writer is not an ancestor of the reader)" if dropped else "")
        + '; simulate with "track-local-mem": 1 in the system config (its log: sys[R] peak memory usage)'
    )
    return 0


def _inputs(source: str) -> list[str]:
    """The files ``memory`` read, which ``--plot`` must not overwrite."""
    if os.path.isdir(source):
        return [os.path.join(source, name) for name in os.listdir(source)]
    return [p for r in range(len(job_rank_files(source))) for p in (f"{source}.{r}.et", sidecar_path(source, r))]


def _rank_json(m: RankMemory) -> dict[str, Any]:
    out = m.as_json()
    out.pop("timeline")
    return {"rank": out.pop("rank"), "peak_bytes": out.pop("peak_bytes"), **out}

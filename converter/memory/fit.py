"""Will it fit: each rank's peak against an accelerator's memory.

Capacities are the memory each device reports to CUDA/ROCm (``torch.cuda.get_device_properties``
``total_memory``), where one was measured, else its datasheet size; ``--gpu-memory BYTES`` gives
any other. A rank fits when its peak allocated bytes are at most the capacity: the allocator's
caching (reserved above allocated: 3.5-15% more on the committed GPU captures,
bench/results/memory.md), the CUDA context and fragmentation take more, which this check does not
add (give a smaller ``--gpu-memory`` to keep room for them).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import OptionError, TraceFormatError
from ..job import files
from ..job import layout as layout_file
from .profile import RankMemory, read_sidecar, sidecar_path
from .whatif import scaled

GIB = 1 << 30

#: name -> (bytes, where the number comes from)
CAPACITIES: dict[str, tuple[int, str]] = {
    "v100": (32 * GIB, "NVIDIA V100 SXM2 32GB datasheet"),
    "a100": (80 * GIB, "NVIDIA A100 80GB SXM datasheet"),
    "h100": (85_017_493_504, "torch.cuda total_memory of the H100 80GB HBM3 in tests/data/traces/gpu_h100"),
    "h200": (150_109_880_320, "torch.cuda total_memory of the H200 in tests/data/traces/gpu_h200"),
    "mi300x": (192 * GIB, "AMD Instinct MI300X 192GB datasheet"),
}


def capacity(accelerator: str | None, gpu_memory: int | None) -> tuple[int, str] | None:
    """The bytes a rank may use, and their source; None when neither is given."""
    if gpu_memory is not None:
        if gpu_memory <= 0:
            raise OptionError(f"`gpu_memory` {gpu_memory}: bytes, more than 0")
        return gpu_memory, "given on the command line"
    if accelerator is None:
        return None
    found = CAPACITIES.get(accelerator.lower())
    return None if found is None else found


def size(nbytes: int) -> str:
    """Bytes for people: GiB from 1 GiB, else MiB."""
    return f"{nbytes / GIB:,.2f} GiB" if nbytes >= GIB else f"{nbytes / (1 << 20):,.1f} MiB"


@dataclass(frozen=True)
class Fit:
    capacity: int
    source: str
    peaks: tuple[int, ...]  # per rank
    scaled: bool

    @property
    def too_big(self) -> list[int]:
        return [r for r, p in enumerate(self.peaks) if p > self.capacity]

    def line(self) -> str:
        worst = max(range(len(self.peaks)), key=lambda r: self.peaks[r])
        peak = f"peak {size(self.peaks[worst])} on rank {worst}"
        room = f"{size(self.capacity)} ({self.source})"
        if not self.too_big:
            return f"memory: every rank fits in {room}: {peak}"
        named = ", ".join(map(str, self.too_big[:16])) + (" ..." if len(self.too_big) > 16 else "")
        return f"memory: {len(self.too_big)} of {len(self.peaks)} ranks would not fit in {room}: ranks {named}; {peak}"

    def as_json(self) -> dict[str, Any]:
        return {
            "capacity_bytes": self.capacity,
            "capacity_source": self.source,
            "fits": not self.too_big,
            "ranks_not_fitting": self.too_big,
            "peak_bytes": list(self.peaks),
            "scaled": self.scaled,
        }


def has_memory(prefix: str) -> bool:
    return os.path.isfile(sidecar_path(prefix, 0))


def job_peaks(prefix: str, captured: int, ranks: int | None, layout: Any = None) -> list[int]:
    """Each rank's peak of the job ``prefix`` (``captured`` ranks), as a job of ``ranks`` where
    given (a data-parallel widening; FSDP shards shrink where ``layout`` says so)."""
    found: list[RankMemory] = []
    for k in range(captured):
        path = sidecar_path(prefix, k)
        if not os.path.isfile(path):
            raise TraceFormatError(path, "missing: convert with `memory` to check memory (docs/memory.md)")
        found.append(read_sidecar(path))
    if ranks is None or ranks == captured:
        return [m.peak_bytes for m in found]
    shards = None
    source = [r % captured for r in range(ranks)]
    if layout is not None:
        old = layout.mesh
        new_dp = ranks // (old.tp * old.pp)
        shards = (old.dp, new_dp) if layout.dp_mode == "fsdp" else None
        source = [_source(layout, r, new_dp) for r in range(ranks)]
    return [scaled(found[source[r]], r, source[r], shards).peak_bytes for r in range(ranks)]


def _source(layout: Any, rank: int, new_dp: int) -> int:
    old = layout.mesh
    t = rank % old.tp
    d = (rank // old.tp) % new_dp
    p = rank // (old.tp * new_dp)
    return int(old.rank(p, d % old.dp, t))


def fit(peaks: Sequence[int], room: tuple[int, str], scaled_job: bool = False) -> Fit:
    return Fit(room[0], room[1], tuple(peaks), scaled_job)


def job_fit(prefix: str, accelerator: str | None, gpu_memory: int | None, ranks: int | None = None) -> Fit | None:
    """The fit of job ``prefix`` (as a job of ``ranks``, where given) on the accelerator or the
    bytes asked for; None when neither is asked for, or only an accelerator is and the job has no
    memory facts. ``gpu_memory`` without them is refused: it asks for nothing else."""
    room = capacity(accelerator, gpu_memory)
    if room is None:
        return None
    if not has_memory(prefix):
        if gpu_memory is None:
            return None
        raise TraceFormatError(
            sidecar_path(prefix, 0),
            "missing: `gpu_memory` checks the job's memory, which convert and convert-all write with "
            "`memory` (docs/memory.md)",
        )
    captured = len(files.job_rank_files(prefix))
    layout_path = layout_file.find(prefix)
    layout = layout_file.read_layout(layout_path) if layout_path is not None else None
    peaks = job_peaks(prefix, captured, ranks, layout)
    return fit(peaks, room, ranks is not None and ranks != captured)

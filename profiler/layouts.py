"""The parallel layout of a capture: data x tensor x pipeline parallelism, checked before any rank
starts (this module imports no torch).

``--nproc`` = DP x TP x PP. Ranks are laid out as a (pp, dp, tp) mesh, tensor parallelism
innermost: rank = (p * DP + d) * TP + t, so a tensor-parallel group is consecutive ranks, a
data-parallel group strides by TP, and a pipeline group by DP x TP.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

DP_MODES = ("ddp", "fsdp")
SCHEDULES = ("1f1b", "gpipe")
MESH_DIMS = ("pp", "dp", "tp")


@dataclass(frozen=True)
class Layout:
    """How the job splits its ranks; ``dp`` is derived (``nproc / (tp x pp)``)."""

    dp: int
    tp: int = 1
    pp: int = 1
    dp_mode: str = "ddp"
    microbatches: int = 1
    schedule: str = "1f1b"
    ep: int = 1  # expert parallelism: a MoE layer's experts sharded over ep ranks (``experts.py``)

    @property
    def world_size(self) -> int:
        return self.dp * self.tp * self.pp

    def coords(self, rank: int) -> dict[str, int]:
        """This rank's place on each mesh dimension."""
        return {"pp": rank // (self.dp * self.tp), "dp": rank // self.tp % self.dp, "tp": rank % self.tp}

    def groups(self) -> dict[str, list[list[int]]]:
        """Each mesh dimension's groups (global ranks)."""
        out: dict[str, list[list[int]]] = {name: [] for name in MESH_DIMS}
        for rank in range(self.world_size):
            c = self.coords(rank)
            if c["tp"] == 0:
                out["tp"].append([rank + t for t in range(self.tp)])
            if c["dp"] == 0:
                out["dp"].append([rank + d * self.tp for d in range(self.dp)])
            if c["pp"] == 0:
                out["pp"].append([rank + p * self.dp * self.tp for p in range(self.pp)])
        if self.ep > 1:  # the expert group: every rank (``make_layout`` allows no other)
            out["ep"] = [list(range(self.world_size))]
        return out

    def as_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "mesh": {"dims": list(MESH_DIMS), "shape": [self.pp, self.dp, self.tp]},
            "groups": self.groups(),
        }


def make_layout(nproc: int, tp: int, pp: int, dp_mode: str, microbatches: int, schedule: str, ep: int = 1) -> Layout:
    """The layout of ``nproc`` ranks; raises ValueError naming what does not divide."""
    if ep > 1 and (tp, pp, dp_mode, nproc) != (1, 1, "ddp", ep):
        raise ValueError(
            f"--ep {ep} shards the experts over every rank, with DDP for the rest: it needs --nproc {ep}, "
            "--tp 1, --pp 1 and --dp ddp"
        )
    if nproc % (tp * pp):
        raise ValueError(f"--nproc {nproc} is not a multiple of --tp {tp} x --pp {pp} = {tp * pp}")
    if pp == 1 and microbatches != 1:
        raise ValueError("--microbatches applies to pipeline parallelism (--pp 2 or more)")
    if pp > 1 and schedule == "1f1b" and microbatches < pp:
        raise ValueError(f"the 1F1B schedule needs --microbatches >= --pp ({pp}), got {microbatches}")
    return Layout(nproc // (tp * pp), tp, pp, dp_mode, microbatches, schedule, ep)


def shape_problems(
    layout: Layout, n_layer: int, hidden: int, n_head: int, intermediate: int, batch_size: int
) -> list[str]:
    """What in the model does not split over the layout (empty when it does)."""
    problems = []
    for what, value in (
        ("--n-head (attention heads)", n_head),
        ("--hidden", hidden),
        ("--intermediate (MLP width)", intermediate),
    ):
        if value % layout.tp:
            problems.append(f"{what} {value} is not a multiple of --tp {layout.tp}")
    if n_layer < layout.pp:
        problems.append(f"--n-layer {n_layer} is fewer layers than --pp {layout.pp} stages")
    if batch_size % layout.microbatches:
        problems.append(f"--batch-size {batch_size} is not a multiple of --microbatches {layout.microbatches}")
    return problems


def stage_layers(n_layer: int, pp: int, stage: int) -> range:
    """The blocks of pipeline stage ``stage``: whole blocks, the first stages one more when
    ``n_layer`` does not divide."""
    base, extra = divmod(n_layer, pp)
    start = stage * base + min(stage, extra)
    return range(start, start + base + (stage < extra))

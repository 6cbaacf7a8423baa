"""A job's layout file, ``PREFIX.layout.json`` (``chakra-profile --convert`` writes it beside the
job's ``PREFIX.<rank>.et``): the (pp, dp, tp) mesh, tensor parallelism innermost, how data
parallelism synchronises (``ddp``, ``fsdp``), and per rank the process group of each mesh
dimension (and its FSDP units). ``ranks/layoutscale.py`` scales a job by it."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from ..errors import TraceFormatError
from ..io import read_side_input
from ..schema.astra import ALL_RANKS_GROUPS

LAYOUT_SUFFIX = ".layout.json"
DIMS = ("tp", "dp", "pp")


def path_for(prefix: str) -> str:
    """The layout file of the job whose ranks are ``PREFIX.<rank>.et``."""
    return f"{prefix}{LAYOUT_SUFFIX}"


def find(prefix: str) -> str | None:
    path = path_for(prefix)
    return path if os.path.isfile(path) else None


def needs_layout(layout: Layout) -> bool:
    """False for plain DDP (no tensor or pipeline parallelism): ``scale``'s data-parallel rules
    already say what it becomes (and keep every byte of it)."""
    return not (layout.mesh.tp == layout.mesh.pp == 1 and layout.dp_mode == "ddp")


@dataclass(frozen=True)
class Mesh:
    """A (pp, dp, tp) mesh of ranks, tensor parallelism innermost."""

    dp: int
    tp: int
    pp: int

    @property
    def size(self) -> int:
        return self.dp * self.tp * self.pp

    def coords(self, rank: int) -> tuple[int, int, int]:
        """(p, d, t) of ``rank``."""
        return rank // (self.dp * self.tp), rank // self.tp % self.dp, rank % self.tp

    def rank(self, p: int, d: int, t: int) -> int:
        return (p * self.dp + d) * self.tp + t

    def group(self, dim: str, rank: int) -> tuple[int, ...]:
        """The ranks of ``rank``'s group on mesh dimension ``dim``."""
        p, d, t = self.coords(rank)
        if dim == "tp":
            return tuple(self.rank(p, d, x) for x in range(self.tp))
        if dim == "dp":
            return tuple(self.rank(p, x, t) for x in range(self.dp))
        return tuple(self.rank(x, d, t) for x in range(self.pp))


@dataclass(frozen=True)
class Layout:
    """What ``PREFIX.layout.json`` says: the mesh, the data-parallel mode, and per rank the mesh
    dimension of each of its group names."""

    mesh: Mesh
    dp_mode: str
    dims: tuple[dict[str, str], ...]  # per captured rank: pg_name -> mesh dimension
    units: tuple[tuple[tuple[tuple[int, int], ...], ...], ...] = ()  # per rank: FSDP units' (rows, bytes/row)
    #: a collective on no named group (``"0"`` where no dimension spans every rank: gloo's c10d
    #: ones record none): comm_type -> its mesh dimension (``--layout hsdp,shard=S``)
    unnamed: tuple[tuple[int, str], ...] = ()


def read_layout(path: str) -> Layout:
    """Raises ``TraceFormatError`` for a file that is not a layout of this shape."""
    try:
        raw = json.loads(read_side_input(path, "layout file"))
        mesh = Mesh(int(raw["dp"]), int(raw["tp"]), int(raw["pp"]))
        mode = str(raw["dp_mode"])
        ranks = raw["ranks"]
        dims = []
        for rank in range(mesh.size):
            names: dict[str, str] = {}
            for dim in DIMS:
                name = str(ranks[rank][dim]["pg_name"])
                names.setdefault("0" if name in ALL_RANKS_GROUPS else name, dim)
            dims.append(names)
        units = tuple(
            tuple(tuple((int(rows), int(size)) for rows, size in unit) for unit in ranks[rank].get("fsdp_units") or ())
            for rank in range(mesh.size)
        )
    except (ValueError, KeyError, TypeError, IndexError, RecursionError) as exc:
        raise TraceFormatError(
            path, f"not a layout file (dp, tp, pp, dp_mode, ranks[r][dim].pg_name): {exc!r}"
        ) from None
    if mode not in ("ddp", "fsdp"):  # an unknown mode is not DDP: refused, not guessed
        raise TraceFormatError(path, f"dp_mode {mode!r}: a layout file's dp_mode is ddp or fsdp")
    if min(mesh.dp, mesh.tp, mesh.pp) < 1 or len(ranks) != mesh.size:
        raise TraceFormatError(path, f"a {mesh.pp} x {mesh.dp} x {mesh.tp} mesh with {len(ranks)} ranks listed")
    return Layout(mesh, mode, tuple(dims), units)

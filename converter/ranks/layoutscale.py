"""``scale`` of a job whose layout is known: data x tensor x pipeline parallel ranks.

``chakra-profile --convert`` writes ``PREFIX.layout.json`` beside the job's ``PREFIX.<rank>.et``:
the mesh (``dp``, ``tp``, ``pp``, how data parallelism synchronises) and, per rank, the process
group (``pg_name``) of each mesh dimension. Ranks are laid out as a (pp, dp, tp) mesh, tensor
parallelism innermost (``rank = (p * DP + d) * TP + t``). Scaling to N ranks keeps TP and PP and
makes the data-parallel degree ``N / (TP x PP)``:

* new rank (p, d, t) is a copy of captured rank (p, d mod DP, t);
* each collective moves to the new rank's group of the same mesh dimension: tensor- and
  pipeline-parallel groups are tiled per replica, data-parallel groups widened to the new degree;
  new group ids are numbered tp groups, then dp, then pp (one-rank groups get none, a group of
  every rank is the default group ``0``);
* bytes: an FSDP all-gather on the data-parallel dimension moves one rank's shard and a
  reduce-scatter the whole (padded) gradient: FSDP pads each parameter's rows to a multiple of the
  degree D, so a unit's shard is ``sum(ceil(rows / D) x bytes per row)`` and its reduce-scatter D
  times that. Where the layout file lists the rank's FSDP units (``ranks[r].fsdp_units``: each
  parameter's ``[rows, bytes per row]``), the unit whose shard (or padded whole) at the captured
  degree is the node's ``comm_size`` gives the exact bytes at the new one; otherwise an
  all-gather becomes ``size x DP / D`` and a reduce-scatter keeps its bytes (exact when the rows
  divide). Everything else keeps its bytes (DDP's gradient all-reduce is the whole gradient on any
  degree, tensor-parallel activations and pipeline sends do not depend on it);
* a send or receive keeps its tag and goes to the peer's copy in the same data-parallel replica.

Refused, with one line: N not a multiple of TP x PP, a rank count or group the layout file does not
describe, a layout file that is not one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import ConverterError, OptionError, TraceContentError
from ..et import wire
from ..et.decode import EtTrace, attribute_spans

# the layout file (job/layout.py), for the importers that name this module
from ..job.layout import DIMS as DIMS
from ..job.layout import LAYOUT_SUFFIX as LAYOUT_SUFFIX
from ..job.layout import Layout as Layout
from ..job.layout import Mesh as Mesh
from ..job.layout import find as find
from ..job.layout import needs_layout as needs_layout
from ..job.layout import path_for as path_for
from ..job.layout import read_layout as read_layout
from ..schema.astra import ALL_RANKS_GROUPS
from ..schema.chakra import CollectiveCommType, NodeType

_NAMES = {name: wire.attr_name(name) for name in ("pg_name", "comm_size", "comm_src", "comm_dst")}
_SEND, _RECV, _COLL = NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE, NodeType.COMM_COLL_NODE
_GATHER, _SCATTER = int(CollectiveCommType.ALL_GATHER), int(CollectiveCommType.REDUCE_SCATTER)


#: (row, mesh dimension, comm_size at the new degree, peer of a send/receive, whether the size changed)
_Planned = tuple[int, str, int, int | None, bool]


class LayoutScaler:
    """Writes captured rank k as new rank r (``rank_bytes``) and makes the new group file."""

    def __init__(
        self,
        layout: Layout,
        path: str,
        captured: int,
        ranks: int,
        bytes_ranks: int | None = None,
        resized: Mapping[tuple[str, int, int], int] | None = None,
    ) -> None:
        """``bytes_ranks``: FSDP bytes as at that many ranks' degree, then ``resized``: (mesh
        dimension, comm_type, those bytes) -> the bytes to write (a reduced job standing for a
        wider one, ``simulate/meshreduced.py``); default: ``ranks``, none."""
        self.layout, self.path, self.resized = layout, path, resized or {}
        old = layout.mesh
        if captured != old.size:
            raise ConverterError(
                f"{path}: the layout has {old.size} ranks ({old.pp} x {old.dp} x {old.tp}, "
                f"pp x dp x tp) but {captured} rank files were found"
            )
        if ranks % (old.tp * old.pp):
            raise OptionError(
                f"`ranks` {ranks} is not a multiple of tp {old.tp} x pp {old.pp} = "
                f"{old.tp * old.pp}: the layout keeps its tensor- and pipeline-parallel groups"
            )
        self.new = Mesh(ranks // (old.tp * old.pp), old.tp, old.pp)
        self.bytes_dp = (bytes_ranks or ranks) // (old.tp * old.pp)
        if old.dp == 1 and self.new.dp > 1:
            raise ConverterError(
                f"{path}: the capture has data-parallel degree 1, so its gradient "
                "synchronisation ran on one rank and is no communication in the trace: capture "
                "with at least 2 data-parallel ranks to scale it"
            )
        if self.new.dp == 1 and old.dp > 1:
            raise OptionError(
                f"`ranks` {ranks} leaves data-parallel degree 1: scale to at least {2 * old.tp * old.pp} ranks"
            )
        # group ids, numbered as ranks first appear in them: TP groups, then DP, then PP (a group of
        # every rank is the default group "0", a one-rank group has none); each dimension's groups
        # are counted, never listed per rank (a DP group lists N / (TP x PP) ranks: per rank, N^2)
        self._first: dict[str, int] = {}
        counted = 0
        for dim in DIMS:
            size, count = self._size(dim), self.new.size // self._size(dim)
            if 1 < size < self.new.size:
                self._first[dim], counted = counted + 1, counted + count

    def describe(self) -> str:
        old, new = self.layout.mesh, self.new
        return (
            f"pp {new.pp} x dp {new.dp} x tp {new.tp} ({self.layout.dp_mode}; captured: pp {old.pp} x dp {old.dp} "
            f"x tp {old.tp})"
        )

    def source(self, rank: int) -> int:
        """The captured rank that new rank ``rank`` copies."""
        p, d, t = self.new.coords(rank)
        return self.layout.mesh.rank(p, d % self.layout.mesh.dp, t)

    def _size(self, dim: str) -> int:
        return {"tp": self.new.tp, "dp": self.new.dp, "pp": self.new.pp}[dim]

    def _index(self, dim: str, rank: int) -> int:
        """Which of dimension ``dim``'s groups holds ``rank``, numbered by their lowest rank."""
        p, d, t = self.new.coords(rank)
        if dim == "tp":
            return p * self.new.dp + d
        return p * self.new.tp + t if dim == "dp" else d * self.new.tp + t

    def group_id(self, dim: str, rank: int) -> str | None:
        """The id of ``rank``'s group on ``dim``: "0" for every rank, None for a group of one."""
        size = self._size(dim)
        if size == self.new.size:
            return "0"
        return None if size == 1 else str(self._first[dim] + self._index(dim, rank))

    def groups(self) -> dict[str, list[int]]:
        """Every group of two or more ranks, but the default one: id -> members (each rank once a
        dimension)."""
        out: dict[str, list[int]] = {}
        for dim in DIMS:
            if dim in self._first:
                for rank in range(self.new.size):
                    out.setdefault(str(self._first[dim] + self._index(dim, rank)), []).append(rank)
        return out

    def new_layout(self) -> dict[str, Any]:
        """The layout file of the scaled job: per rank, each dimension's group id (a one-rank group
        is named ``one:<rank>``); the members are in the group file (listing them per rank would
        grow with N^2)."""
        mesh = self.new
        ranks = [{dim: {"pg_name": self.group_id(dim, r) or f"one:{r}"} for dim in DIMS} for r in range(mesh.size)]
        return {"dp": mesh.dp, "tp": mesh.tp, "pp": mesh.pp, "dp_mode": self.layout.dp_mode, "ranks": ranks}

    def plan(self, k: int, trace: EtTrace) -> list[_Planned]:
        """Per communication node of captured rank ``k``: (row, mesh dim, size, peer), checked."""
        out = []
        names = self.layout.dims[k]
        for row in sorted(trace.comm):
            attrs, node_type = trace.comm[row], trace.types[row]
            where = f"node {trace.ids[row]} '{trace.names[row]}'"
            name = str(attrs.get("pg_name", ""))
            name = "0" if name in ALL_RANKS_GROUPS else name
            dim = names.get(name, "pp" if node_type in (_SEND, _RECV) else None)  # P2P: its peers say
            if dim is None and name == "0" and node_type == _COLL:
                dim = dict(self.layout.unnamed).get(int(attrs.get("comm_type", -1)))
            if dim is None:
                raise TraceContentError(
                    trace.path,
                    f"{where} is on group {name!r}, which the layout file "
                    f"{self.path} gives no mesh dimension for rank {k}",
                )
            peer = None
            if node_type in (_SEND, _RECV):
                peer = attrs.get("comm_dst" if node_type == _SEND else "comm_src")
                if type(peer) is not int or not 0 <= peer < self.layout.mesh.size:
                    raise TraceContentError(trace.path, f"{where} has no peer rank of the job ({peer!r})")
            size = int(attrs.get("comm_size", 0) or 0)
            if dim == "dp" and self.layout.dp_mode == "fsdp" and node_type == _COLL:
                size = self._fsdp_bytes(k, attrs.get("comm_type"), size)
            if self.resized and node_type == _COLL:
                size = self.resized.get((dim, int(attrs.get("comm_type", -1)), size), size)
            out.append((row, dim, size, peer, size != int(attrs.get("comm_size", 0) or 0)))
        return out

    def _fsdp_bytes(self, k: int, comm_type: Any, size: int) -> int:
        """The bytes of captured rank ``k``'s FSDP all-gather or reduce-scatter of ``size`` bytes
        at the new data-parallel degree."""
        if comm_type not in (_GATHER, _SCATTER):
            return size
        old, new = self.layout.mesh.dp, self.bytes_dp
        units = self.layout.units[k] if k < len(self.layout.units) else ()
        for unit in units:
            shard = sum(-(-rows // old) * per_row for rows, per_row in unit)
            if size == (shard if comm_type == _GATHER else shard * old):
                new_shard = sum(-(-rows // new) * per_row for rows, per_row in unit)
                return new_shard if comm_type == _GATHER else new_shard * new
        return size * old // new if comm_type == _GATHER else size

    def rewrite(self, records: list[bytes], trace_types: Any, plan: list[_Planned], rank: int) -> dict[int, bytes]:
        """The changed records (by row) of new rank ``rank``."""
        old, new = self.layout.mesh, self.new
        out: dict[int, bytes] = {}
        _, d_new, _ = new.coords(rank)
        for row, dim, size, peer, resized in plan:
            changes: dict[str, bytes] = {}
            changes["pg_name"] = wire.string_attr(_NAMES["pg_name"], self.group_id(dim, rank) or "0", "pg_name")
            node_type = trace_types[row]
            if resized:
                changes["comm_size"] = wire.int64_attr(_NAMES["comm_size"], size, "comm_size")
            if peer is not None:
                p, _, t = old.coords(peer)
                mapped = new.rank(p, d_new, t)
                own = "comm_src" if node_type == _SEND else "comm_dst"
                other = "comm_dst" if node_type == _SEND else "comm_src"
                changes[own] = wire.int64_attr(_NAMES[own], rank, own)
                changes[other] = wire.int64_attr(_NAMES[other], mapped, other)
            out[row] = _spliced(records[row + 1], changes)
        return out


def _spliced(message: bytes, changes: dict[str, bytes]) -> bytes:
    """``message`` with the named attributes replaced (added at the end where absent)."""
    pieces, pos = [], 0
    left = dict(changes)
    for name, start, end in attribute_spans(message):
        if name in left:
            pieces += [message[pos:start], left.pop(name)]
            pos = end
    pieces.append(message[pos:])
    pieces.extend(left.values())
    return b"".join(pieces)

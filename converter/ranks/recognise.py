"""The parallel layout of a captured job from its collectives, for ``scale`` without a layout file;
``--layout`` where the trace cannot tell; and a layout file checked against the capture.

What rank 0's collectives say (each collective's type, its process group, the group's ranks from
the job's group file; ``"0"``, or a group listing every rank, is every rank):

* all-gathers **and** reduce-scatters over every rank: FSDP / ZeRO-3 (parameter shards gathered,
  gradients reduce-scattered): scaled as FSDP (``layoutscale``: an all-gather's shard shrinks with
  the data-parallel degree, a reduce-scatter keeps the whole padded gradient);
* all-gathers and reduce-scatters over sub-groups and all-reduces over others: HSDP;
* sends and receives: pipeline parallelism; all-to-all within sub-groups: expert parallelism in
  expert groups; collectives over two families of sub-groups: tensor x data parallelism;
* all-gathers without reduce-scatters (or the other way), and FSDP beside sub-groups: not sure;
* all-to-alls with splits over every rank that pair as dispatch and combine: expert parallelism
  over every rank, which ``scale`` extends (``expertscale.from_trace``);
* all-reduces (and the like) over every rank, with at most one family of sub-groups: DDP, scaled by
  ``scale``'s data-parallel rules; other all-to-alls over every rank too (each rank's bytes kept: its
  tokens or samples per step do not change with the width; ASTRA-sim splits them among the peers),
  which ``scale`` says.

* collectives on no named group (``"0"``) beside groups of rank 0 that no collective names (the
  group file lists them, from the Kineto traces' ``distributedInfo``): gloo's c10d collectives
  (DDP's, FSDP2's) record no group, DTensor's tensor-parallel ones name theirs, so those may be on
  another mesh dimension (a one-rank group: a dimension of size 1, the other spanning every
  rank): a 2-D layout, refused.

Everything but DDP and FSDP is refused without ``--layout`` (``parse_spec``: ``ddp`` or ``fsdp``,
then ``tp=T`` and ``pp=P``; or ``hsdp,shard=S``: replicas added, shard groups kept; expert groups
have no ``--layout`` and their refusal says what to do), whose mesh is mapped onto the group file
(``layout_from_spec``) and scaled as it says, the recognised layout named beside it. Where no mesh dimension spans every
rank, the collectives on no named group are put on the data-parallel one (gloo's DDP and FSDP2
collectives; ``scale`` says so): a user's own gloo TP x DDP and TP x FSDP2 jobs then scale as the
real ones (``bench/own_layouts.py``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import ConverterError, OptionError, TraceContentError, TraceFormatError
from ..et.decode import EtTrace
from ..schema.astra import ALL_RANKS_GROUPS
from ..schema.chakra import CollectiveCommType, NodeType
from .layoutscale import DIMS, Layout, Mesh

DP_MODES = ("ddp", "fsdp")
_GATHER, _SCATTER = int(CollectiveCommType.ALL_GATHER), int(CollectiveCommType.REDUCE_SCATTER)
_ALL_TO_ALL, _ALL_REDUCE = int(CollectiveCommType.ALL_TO_ALL), int(CollectiveCommType.ALL_REDUCE)
_P2P = (NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE)
_SPEC = re.compile(r"(ddp|fsdp)((?:,(?:tp|pp)=[1-9][0-9]{0,6})*)|hsdp,shard=([1-9][0-9]{0,6})")
HINT = (
    "give `layout` to scale (ddp or fsdp, then tp=T and pp=P: e.g. fsdp,tp=2; or hsdp,shard=S; simulate the "
    "job it writes), or the job's layout file (PREFIX.layout.json)"
)
EP_HINT = (
    "scale extends expert parallelism over every rank only (chakra-profile --model mixtral --ep E --nproc E, "
    "or dispatch and combine all-to-alls over every rank); capture the expert-group job at the size you "
    "want to simulate, or give `layout` ddp to keep every rank's bytes as captured (said)"
)


@dataclass(frozen=True)
class Recognised:
    """What the collectives say: ``kind`` ("ddp", "fsdp", "hsdp", "pp", "ep", "2-d", "unsure"),
    ``evidence`` (what in the trace says so), ``layout`` (where ``scale`` can extend it)."""

    kind: str
    evidence: str
    layout: Layout | None = None
    say: bool = False  # scale states it (a data-parallel rule applied to more than all-reduces)

    @property
    def scalable(self) -> bool:
        return self.kind in ("ddp", "fsdp")


def _every(groups: dict[str, list[int]], captured: int) -> set[str]:
    """The names of groups of every rank."""
    return {"0", *(n for n, m in groups.items() if sorted(set(m)) == list(range(captured)))}


def every_rank(groups: dict[str, list[int]], captured: int) -> set[str]:
    """The names of the job's groups of every rank ("0" among them)."""
    return _every(groups, captured)


def _name(raw: object) -> str:
    name = str(raw if raw is not None else "")
    return "0" if name in ALL_RANKS_GROUPS else name


def recognise(trace: EtTrace, groups: dict[str, list[int]], captured: int) -> Recognised:
    """The layout rank 0's ``trace`` shows (``groups``: the job's group file, id -> ranks)."""
    every = _every(groups, captured)
    kinds: dict[str, set[int]] = {}
    sends = 0
    first = ""
    for row in sorted(trace.comm):
        attrs, node_type = trace.comm[row], trace.types[row]
        if node_type in _P2P:
            sends += 1
            if not first:
                kind = "send to" if node_type == NodeType.COMM_SEND_NODE else "receive from"
                peer = attrs.get("comm_dst" if node_type == NodeType.COMM_SEND_NODE else "comm_src")
                first = f"node {trace.ids[row]} '{trace.names[row]}' is a {kind} rank {peer}"
        elif node_type == NodeType.COMM_COLL_NODE:
            kinds.setdefault(_name(attrs.get("pg_name")), set()).add(int(attrs.get("comm_type", -1)))
    if sends:
        return Recognised(
            "pp",
            f"{first} ({sends} send(s)/receive(s)): point-to-point (pipeline) peers cannot be scaled as "
            "data parallelism",
        )
    a2a = sorted(g for g, k in kinds.items() if _ALL_TO_ALL in k)
    expert = [g for g in a2a if g not in every]
    if expert:
        return Recognised("ep", f"all-to-all on sub-group(s) {', '.join(expert)}: expert parallelism in expert groups")
    silent = _silent(groups, kinds, every) if "0" in kinds else []
    if silent:
        return Recognised("2-d", _silent_evidence(groups, silent, captured))
    sharded = sorted(g for g, k in kinds.items() if {_GATHER, _SCATTER} <= k)
    sub = sorted(g for g in kinds if g not in every)
    if sharded:
        if all(g in every for g in sharded) and not sub:
            return Recognised(
                "fsdp",
                f"all-gathers and reduce-scatters of parameter shards over every rank (rank 0: {_count(trace)}): "
                "FSDP / ZeRO-3",
                fsdp_layout(captured, every),
            )
        others = sorted(g for g in kinds if g not in sharded)
        if all(g not in every for g in sharded) and others:
            if _replicates(trace, sharded, others, groups):
                return Recognised(
                    "hsdp",
                    f"all-gathers and reduce-scatters on sub-group(s) {', '.join(sharded)} and all-reduces of "
                    f"their gradient shards on group(s) {', '.join(others)}: HSDP (sharded within, replicated across)",
                )
            return Recognised(
                "2-d",
                f"all-gathers and reduce-scatters on sub-group(s) {', '.join(sharded)} and other collectives on "
                f"group(s) {', '.join(others)}: FSDP x tensor parallelism",
            )
        return Recognised(
            "2-d", f"FSDP all-gathers and reduce-scatters beside sub-group(s) {', '.join(sub)}: FSDP x TP?"
        )
    half = sorted(g for g, k in kinds.items() if k & {_GATHER, _SCATTER})
    if half:
        return Recognised(
            "unsure",
            f"all-gathers or reduce-scatters without the other on group(s) {', '.join(half)}: "
            "ZeRO/FSDP sharding, or gathered values of a DDP job?",
        )
    families = {tuple(sorted(set(groups[g]))) for g in sub if g in groups}  # the rest: scale names them
    sizes = {len(f) for f in families}
    if len(sizes) > 1 or (families and _overlap(families)):
        return Recognised(
            "2-d",
            f"collectives on sub-groups of two families ({_families(families)}): tensor x data parallelism?",
        )
    if a2a:  # over every rank: each rank's tokens (or samples) per step are kept, so are its bytes
        return Recognised(
            "ddp",
            "all-to-all over every rank (experts or embeddings exchanged among all ranks): each rank's "
            "bytes kept, as data parallelism keeps its batch per rank (the split among peers follows the width)",
            say=True,
        )
    return Recognised("ddp", "all-reduces over every rank: DDP")


def _silent(groups: dict[str, list[int]], kinds: dict[str, set[int]], every: set[str]) -> list[str]:
    """Rank 0's groups of fewer than every rank that no collective of rank 0 names."""
    return sorted((g for g in groups if g not in every and g not in kinds and 0 in groups[g]), key=_order)


def _silent_evidence(groups: dict[str, list[int]], silent: list[str], captured: int) -> str:
    listed = ", ".join(f"{g} {groups[g]}" for g in silent[:4]) + (" ..." if len(silent) > 4 else "")
    single = all(len(set(groups[g])) == 1 for g in silent)
    why = (
        "a device-mesh dimension of size 1: the collectives over every rank may be another dimension's, "
        "e.g. tensor parallelism over every rank"
        if single
        else "a device mesh of more than one dimension: those collectives may be on them"
    )
    return (
        f"collectives on no named group (gloo's c10d ones, DDP's and FSDP's, record none) beside rank 0's "
        f"group(s) {listed} of the job's {captured} ranks that no collective names ({why})"
    )


def unnamed_as_dp(layout: Layout) -> bool:
    """Whether ``layout_from_spec`` put the collectives that name no group (``"0"``) on the
    data-parallel dimension: no dimension spans every rank (gloo's DDP and FSDP collectives record
    no group; DTensor's tensor-parallel ones name theirs)."""
    mesh = layout.mesh
    spans = any(n == mesh.size for n in (mesh.dp, mesh.tp, mesh.pp))
    return not spans and mesh.dp > 1 and layout.dims[0].get("0") == "dp"


def _replicates(trace: EtTrace, sharded: list[str], others: list[str], groups: dict[str, list[int]]) -> bool:
    """Whether every collective on ``others`` is an all-reduce of a reduce-scatter's output (its
    bytes divided by the sharded group's size): HSDP's replication, not tensor parallelism."""
    shards: set[int] = set()
    rest: list[tuple[int, int]] = []
    for attrs in trace.comm.values():
        name, kind, size = _name(attrs.get("pg_name")), attrs.get("comm_type"), int(attrs.get("comm_size", 0) or 0)
        if name in sharded and kind == _SCATTER:
            shards.add(size // max(1, len(groups.get(name, ())) or 1))
        elif name in others:
            rest.append((int(kind if kind is not None else -1), size))
    return bool(rest) and all(k == _ALL_REDUCE and size in shards for k, size in rest)


def _overlap(families: set[tuple[int, ...]]) -> bool:
    """Whether the sub-groups overlap (two families: rows and columns of a mesh)."""
    seen: set[int] = set()
    for family in families:
        if seen & set(family):
            return True
        seen |= set(family)
    return False


def _families(families: set[tuple[int, ...]]) -> str:
    shown = sorted(families)[:4]
    return " ".join("{" + ",".join(map(str, f)) + "}" for f in shown) + (" ..." if len(families) > 4 else "")


def _count(trace: EtTrace) -> str:
    gathers = sum(1 for a in trace.comm.values() if a.get("comm_type") == _GATHER)
    scatters = sum(1 for a in trace.comm.values() if a.get("comm_type") == _SCATTER)
    return f"{gathers} all-gather(s), {scatters} reduce-scatter(s)"


def fsdp_layout(captured: int, every: set[str]) -> Layout:
    """FSDP over all ``captured`` ranks: one data-parallel dimension, every group of every rank on it."""
    dims = {name: "dp" for name in sorted(every)}
    return Layout(Mesh(captured, 1, 1), "fsdp", tuple(dict(dims) for _ in range(captured)))


def parse_spec(spec: str) -> tuple[str, int, int]:
    """``ddp`` / ``fsdp``, then ``,tp=T`` and ``,pp=P``: (data-parallel mode, tp, pp); or
    ``hsdp,shard=S``: ("hsdp", S, 1), the shard groups where a tp dimension would be (FSDP2's
    (replicate, shard) mesh: shard innermost)."""
    text = spec.strip().lower().replace(" ", "")
    match = _SPEC.fullmatch(text)
    if match is None:
        raise OptionError(f"`layout` {spec!r}: write ddp or fsdp, then tp=T and pp=P (e.g. fsdp,tp=2), or hsdp,shard=S")
    if match.group(3) is not None:
        return "hsdp", int(match.group(3)), 1
    degrees = {"tp": 1, "pp": 1}
    for part in filter(None, match.group(2).split(",")):
        dim, value = part.split("=")
        degrees[dim] = int(value)
    return match.group(1), degrees["tp"], degrees["pp"]


def layout_from_spec(spec: str, captured: int, groups: dict[str, list[int]], group_file: str | None) -> Layout:
    """The layout ``spec`` gives a job of ``captured`` ranks, each rank's mesh groups named by the
    group file's ids (a group of every rank is "0", a one-rank group has none)."""
    mode, tp, pp = parse_spec(spec)
    if captured % (tp * pp):
        what = "shard" if mode == "hsdp" else "tp x pp"
        raise OptionError(f"`layout` {spec!r}: the {captured} captured ranks are not a multiple of {what} = {tp * pp}")
    mesh = Mesh(captured // (tp * pp), tp, pp)
    by_members = {tuple(sorted(set(m))): name for name, m in sorted(groups.items(), key=lambda i: _order(i[0]))}
    dims = []
    for rank in range(captured):
        names: dict[str, str] = {}
        for dim in DIMS:
            members = mesh.group(dim, rank)
            if len(members) == captured:
                names.setdefault("0", dim)
                for name in _every(groups, captured) - {"0"}:
                    names.setdefault(name, dim)
            elif len(members) > 1:
                found = by_members.get(tuple(members))
                if found is None and not (dim == "pp" and tp * mesh.dp == 1):
                    source = group_file or "no communicator group file (gloo records no process group)"
                    raise TraceFormatError(
                        source,
                        f"`layout` {spec!r}: rank {rank}'s {dim} group {list(members)} is not a group of it: "
                        "the layout and the capture disagree",
                    )
                if found is not None:
                    names.setdefault(found, dim)
        if mode != "hsdp" and mesh.dp > 1 and not any(n == captured for n in (mesh.dp, tp, pp)):
            names.setdefault("0", "dp")  # what names no group (gloo's c10d collectives): data-parallel
        dims.append(names)
    if mode == "hsdp":  # replicas added, shards kept: every byte as captured, as DDP x TP keeps them
        unnamed = ((_GATHER, "tp"), (_SCATTER, "tp"), (_ALL_REDUCE, "dp")) if mesh.dp > 1 and tp > 1 else ()
        return Layout(mesh, "ddp", tuple(dims), unnamed=unnamed)
    return Layout(mesh, mode, tuple(dims))


def _order(name: str) -> tuple[int, str]:
    return (int(name), name) if name.isdigit() else (1 << 62, name)


def check_layout_file(layout: Layout, path: str, trace: EtTrace, groups: dict[str, list[int]]) -> None:
    """Refuse a layout file that contradicts the capture: its groups are not the group file's, or
    its data-parallel mode is not what rank 0's collectives on its data-parallel group show (FSDP
    all-gathers and reduce-scatters scaled as DDP, or the other way)."""
    mesh = layout.mesh
    for rank in range(mesh.size):
        for name, dim in layout.dims[rank].items():
            members = sorted(set(groups.get(name, ()))) if name != "0" else list(range(mesh.size))
            expected = list(mesh.group(dim, rank))
            if (name in groups or name == "0") and members != expected:
                raise TraceFormatError(
                    path,
                    f"rank {rank}'s {dim} group {name} is ranks {members} in the group file, but the "
                    f"{mesh.pp} x {mesh.dp} x {mesh.tp} mesh (pp x dp x tp) makes it {expected}: "
                    "the layout file contradicts the capture",
                )
    dp_names = {n for n, d in layout.dims[0].items() if d == "dp"}
    shown: set[int] = set()
    for row in sorted(trace.comm):
        attrs = trace.comm[row]
        if trace.types[row] == NodeType.COMM_COLL_NODE and _name(attrs.get("pg_name")) in dp_names:
            shown.add(int(attrs.get("comm_type", -1)))
        # a group of no mesh dimension (an --ep job's expert groups) is the scaler's to name, per rank
    sharded = {_GATHER, _SCATTER} <= shown
    if layout.dp_mode == "ddp" and sharded:
        raise TraceContentError(
            path,
            "dp_mode is ddp, but rank 0's data-parallel group carries all-gathers and reduce-scatters (FSDP): "
            "the layout file contradicts the capture (FSDP would be scaled as DDP)",
        )
    if layout.dp_mode == "fsdp" and mesh.dp > 1 and not shown & {_GATHER, _SCATTER}:
        raise TraceContentError(
            path,
            "dp_mode is fsdp, but rank 0's data-parallel group carries no all-gather or reduce-scatter: "
            "the layout file contradicts the capture",
        )


def refusal(found: Recognised, path: str) -> ConverterError:
    """The error of a layout ``scale`` cannot extend from the trace (rank 0's, ``path``) alone."""
    what = {
        "pp": "pipeline parallelism",
        "ep": "expert parallelism",
        "hsdp": "HSDP",
        "2-d": "a 2-D layout",
        "unsure": "a layout the trace does not settle",
    }[found.kind]
    hint = EP_HINT if found.kind == "ep" else HINT
    return TraceContentError(path, f"{found.evidence}; the trace alone cannot lay out {what}", hint=hint)

"""``scale``: a captured job of K ranks written as a data-parallel job of N ranks.

The captured ranks ``IN.<k>.et`` (k = 0..K-1, ``--astra-sim`` output) and their communicator
group file (``commgroups.find``) become ``OUT.<r>.et`` (r = 0..N-1) and ``OUT.comm_group.json``.
The new job is N/K copies ("replicas") of the captured job side by side: rank r = j*K + k is
captured rank k = r mod K in replica j = r // K (round-robin, so the captured ranks' differences
survive). Rules:

* every node, id, dependency and attribute of a rank is kept, byte for byte, except the
  ``pg_name`` of a collective on a sub-group (below); the GlobalMetadata record's ``world_size``
  (where a rank records the job's size, ``jobsize.py``) becomes N;
* a collective over all ranks (``pg_name`` "" or "0", or a group listing every captured rank)
  stays one over all N ranks with the same ``comm_size``: data parallelism keeps the bytes each
  rank sends (a DDP gradient all-reduce is the model's gradients on any number of ranks; the
  real 2- and 4-rank captures agree, docs/scale.md);
* a sub-group (a group of some of the captured ranks) is copied into each replica: group g with
  ranks S becomes, in replica j, group g + j*M (M the largest group id of the file) with ranks
  S + j*K, and a node of rank j*K + k on g names g + j*M; so N must be a multiple of K;
* refused, with one line naming it: a send or receive (pipeline peers: replicating them gives
  pipelines without the data-parallel group that would join them), a group that does not tile
  N, a group file that does not match the ranks, ranks that look like two jobs.

An expert-parallel job (a layout file with ``ep``, or dispatch and combine all-to-alls with splits
over every rank) is written by ``expertscale.py``: the same rules, with the all-to-alls that return
rows sized for the new job's busiest expert rank.

Where the captured ranks have memory sidecars (``PREFIX.<k>.memory.json``, docs/memory.md), the
new job gets its own (``memory/whatif.py``: FSDP shards at the new degree, the rest kept).

Each captured rank is read once (``read_et`` keeping the raw records) and written for each of
its replicas before the next is read; every output lands at the end, together, or none does
(``io.OutputSet``).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from .._types import Progress
from ..arguments import MAX_RANKS as MAX_RANKS
from ..compact.rewrite import compacted_copy
from ..errors import ConverterError, OptionError, OutputError, TraceContentError, TraceFormatError
from ..et import wire
from ..et.decode import EtTrace, attribute_spans, read_et
from ..et.encode import PROCESS_GROUPS, RANK, WORLD_SIZE, global_metadata
from ..io.output import OutputTarget, check_output, output_directory
from ..io.outputset import OutputSet
from ..io.read import same_file
from ..memory import whatif as memory_whatif
from ..memory.profile import sidecar_path as memory_sidecar_path
from ..schema.astra import ALL_RANKS_GROUPS, MAX_GROUP_ID, group_id
from ..schema.chakra import CollectiveCommType, NodeType
from . import commgroups, discover, expertscale, layoutscale, recognise
from .jobsize import et_world_size


def one_rank_note(path: str, world: int) -> str:
    """The one line that says a job captured on one rank runs as its recorded size."""
    return (
        f"{os.path.basename(path)} is one captured rank of a {world}-rank job (world_size in its "
        f"metadata): running the {world}-rank job, each rank a copy of it"
    )


_PG_NAME = wire.attr_name("pg_name")
_P2P = frozenset({NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE})


@dataclass(frozen=True)
class ScaleResult:
    in_prefix: str
    out_prefix: str
    captured_ranks: int  # K
    ranks: int  # N
    outputs: tuple[str, ...]  # OUT.<r>.et, r = 0..N-1
    comm_group_path: str
    comm_groups: dict[str, list[int]]
    nodes: tuple[int, ...]  # per captured rank
    collectives: tuple[tuple[str, str, int], ...]  # (kind, group, bytes) of captured rank 0, in order
    rewritten_nodes: int  # nodes whose pg_name was re-encoded, over all outputs
    bytes_written: int
    seconds: float = 0.0
    layout: str | None = None  # the new mesh, when scaled by a layout file (layoutscale.py)
    note: str | None = None  # how the rank count was chosen, where the traces chose it


@dataclass
class _Groups:
    """The captured groups, split by the rule that maps them."""

    all_ranks: list[str] = field(default_factory=list)  # ids that list every captured rank
    sub: dict[str, list[int]] = field(default_factory=dict)  # id -> ranks, the others
    stride: int = 0  # M: the largest id

    def members(self, name: str, captured: int) -> list[int]:
        return self.sub.get(name) or list(range(captured))


def find_ranks(in_prefix: str) -> list[str]:
    """``IN.<k>.et`` for k = 0..K-1; an error names a missing rank or an empty prefix."""
    return discover.job_rank_files(in_prefix)


def scale(
    in_prefix: str,
    out_prefix: str,
    ranks: int | None,
    *,
    progress: Progress | None = None,
    compact: bool = False,
    comm_groups: str | None = None,
    bytes_ranks: int | None = None,
    resized: Mapping[tuple[str, int, int], int] | None = None,
    layout: str | None = None,
    expert_load: str | None = None,
) -> ScaleResult:
    """Write the captured job ``IN.<k>.et`` as a data-parallel job of ``ranks`` ranks (None: the
    job's own size, as its rank 0 records it, ``jobsize.py``); see the module docstring for the
    rules. Raises a ``ConverterError`` (and writes nothing) on anything it cannot scale. With
    ``compact``, each captured rank is compacted first (``compact/``), so every rank written is.
    ``comm_groups``: the captured job's group file (default: ``commgroups.find``). ``bytes_ranks``
    and ``resized`` (a layout job): FSDP bytes as at that width, then resized by (mesh dimension,
    comm_type, bytes): a reduced job standing for it (``simulate/meshreduced.py``). ``layout``: the
    job's parallel layout where the trace cannot tell (``recognise.parse_spec``: ``fsdp,tp=2``);
    without it, a layout file beside the ranks, else what the collectives show (``recognise.py``).
    ``expert_load``: how an expert-parallel job's routing loads its experts at the new size
    (``expertscale.expert_load``: captured, balanced, or the busiest rank over the mean); refused
    for a job without expert parallelism."""
    started = time.perf_counter()
    inputs = find_ranks(in_prefix)
    note = None
    if ranks is None:
        ranks = et_world_size(inputs[0])
        if ranks is not None and len(inputs) == 1 and ranks > 1:
            note = one_rank_note(inputs[0], ranks)
        if ranks is None:
            raise OptionError(
                f"{inputs[0]} records no job size (world_size: a conversion with `astra_sim` of "
                "a trace that holds it writes it)",
                hint="give `ranks`",
            )
    captured = len(inputs)
    grouping = _grouping(
        in_prefix,
        inputs,
        ranks,
        comm_groups,
        layout_spec=layout,
        bytes_ranks=bytes_ranks,
        resized=resized,
        expert_load=expert_load,
    )
    group_file, layout_file, scaler, groups, new_groups = (
        grouping.group_file,
        grouping.layout_file,
        grouping.scaler,
        grouping.groups,
        grouping.new_groups,
    )
    if grouping.said is not None:
        note = grouping.said if note is None else f"{note}; {grouping.said}"
    out_dir = os.path.dirname(out_prefix) or "."
    created = output_directory(out_dir)
    staged = OutputSet(shown=f"{out_prefix}.*")
    try:
        sides = [*([group_file] if group_file else []), *([layout_file] if scaler and layout_file else [])]
        targets = _targets(out_prefix, ranks, [*inputs, *sides])
        layout_target = check_output(layoutscale.path_for(out_prefix), *inputs, *sides) if scaler else None
        job = _Job(groups, captured, group_file)
        written = rewritten = done = 0
        nodes: list[int] = []
        for k, path in enumerate(inputs):
            records: list[bytes] = []
            if compact:
                with compacted_copy(path, out_dir) as (compacted, _):
                    trace = read_et(compacted, records=records)
                trace.path = path
            else:
                trace = read_et(path, records=records)
            if scaler is not None:
                plan = scaler.plan(k, trace)
                types, metadata = trace.types, trace.metadata
                nodes.append(len(trace))
                del trace
                for r in (r for r in range(ranks) if scaler.source(r) == k):
                    changed = scaler.rewrite(records, types, plan, r)
                    parts = [
                        wire.delimited_message(changed[i - 1]) if i - 1 in changed else wire.delimited_message(m)
                        for i, m in enumerate(records)
                    ]
                    if _records_job(metadata):  # the new job's size and this rank
                        parts[0] = _new_metadata(metadata, ranks, r)
                    written += staged.write(targets[r], parts)
                    rewritten += len(changed)
                    done += 1
                    if progress is not None:
                        progress("ranks", done, ranks)
                del records, types
                continue
            rewrites = job.check_rank(k, trace)
            nodes.append(len(trace))
            metadata = trace.metadata
            del trace
            plain = [wire.delimited_message(m) for m in records]
            own = _records_job(metadata)  # the new job's size and each rank's own number
            same = b"".join(plain[1 if own else 0 :]) if not rewrites else b""  # every replica's bytes but those
            for r in range(k, ranks, captured):
                data = _with_groups(plain, records, rewrites, groups, r // captured) if rewrites else [same]
                if own:
                    data = [_new_metadata(metadata, ranks, r), *data[1 if rewrites else 0 :]]
                written += staged.write(targets[r], data)
                rewritten += len(rewrites)
                done += 1
                if progress is not None:
                    progress("ranks", done, ranks)
            del records, plain, same
        written += staged.write(targets[ranks], (json.dumps(new_groups, indent=2) + "\n").encode("utf-8"))
        if scaler is not None and layout_target is not None:
            written += staged.write(layout_target, (json.dumps(scaler.new_layout()) + "\n").encode("utf-8"))
        written += _memory_sidecars(staged, in_prefix, out_prefix, captured, ranks, scaler, inputs)
        staged.commit()
    finally:
        staged.discard()
        if created:
            with suppress(OSError):  # only succeeds if nothing was written there
                os.rmdir(out_dir)
    return ScaleResult(
        in_prefix,
        out_prefix,
        captured,
        ranks,
        tuple(t.path for t in targets[:ranks]),
        targets[ranks].path,
        new_groups,
        tuple(nodes),
        tuple(job.reference),
        rewritten,
        written,
        time.perf_counter() - started,
        scaler.describe() if scaler is not None else None,
        note,
    )


def _memory_sidecars(
    staged: OutputSet,
    in_prefix: str,
    out_prefix: str,
    captured: int,
    ranks: int,
    scaler: layoutscale.LayoutScaler | None,
    inputs: Sequence[str],
) -> int:
    """The new job's memory (``memory/whatif.py``) where the captured job has its sidecars."""
    if scaler is not None:
        fsdp = scaler.layout.dp_mode == "fsdp"
        shards = (scaler.layout.mesh.dp, scaler.new.dp) if fsdp else None
        planned = memory_whatif.scaled_sidecars(in_prefix, captured, ranks, scaler.source, shards)
    else:
        planned = memory_whatif.scaled_sidecars(in_prefix, captured, ranks, lambda r: r % captured, None)
    written = 0
    for r, data in planned or ():
        written += staged.write(check_output(memory_sidecar_path(out_prefix, r), *inputs), data)
    return written


def check_ranks(
    in_prefix: str,
    ranks: int,
    comm_groups: str | None = None,
    option: str = "`ranks`",
    layout: str | None = None,
    expert_load: str | None = None,
) -> None:
    """Raise the ``ConverterError`` that ``scale`` would for ``ranks`` before it writes a rank (the
    count, the group file, the layout), ``option`` naming the count in messages: a sweep checks
    every count before its first point."""
    _grouping(in_prefix, find_ranks(in_prefix), ranks, comm_groups, option, layout, expert_load=expert_load)


@dataclass(frozen=True)
class _Grouping:
    group_file: str | None
    layout_file: str | None  # the layout file read (None: none, or `layout` given instead)
    scaler: layoutscale.LayoutScaler | None
    groups: _Groups
    new_groups: dict[str, list[int]]
    said: str | None = None  # where the layout came from, where the trace or `layout` chose it


def _grouping(
    in_prefix: str,
    inputs: list[str],
    ranks: int,
    comm_groups: str | None,
    option: str = "`ranks`",
    layout_spec: str | None = None,
    *,
    bytes_ranks: int | None = None,
    resized: Mapping[tuple[str, int, int], int] | None = None,
    expert_load: str | None = None,
) -> _Grouping:
    """``_layout_grouping``, with ``expert_load`` refused for a job that is not expert parallel."""
    found = _layout_grouping(
        in_prefix,
        inputs,
        ranks,
        comm_groups,
        option,
        layout_spec,
        bytes_ranks=bytes_ranks,
        resized=resized,
        expert_load=expert_load,
    )
    if expert_load is not None and not isinstance(found.scaler, expertscale.ExpertScaler):
        raise OptionError(
            f"`expert_load` {expert_load}: {inputs[0]} is not an expert-parallel job (chakra-profile --ep's "
            "layout file, or dispatch and combine all-to-alls with splits over every rank)"
        )
    return found


def _layout_grouping(
    in_prefix: str,
    inputs: list[str],
    ranks: int,
    comm_groups: str | None,
    option: str = "`ranks`",
    layout_spec: str | None = None,
    *,
    bytes_ranks: int | None = None,
    resized: Mapping[tuple[str, int, int], int] | None = None,
    expert_load: str | None = None,
) -> _Grouping:
    """The group file, the layout (its file, ``layout_spec``, or what rank 0's collectives show:
    ``recognise.py``), its scaler, the captured groups and the new ones. ``bytes_ranks`` and
    ``resized``: ``layoutscale.LayoutScaler``'s."""
    if not 1 <= ranks <= MAX_RANKS:
        raise OptionError(f"{option} {ranks}: must be between 1 and {MAX_RANKS:,}")
    captured = len(inputs)
    group_file = comm_groups if comm_groups is not None else commgroups.find(in_prefix)
    listed = _listed_groups(group_file, captured)
    layout_file = layoutscale.find(in_prefix)
    layout = layoutscale.read_layout(layout_file) if layout_file is not None else None
    said = None
    if layout_spec is not None:  # the user's word: stated, with what the trace shows beside it
        layout = recognise.layout_from_spec(layout_spec, captured, listed, group_file)
        shown = recognise.recognise(read_et(inputs[0]), listed, captured)
        said = f"layout {layout_spec} (given; the trace shows {shown.kind}: {shown.evidence})"
        if recognise.unnamed_as_dp(layout):
            said += "; collectives that name no process group (gloo's c10d ones) taken as data-parallel"
        if layout.unnamed:
            said += (
                "; HSDP: the shard groups kept (the mesh's innermost dimension, written as tp), replicas added, "
                "every byte kept; collectives that name no process group (gloo's c10d ones): all-gathers and "
                "reduce-scatters on the shard group, all-reduces on the replicas'"
            )
        elif recognise.parse_spec(layout_spec)[0] == "hsdp":
            said += "; HSDP: the shard groups kept (the mesh's innermost dimension, written as tp), replicas added"
        layout_file = None
        if not layoutscale.needs_layout(layout):
            groups = _read_groups(group_file, captured, ranks, option) if group_file else _Groups()
            return _Grouping(group_file, None, None, groups, _new_groups(groups, captured, ranks), said)
        scaler = layoutscale.LayoutScaler(layout, f"`layout` {layout_spec}", captured, ranks, bytes_ranks, resized)
        return _Grouping(group_file, None, scaler, _Groups(), scaler.groups(), said)
    load = expertscale.expert_load(expert_load) if expert_load is not None else "captured"
    moe = expertscale.find_moe(layout_file) if layout_spec is None and layout_file is not None else None
    if layout_file is not None and layout is not None:
        if layout.mesh.size == captured:  # else the scaler names the mismatch
            recognise.check_layout_file(layout, layout_file, read_et(inputs[0]), listed)
        if moe is not None:  # experts over every rank: the all-to-alls that return rows follow them
            scaler = expertscale.ExpertScaler(layout, moe, layout_file, inputs, ranks, load)
            return _Grouping(group_file, layout_file, scaler, _Groups(), scaler.groups())
    elif captured == 1 and ranks == et_world_size(inputs[0]):
        pass  # one captured rank of a job, at its own size: every rank's bytes are of that size, whatever the layout
    elif captured > 1 or ranks > 1:  # no layout file: what the collectives show (the group file checked first)
        if group_file:
            _read_groups(group_file, captured, ranks, option)
        shown = recognise.recognise(read_et(inputs[0]), listed, captured)
        if not shown.scalable:
            raise recognise.refusal(shown, inputs[0])
        found = expertscale.from_trace(inputs, recognise.every_rank(listed, captured)) if shown.say else None
        if found is not None:  # dispatch and combine over every rank: expert parallelism
            scaler = expertscale.ExpertScaler(found[0], found[1], inputs[0], inputs, ranks, load)
            said = (
                f"layout from the trace: expert parallelism over every rank ({len(scaler.busiest)} dispatch/combine "
                "all-to-all pair(s) with splits, DDP for the rest; each rank's load from the splits: a "
                f"layout file with the experts' routing, {layoutscale.path_for(in_prefix)}, gives more)"
            )
            return _Grouping(group_file, None, scaler, _Groups(), scaler.groups(), said)
        if shown.say:
            said = f"layout from the trace: {shown.evidence}"
        if shown.layout is not None and captured == 1:  # one captured rank of an FSDP job, at another size
            world = et_world_size(inputs[0])
            raise OptionError(
                f"{inputs[0]}: one captured rank of an FSDP job ({shown.evidence}) of "
                f"{world or 'unrecorded'} ranks: its shards are of that size only; scale it to "
                f"{world or 'its size'} ranks first, then scale that job",
            )
        if shown.layout is not None:
            layout, layout_file = shown.layout, None
            said = f"layout recognised from the trace: {shown.evidence}"
            scaler = layoutscale.LayoutScaler(layout, "the recognised layout", captured, ranks, bytes_ranks, resized)
            return _Grouping(group_file, None, scaler, _Groups(), scaler.groups(), said)
    if layout_file is not None and layout is not None and layoutscale.needs_layout(layout):
        scaler = layoutscale.LayoutScaler(
            layout, layout_file, captured, ranks, bytes_ranks, resized
        )  # data x tensor x pipeline
        return _Grouping(group_file, layout_file, scaler, _Groups(), scaler.groups())
    groups = _read_groups(group_file, captured, ranks, option) if group_file else _Groups()
    return _Grouping(group_file, layout_file, None, groups, _new_groups(groups, captured, ranks), said)


def _listed_groups(group_file: str | None, captured: int) -> dict[str, list[int]]:
    """The group file's groups of integer ranks (what ``recognise`` reads; ``_read_groups`` checks it)."""
    if group_file is None:
        return {}
    raw = commgroups.read(group_file)
    return {
        str(name): sorted({m for m in members if type(m) is int})
        for name, members in raw.items()
        if isinstance(members, list)
    }


def _targets(out_prefix: str, ranks: int, inputs: Sequence[str]) -> list[OutputTarget]:
    """Every output checked before any work: OUT.<r>.et, then OUT.comm_group.json; a rank file
    of the prefix beyond N (another job's) is refused rather than left to mix with this one."""
    if not os.path.basename(out_prefix):
        raise OutputError(out_prefix, "name a prefix for the outputs (OUT for OUT.0.et, OUT.1.et, ...)")
    discover.foreign_rank_files(out_prefix, ranks, f"`ranks` {ranks}")
    group_target = check_output(commgroups.path_for(out_prefix), *inputs)  # the folder is writable
    real_folder = os.path.dirname(group_target.final)
    targets = []
    for r in range(ranks):
        path = f"{out_prefix}.{r}.et"
        if os.path.lexists(path):  # what is there decides (a folder, a read-only file, an input, a link)
            targets.append(check_output(path, *inputs))
        else:  # a new file in the folder checked above (one check, not one per rank)
            targets.append(OutputTarget(path, os.path.join(real_folder, os.path.basename(path)), False))
    return [*targets, group_target]


def _read_groups(path: str, captured: int, ranks: int, option: str = "`ranks`") -> _Groups:
    raw = commgroups.read(path)
    groups = _Groups()
    for name, members in raw.items():
        number = group_id(name) or 0  # commgroups.read refused every other id
        if not isinstance(members, list) or not members or any(type(m) is not int for m in members):
            raise TraceFormatError(path, f"communicator group {name}: its ranks must be a list of integers")
        outside = sorted({m for m in members if not 0 <= m < captured})
        if outside:
            raise TraceFormatError(
                path,
                f"communicator group {name} names rank(s) {outside} but the job has "
                f"{captured} rank(s): this group file does not match these ranks",
            )
        groups.stride = max(groups.stride, number)
        if sorted(set(members)) == list(range(captured)):
            groups.all_ranks.append(name)
        else:
            groups.sub[name] = sorted(set(members))
    if groups.sub and ranks % captured:
        name, members = next(iter(groups.sub.items()))
        raise OptionError(
            f"{path}: communicator group {name} {members} does not tile {ranks} ranks: with "
            f"sub-groups, {option} must be a multiple of the {captured} captured ranks"
        )
    copies = ranks // captured
    if groups.sub and groups.stride * copies > MAX_GROUP_ID:
        raise ConverterError(f"{path}: {copies:,} copies of group {groups.stride} need ids past {MAX_GROUP_ID:,}")
    return groups


def _new_groups(groups: _Groups, captured: int, ranks: int) -> dict[str, list[int]]:
    new: dict[str, list[int]] = {name: list(range(ranks)) for name in groups.all_ranks}
    for j in range(ranks // captured if groups.sub else 0):
        for name, members in groups.sub.items():
            new[str(int(name) + j * groups.stride)] = [m + j * captured for m in members]
    return dict(sorted(new.items(), key=lambda item: int(item[0])))


class _Job:
    """What every captured rank must agree on, checked one rank at a time."""

    def __init__(self, groups: _Groups, captured: int, group_file: str | None) -> None:
        self.groups, self.captured, self.group_file = groups, captured, group_file
        self.sequences: dict[str, tuple[int, list[tuple[str, str, int]]]] = {}  # group -> (first rank, its list)
        self.reference: list[tuple[str, str, int]] = []
        self.metadata: dict[str, Any] = {}

    def check_rank(self, k: int, trace: EtTrace) -> list[tuple[int, str]]:
        """Raise if rank ``k`` cannot be scaled with the others; returns (row, sub-group) of its
        nodes whose ``pg_name`` changes per replica."""
        path = trace.path
        rewrites: list[tuple[int, str]] = []
        per_group: dict[str, list[tuple[str, str, int]]] = {}
        for row in sorted(trace.comm):
            attrs, node_type = trace.comm[row], trace.types[row]
            where = f"node {trace.ids[row]} '{trace.names[row]}'"
            if node_type in _P2P:
                kind = "send to" if node_type == NodeType.COMM_SEND_NODE else "receive from"
                peer = attrs.get("comm_dst" if node_type == NodeType.COMM_SEND_NODE else "comm_src")
                raise TraceContentError(
                    path,
                    f"{where} is a {kind} rank {peer}: point-to-point (pipeline) peers "
                    "cannot be scaled as data parallelism; scale refuses them",
                )
            if node_type != NodeType.COMM_COLL_NODE:
                continue
            pg_name = attrs.get("pg_name", "")
            name = "0" if pg_name in ALL_RANKS_GROUPS else str(pg_name)
            if name != "0" and name not in self.groups.sub and name not in self.groups.all_ranks:
                source = self.group_file or f"no communicator group file ({commgroups.path_for('IN')})"
                raise TraceContentError(
                    path,
                    f"{where} is on group {pg_name!r}, which is not in {source}: the "
                    "group file does not match these ranks",
                )
            members = self.groups.members(name, self.captured) if name != "0" else list(range(self.captured))
            if k not in members:
                raise TraceContentError(
                    path,
                    f"{where} is on group {name} {members}, which does not hold rank {k}: "
                    f"the group file {self.group_file} does not match these ranks",
                )
            if name in self.groups.sub:
                rewrites.append((row, name))
            kind = _kind(attrs.get("comm_type"))
            entry = (kind, name, attrs.get("comm_size", 0))
            per_group.setdefault(name, []).append(entry)
            if k == 0:
                self.reference.append(entry)
        self._same_job(k, trace, per_group)
        return rewrites

    def _same_job(self, k: int, trace: EtTrace, per_group: dict[str, list[tuple[str, str, int]]]) -> None:
        """The collectives of each group must be the same, in the same order, on every rank of it
        (DDP: on every rank); and the ranks must have been captured together."""
        path = trace.path
        if k == 0:
            self.metadata = trace.metadata
        elif trace.metadata.get("schema") != self.metadata.get("schema"):
            raise TraceContentError(
                path,
                f"schema {trace.metadata.get('schema')!r} differs from rank 0's "
                f"{self.metadata.get('schema')!r}: ranks of different jobs?",
            )
        elif not _captured_together(self.metadata, trace.metadata):
            raise TraceContentError(
                path,
                f"captured at {trace.metadata.get('time')} (steps "
                f"{trace.metadata.get('start_ts')}..{trace.metadata.get('finish_ts')}), "
                f"rank 0 at {self.metadata.get('time')} ({self.metadata.get('start_ts')}.."
                f"{self.metadata.get('finish_ts')}): ranks of different jobs?",
            )
        everyone = list(range(self.captured))
        every_group = [("0", everyone), *((g, everyone) for g in self.groups.all_ranks), *self.groups.sub.items()]
        for name, members in every_group:
            if k not in members:
                continue
            mine = per_group.get(name, [])
            first = self.sequences.setdefault(name, (k, mine))
            if first[0] != k and first[1] != mine:
                raise TraceContentError(
                    path,
                    f"its collectives on group {name} differ from rank {first[0]}'s "
                    f"({_difference(mine, first[1], first[0])}): ranks of different jobs?",
                )


def _records_job(metadata: dict[str, Any]) -> bool:
    return any(metadata.get(name) is not None for name in (WORLD_SIZE, RANK, PROCESS_GROUPS))


def _new_metadata(metadata: dict[str, Any], ranks: int, rank: int) -> bytes:
    """Rank ``rank``'s GlobalMetadata record in the new job of ``ranks`` ranks: its size and own
    rank where the captured one records them; the captured groups are left out (the new job's are
    its group file)."""
    new = {**metadata, WORLD_SIZE: ranks, PROCESS_GROUPS: None}
    if metadata.get(RANK) is not None:
        new[RANK] = rank
    return global_metadata(new)


def _captured_together(first: dict[str, Any], other: dict[str, Any]) -> bool:
    """False when the two ranks' captured windows (``start_ts``..``finish_ts``) do not overlap AND
    their wall-clock ``time`` differs by more than a second: ranks of one job run their steps
    together (DDP synchronises every step); windows alone would refuse ranks of several hosts,
    whose clocks differ, and ``time`` alone would accept two runs a minute apart."""
    try:
        a = (int(first["start_ts"]), int(first["finish_ts"]))
        b = (int(other["start_ts"]), int(other["finish_ts"]))
        when = [datetime.strptime(str(m["time"]), "%Y-%m-%d %H:%M:%S") for m in (first, other)]
    except (KeyError, TypeError, ValueError):
        return True  # not recorded: nothing to compare
    overlap = max(a[0], b[0]) <= min(a[1], b[1])
    return overlap or abs((when[0] - when[1]).total_seconds()) <= 1


def _kind(comm_type: Any) -> str:
    try:
        return CollectiveCommType(comm_type).name
    except ValueError:
        return f"type {comm_type}"


def _difference(mine: list[tuple[str, str, int]], theirs: list[tuple[str, str, int]], other: int) -> str:
    for n, (a, b) in enumerate(zip(mine, theirs, strict=False), 1):
        if a != b:
            return f"collective {n}: {a[0]} of {a[2]:,} bytes here, {b[0]} of {b[2]:,} bytes on rank {other}"
    return f"{len(mine)} collectives here, {len(theirs)} on rank {other}"


def _with_groups(
    plain: list[bytes], records: list[bytes], rewrites: list[tuple[int, str]], groups: _Groups, replica: int
) -> list[bytes]:
    """The records of one output rank: the captured rank's (``plain``), with its sub-group
    collectives' ``pg_name`` naming the replica's copy of the group."""
    out = list(plain)
    for row, name in rewrites:
        message = records[row + 1]
        new_attr = wire.string_attr(_PG_NAME, str(int(name) + replica * groups.stride), "pg_name")
        for attr, start, end in attribute_spans(message):
            if attr == "pg_name":
                message = message[:start] + new_attr + message[end:]
                break
        out[row + 1] = wire.delimited_message(message)
    return out


def uses_file(path: str, in_prefix: str, out_prefix: str) -> bool:
    """Whether ``scale`` reads or writes ``path`` (a rank or group file of either prefix)."""
    for prefix in (in_prefix, out_prefix):
        folder, base = os.path.split(os.path.abspath(prefix))
        there, name = os.path.split(os.path.abspath(path))
        if (
            same_file(folder, there)
            and name.startswith(f"{base}.")
            and (name.endswith(".et") or name.endswith(commgroups.COMM_GROUP_SUFFIX))
        ):
            return True
    return False

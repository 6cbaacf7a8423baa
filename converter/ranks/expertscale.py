"""``scale`` of an expert-parallel job: E ranks holding a mixture of experts' experts, written as E'.

``chakra-profile --model mixtral --ep E`` shards each MoE layer's experts over every rank (``--ep``
equals ``--nproc``: one expert group, the default one) and synchronises the rest by DDP. A real job
of E' ranks differs from the captured one in what each rank *receives*, not in what it sends:

* the count exchange (an even all-to-all of ``experts`` int64) and the DDP all-reduce keep their
  bytes (the model is the same);
* each MoE layer's **dispatch** sends the rank's own tokens x top-k rows, as does the backward of its
  **combine** (the gradient of what came back): the bytes of the rank's batch, kept;
* the **combine** sends back what the rank's experts received, as does the backward of the
  dispatch: with E experts over E' ranks a rank holds E / E' of them and receives the rows the
  router sent those experts from every rank. The busiest rank bounds the exchange, and ASTRA-sim
  runs one size per collective (``alltoallv.py``: the group's largest), so these nodes carry the
  busiest new rank's rows: ``max over r of (the new job's rows x the share of rank r's experts)``.

Which all-to-alls return rows is read from the trace: each ``all_to_all_single`` with splits
records its output and input split sizes (inputs 3 and 4 of ``c10d::alltoall_base_``) and its
buffers' shapes; they come in pairs, the second with the first's splits swapped (dispatch then
combine forward; the combine's gradient then the dispatch's backward), and the second of each
pair returns what the first delivered. Pairs run per step as the MoE layers in order, then in
reverse (backward), which names each pair's layer.

The experts' shares (``expert_load``):

* ``captured`` (default): per MoE layer, each expert's share of the rows it received over the whole
  captured run (the layout file's ``moe.imbalance.per_forward``: every forward of every step, all
  ranks): the router's preference, which the new job keeps (its weights are the same);
* ``balanced``: every expert the same share (each rank receives what it sends: the ideal router);
* a number x >= 1: the busiest rank receives x times the mean.

At the captured size the traced step's own routing is kept (every byte as captured).

Without a layout file (a user's own capture: ``from_trace``), the experts' count and loads are not
in the trace; each captured rank's load is (the rows every rank's dispatch sent it), so
``captured`` shares a rank's load evenly among the new ranks its experts go to (a lower bound on
the busiest) or merges the loads of the captured ranks whose experts one new rank gathers.

Refused, with one line: a rank count the experts do not split over (a real job cannot run it), a
capture whose all-to-alls record no splits (a Kineto trace alone) or do not pair, routing the layout
file does not record (with ``captured``).
"""

from __future__ import annotations

import ast
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import ConverterError, OptionError, TraceContentError, TraceFormatError
from ..et.decode import EtTrace, field_spans, read_et
from ..io import read_side_input
from ..schema.chakra import IO_FIELDS, NODE_FIELDS, CollectiveCommType, NodeType
from . import layoutscale
from .layoutscale import Layout, LayoutScaler, Mesh, _Planned

EXPERT_LOADS = ("captured", "balanced")
_ALL_TO_ALL = int(CollectiveCommType.ALL_TO_ALL)
_COLL = NodeType.COMM_COLL_NODE
_INPUTS = NODE_FIELDS["inputs"][0]
_VALUES, _SHAPES = IO_FIELDS["values"][0], IO_FIELDS["shapes"][0]


def expert_load(spec: str) -> str | float:
    """``captured``, ``balanced``, or the busiest rank's rows over the mean (a number >= 1)."""
    text = spec.strip().lower()
    if text in EXPERT_LOADS:
        return text
    try:
        ratio = float(text)
    except ValueError:
        ratio = math.nan
    if not math.isfinite(ratio) or ratio < 1:
        raise OptionError(
            f"`expert_load` {spec!r}: write captured, balanced, or the busiest rank's rows over the mean "
            "(a number of at least 1, e.g. 1.25)"
        )
    return ratio


@dataclass(frozen=True)
class Moe:
    """What the layout file says of the experts: the expert-parallel degree, the experts per layer,
    top-k, and per MoE layer each expert's share of the rows over the captured run (empty where the
    file records no routing)."""

    ep: int
    experts: int
    top_k: int
    shares: tuple[tuple[float, ...], ...]
    raw: dict[str, Any]
    traced: bool = False  # from the trace alone: each rank's load, not its experts' (``from_trace``)


def read_moe(raw: dict[str, Any], path: str) -> Moe | None:
    """The ``ep`` and ``moe`` of a layout file's JSON (None where ``ep`` is absent or 1)."""
    try:
        ep = int(raw.get("ep") or 1)
        if ep <= 1:
            return None
        moe = raw.get("moe") or {}
        if moe.get("from_trace"):
            return Moe(ep, 0, 0, (), dict(moe), traced=True)
        experts, top_k = int(moe.get("experts") or 0), int(moe.get("top_k") or 0)
        per_layer: dict[int, list[int]] = {}
        for forward in (moe.get("imbalance") or {}).get("per_forward") or ():
            rows = [int(n) for n in forward["expert_rows"]]
            if len(rows) != experts or min(rows, default=0) < 0:
                raise ValueError(f"expert_rows {rows} for {experts} experts")
            total = per_layer.setdefault(int(forward["layer"]), [0] * experts)
            per_layer[int(forward["layer"])] = [a + b for a, b in zip(total, rows, strict=True)]
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise TraceFormatError(
            path, f"its ep and moe are not a layout file's (ep, moe.experts, moe.imbalance): {exc}"
        ) from None
    if sorted(per_layer) != list(range(len(per_layer))):
        raise TraceFormatError(path, f"moe.imbalance.per_forward names layers {sorted(per_layer)}, not 0..n-1")
    shares = tuple(tuple(n / (sum(rows) or 1) for n in rows) for _, rows in sorted(per_layer.items()))
    return Moe(ep, experts, top_k, shares, dict(moe))


@dataclass(frozen=True)
class _Split:
    """One all-to-all with splits on one rank: its position among the rank's all-to-alls, the
    rows it sends to and receives from each rank, and the bytes of one row."""

    position: int
    input_splits: tuple[int, ...]
    output_splits: tuple[int, ...]
    rows: int  # of its input buffer
    row_bytes: int


def _inputs(message: bytes) -> tuple[Any, Any]:
    """The (values, shapes) of a node's inputs, as Python values (None where absent)."""
    found: dict[int, Any] = {}
    for number, _, _, value in field_spans(message):
        if number == _INPUTS:
            for sub, _, _, text in field_spans(value):
                if sub in (_VALUES, _SHAPES):
                    found[sub] = ast.literal_eval(text.decode("utf-8"))
    return found.get(_VALUES), found.get(_SHAPES)


def _splits(path: str) -> tuple[int, list[_Split]]:
    """(ALL_TO_ALL collectives, those with splits) of one rank's ``.et``, in node order."""
    records: list[bytes] = []
    trace = read_et(path, records=records)
    out: list[_Split] = []
    position = 0
    for row in sorted(trace.comm, key=lambda r: trace.ids[r]):
        if trace.types[row] != _COLL or trace.comm[row].get("comm_type") != _ALL_TO_ALL:
            continue
        try:
            values, shapes = _inputs(records[row + 1])
            outputs, inputs = values[3], values[4]
            if outputs or inputs:
                rows = int(shapes[1][0])
                numel, element = int(values[1][3]), int(values[1][4])
                out.append(
                    _Split(position, tuple(map(int, inputs)), tuple(map(int, outputs)), rows, numel * element // rows)
                )
        except (ValueError, TypeError, IndexError, KeyError, SyntaxError, ZeroDivisionError, TraceFormatError):
            pass  # no splits recorded (a Kineto trace alone, another all-to-all): the pairs say what is missing
        position += 1
    return position, out


def _pairs(path: str, splits: list[_Split]) -> list[tuple[_Split, _Split]]:
    """The rank's all-to-alls with splits as (sends its own rows, returns what the first delivered)."""
    if len(splits) % 2:
        raise TraceContentError(path, f"{len(splits)} all-to-all(s) with splits: dispatch and combine come in pairs")
    pairs = []
    for first, second in zip(splits[::2], splits[1::2], strict=True):
        if (first.input_splits, first.output_splits) != (second.output_splits, second.input_splits):
            raise TraceContentError(
                path,
                f"all-to-alls #{first.position + 1} and #{second.position + 1}: the second's splits are not the "
                "first's swapped (a dispatch and its combine): not an expert-parallel exchange scale can extend",
            )
        pairs.append((first, second))
    return pairs


class ExpertScaler(LayoutScaler):
    """An ``--ep E`` job (experts over every rank, DDP for the rest) written as an E'-rank one:
    ``LayoutScaler``'s data-parallel rules (every collective on the default group, rank r a copy of
    captured rank r mod E), with the all-to-alls that return rows sized for E' experts' ranks."""

    def __init__(
        self, layout: Layout, moe: Moe, path: str, inputs: Sequence[str], ranks: int, load: str | float
    ) -> None:
        captured = len(inputs)
        if moe.ep != captured or layout.mesh.size != captured or (layout.mesh.tp, layout.mesh.pp) != (1, 1):
            raise ConverterError(
                f"{path}: expert parallelism over {moe.ep} of {captured} rank(s) with tp {layout.mesh.tp}, pp "
                f"{layout.mesh.pp}: scale extends experts sharded over every rank (ep equal to the job's ranks) only"
            )
        if ranks < 2 or (moe.experts and moe.experts % ranks):
            raise OptionError(
                f"`ranks` {ranks}: the model's {moe.experts} experts do not split over {ranks} expert-parallel "
                f"ranks (experts over every rank: give a divisor of {moe.experts} of at least 2)"
            )
        if load == "captured" and not moe.shares and not moe.traced:
            raise TraceFormatError(
                path,
                "records no routing (moe.imbalance.per_forward): give `expert_load` balanced or the busiest "
                "rank's rows over the mean (e.g. 1.2)",
            )
        super().__init__(layout, path, captured, ranks)
        self.moe, self.load = moe, load
        self.sizes, self.busiest = self._sizes(inputs)

    def _sizes(self, inputs: Sequence[str]) -> tuple[dict[int, int], list[float]]:
        """(position of an all-to-all that returns rows -> its bytes in the new job, the busiest new
        rank's rows over the mean per pair)."""
        per_rank = []
        counts = set()
        for path in inputs:
            count, splits = _splits(path)
            counts.add(count)
            per_rank.append(_pairs(path, splits))
        pair_counts = {len(p) for p in per_rank}
        if len(counts) != 1 or len(pair_counts) != 1:
            raise TraceContentError(
                inputs[0], "the ranks issue different numbers of all-to-alls: ranks of different jobs?"
            )
        n_pairs = pair_counts.pop()
        if not n_pairs:
            raise TraceContentError(
                inputs[0],
                "no all-to-all records its splits (output and input split sizes: a host trace's "
                "c10d::alltoall_base_): the dispatch and combine of the experts cannot be told apart",
            )
        layers = len(self.moe.shares)
        if self.load == "captured" and not self.moe.traced and n_pairs % (2 * layers):
            raise TraceContentError(
                inputs[0],
                f"{n_pairs} dispatch/combine pair(s) per rank for {layers} MoE layer(s) in the layout file: "
                "not whole steps (each a forward and a backward of every layer)",
            )
        ranks, captured = self.new.size, len(inputs)
        sizes: dict[int, int] = {}
        busiest: list[float] = []
        for p in range(n_pairs):
            total = sum(per_rank[r % captured][p][0].rows for r in range(ranks))  # the new job's rows
            mean = total / ranks
            if self.load == "captured" and self.moe.traced:
                heaviest = _heaviest_rank([rank[p][0].input_splits for rank in per_rank], ranks, inputs[0]) * total
            elif self.load == "captured":
                q = p % (2 * layers)
                shares = self.moe.shares[q if q < layers else 2 * layers - 1 - q]
                held = len(shares) // ranks
                heaviest = max(sum(shares[r * held : (r + 1) * held]) for r in range(ranks)) * total
            elif self.load == "balanced":
                heaviest = mean
            else:
                heaviest = float(self.load) * mean
            second = per_rank[0][p][1]
            if ranks == captured:  # the job's own size: the traced step's routing is the truth
                heaviest = max(per_rank[k][p][1].rows for k in range(captured))
            rows = round(heaviest)
            busiest.append(round(rows / mean, 4) if mean else 1.0)
            sizes[second.position] = rows * second.row_bytes
        return sizes, busiest

    def plan(self, k: int, trace: EtTrace) -> list[_Planned]:
        """``LayoutScaler``'s plan, with the all-to-alls that return rows at their new bytes."""
        rows = sorted(trace.comm, key=lambda r: trace.ids[r])
        kept = (r for r in rows if trace.types[r] == _COLL and trace.comm[r].get("comm_type") == _ALL_TO_ALL)
        positions = {row: n for n, row in enumerate(kept)}
        out = []
        for row, dim, size, peer, resized in super().plan(k, trace):
            new = self.sizes.get(positions.get(row, -1))
            if new is not None:
                resized = resized or new != int(trace.comm[row].get("comm_size", 0) or 0)
                size = new
            out.append((row, dim, size, peer, resized))
        return out

    def describe(self) -> str:
        load = self.load if isinstance(self.load, str) else f"busiest rank {self.load:g}x the mean"
        experts = (
            f"{self.moe.experts} experts, {self.moe.experts // self.new.size} per rank; "
            if self.moe.experts
            else "the experts' count and loads not in the trace: each captured rank's load from its splits, "
            "shared evenly by the ranks its experts go to (a lower bound on the busiest); "
        )
        shown = ", ".join(f"{b:.3f}" for b in self.busiest[: 2 * max(2, len(self.moe.shares))])
        return (
            f"expert parallel {self.layout.mesh.size} -> {self.new.size} ({experts}DDP for the rest; routing: "
            f"{load}; the busiest rank receives {shown} x the mean, per dispatch/combine pair)"
        )

    def new_layout(self) -> dict[str, Any]:
        out = super().new_layout()
        for rank in out["ranks"]:
            rank["ep"] = dict(rank["dp"])
        out["ep"] = self.new.size
        scaled = {"expert_load": self.load, "busiest_over_mean": self.busiest}
        out["moe"] = {**self.moe.raw, "ep": self.new.size, "scaled": scaled, "from_trace": self.moe.traced}
        return out


def find_moe(path: str) -> Moe | None:
    """The experts of the layout file ``path`` (None: not an expert-parallel job)."""
    try:
        raw = json.loads(read_side_input(path, "layout file"))
    except ValueError as exc:
        raise TraceFormatError(path, f"not a layout file: {exc}") from None
    return read_moe(raw, path) if isinstance(raw, dict) else None


def is_expert_job(prefix: str) -> bool:
    """Whether the job ``PREFIX.<rank>.et`` has a layout file with expert parallelism."""
    path = layoutscale.find(prefix)
    return path is not None and find_moe(path) is not None


def _heaviest_rank(sends: list[tuple[int, ...]], ranks: int, path: str) -> float:
    """The busiest new rank's share of the rows, from one dispatch's input splits on every captured
    rank (``sends[j][k]``: rows rank j sent rank k's experts): each captured rank's load; with more
    ranks, its experts (and their load) split evenly among ``ranks / E`` new ranks, with fewer, E / ranks
    captured ranks' experts on one."""
    width = len(sends[0])
    load = [sum(row[k] for row in sends) for k in range(width)]
    total = sum(load) or 1
    if ranks % width == 0:
        return max(load) / total / (ranks // width)
    if width % ranks == 0:
        held = width // ranks
        return max(sum(load[r * held : (r + 1) * held]) for r in range(ranks)) / total
    raise OptionError(
        f"`ranks` {ranks}: {path} exchanges among {width} expert-parallel ranks; from the trace alone "
        f"(each rank's load, not its experts') scale goes to a multiple or a divisor of {width}"
    )


def from_trace(inputs: Sequence[str], names: set[str]) -> tuple[Layout, Moe] | None:
    """An expert-parallel job over every rank recognised from rank 0's trace alone (no layout file):
    all-to-alls with splits that pair as dispatch and combine; None where there are none (or they
    do not pair: another exchange). ``names``: the group names of every rank."""
    captured = len(inputs)
    _, splits = _splits(inputs[0])
    if not splits or captured < 2:
        return None
    try:
        pairs = _pairs(inputs[0], splits)
    except TraceContentError:
        return None
    if any(len(first.input_splits) != captured for first, _ in pairs):
        return None
    dims = {name: "dp" for name in sorted(names)}
    layout = Layout(Mesh(captured, 1, 1), "ddp", tuple(dict(dims) for _ in range(captured)))
    return layout, Moe(captured, 0, 0, (), {"from_trace": True}, traced=True)

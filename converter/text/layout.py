"""Each parallelism type's training loop as Chakra nodes, one NPU's file at a time.

The seven types ``chakra_converter Text`` converts are laid out exactly as it does (node ids,
names, dependency order; its ids run on from one NPU's file to the next). The types it refuses
follow ASTRA-sim 1.0's ``Workload::iterate_*`` loops (``astra-sim/workload/Workload.cc`` and
``Layer.cc`` before the Chakra switch): a blocking collective is a dependency of the next
compute, a non-blocking one only of the node that waited for it in 1.0, and the dimensions a
collective spans become a communicator group (``groups.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from ..errors import TraceContentError
from ..et import encode
from ..et.encode import TAG_DATA as _TAG_DATA
from ..et.encode import TAG_ID as _TAG_ID
from ..et.wire import SMALL, varint
from ..schema.chakra import CollectiveCommType, NodeType
from .groups import Groups, Span
from .replay import RECORDED_PASSES, Recorded
from .workload import Workload

#: The reference's ``get_comm_type``: anything else (NONE) is 0, ALL_REDUCE.
_COMM_TYPE = {
    "ALLREDUCE": int(CollectiveCommType.ALL_REDUCE),
    "ALLTOALL": int(CollectiveCommType.ALL_TO_ALL),
    "ALLGATHER": int(CollectiveCommType.ALL_GATHER),
    "REDUCESCATTER": int(CollectiveCommType.REDUCE_SCATTER),
}


class Emitter:
    """Encodes one NPU's nodes as they are made; ids run on from ``first_id``."""

    def __init__(
        self,
        write: Callable[[bytes], object],
        first_id: int,
        rank: int,
        groups: Groups,
        record: list[Recorded] | None = None,
    ) -> None:
        self.next_id = first_id
        #: Each node's parts and dependencies (positions in the file) of the first ``RECORDED_PASSES``
        #: passes, and where each pass starts: what ``replay.py`` makes the later files from.
        self.record = record
        self.pass_starts: list[int] = []
        self.rank = rank
        self.groups = groups
        self._write = write
        self._first = first_id
        #: The varint of each node's id from ``_window`` on: the nodes of this pass and the one
        #: before, which is what dependencies name (an older one is encoded again); memory follows
        #: the size of a pass, not the number of passes (10^6 passes took 890 MB).
        self._ids: list[bytes] = []
        self._window = first_id
        self._pass_window = first_id  # where the pass before this one started
        self._batch: list[bytes] = []
        self._parts: dict[tuple[object, ...], tuple[bytes, bytes]] = {}  # node kind -> (name+type, rest)

    def comp(self, layer: str, phase: str, duration: int, deps: Sequence[int]) -> int:
        key = ("comp", layer, phase, duration)
        parts = self._parts.get(key)
        if parts is None:
            parts = self._parts[key] = (
                encode.name_and_type(f"COMP_NODE_{layer}_{phase}", NodeType.COMP_NODE),
                encode.duration(duration),
            )
        return self._node(parts, deps)

    def comm(self, layer: str, collective: str, size: int, deps: Sequence[int], pg_name: str = "") -> int:
        key = ("comm", layer, collective, size, pg_name)
        parts = self._parts.get(key)
        if parts is None:
            parts = self._parts[key] = (
                encode.name_and_type(f"COMM_COLL_NODE_{layer}_{collective}", NodeType.COMM_COLL_NODE),
                encode.comm_attrs(NodeType.COMM_COLL_NODE, _COMM_TYPE.get(collective, 0), size, pg_name),
            )
        return self._node(parts, deps)

    def passes(self, count: int) -> Iterator[int]:
        """The training passes, each noted where it starts (recording stops after the first three)."""
        for number in range(count):
            if number <= RECORDED_PASSES:  # what replay.py reads: the recorded passes' starts
                self.pass_starts.append(self.next_id - self._first)
            if number == RECORDED_PASSES:
                self.record = None
            self._slide(self._pass_window)
            self._pass_window = self.next_id
            yield number

    def _slide(self, start: int) -> None:
        """Forget the ids of the nodes before ``start``."""
        if start > self._window:
            del self._ids[: start - self._window]
            self._window = start

    def collective(self, layer: str, collective: str, size: int, deps: Sequence[int], span: Span) -> int | None:
        """ASTRA-sim 1.0's collective of a phase: none for NONE or where it spans one NPU only."""
        if collective == "NONE":
            return None
        pg_name = self.groups.pg_name(span, self.rank)
        return None if pg_name is None else self.comm(layer, collective, size, deps, pg_name)

    def _node(self, parts: tuple[bytes, bytes], deps: Sequence[int]) -> int:
        """``encode.delimited_node`` (tests compare the two), with each id's varint made once:
        dependencies name nodes of this file, whose varints are kept by position."""
        node_id = self.next_id
        self.next_id = node_id + 1
        ids, window = self._ids, self._window
        own = varint(node_id)
        ids.append(own)
        if not deps:
            body = _TAG_ID + own + parts[0] + parts[1] if node_id else parts[0] + parts[1]
        else:
            if deps[0] >= window and (len(deps) == 1 or min(deps) >= window):
                listed = ids[deps[0] - window] if len(deps) == 1 else b"".join([ids[d - window] for d in deps])
            else:  # a node older than the pass before: encoded again
                listed = b"".join([ids[d - window] if d >= window else varint(d) for d in deps])
            body = b"".join(
                (_TAG_ID, own, parts[0], _TAG_DATA, SMALL[len(listed)], listed, parts[1])
                if node_id
                else (parts[0], _TAG_DATA, SMALL[len(listed)], listed, parts[1])
            )
        size = len(body)
        self._batch.append((SMALL[size] if size < 16384 else varint(size)) + body)
        if self.record is not None:
            first = self._first
            self.record.append((parts, tuple(d - first for d in deps)))
        if len(self._batch) >= 4096:
            self.flush()
        return node_id

    def flush(self) -> None:
        if self._batch:
            self._write(b"".join(self._batch))
            self._batch.clear()


Layout = Callable[[Workload, Emitter, int], None]
NO_NODE = -1  # a layer's node not made (yet)


def _present(*ids: int) -> list[int]:
    return [i for i in ids if i != NO_NODE]


# -- the reference's seven types, as chakra_converter lays them out ----------------------------------
def micro(w: Workload, e: Emitter, passes: int) -> None:
    for _ in e.passes(passes):
        for layer in w.layers:
            e.comm(layer.name, layer.wg_comm, layer.wg_size, ())


def data(w: Workload, e: Emitter, passes: int) -> None:
    layers, n = w.layers, len(w.layers)
    wg_comm = [NO_NODE] * n
    fwd = [0] * n
    ig = [0] * n
    for _ in e.passes(passes):
        last = -1
        for i, layer in enumerate(layers):
            deps = _present(fwd[i - 1] if i else NO_NODE, wg_comm[i])
            last = fwd[i] = e.comp(layer.name, "FWD", layer.fwd_time, deps)
        for k in range(n - 1, -1, -1):
            layer = layers[k]
            wg = e.comp(layer.name, "BWD_WG", layer.wg_time, [last] if k == n - 1 else [ig[k + 1]])
            wg_comm[k] = e.comm(layer.name, layer.wg_comm, layer.wg_size, [wg])
            if k:
                ig[k] = e.comp(layer.name, "BWD_IG", layer.ig_time, [wg])


def model(w: Workload, e: Emitter, passes: int) -> None:
    layers, n = w.layers, len(w.layers)
    wg = [NO_NODE] * n
    fwd_comm = [0] * n
    ig_comm = [0] * n
    for _ in e.passes(passes):
        for i, layer in enumerate(layers):
            deps = _present(fwd_comm[i - 1] if i else NO_NODE, wg[i])
            comp = e.comp(layer.name, "FWD", layer.fwd_time, deps)
            fwd_comm[i] = e.comm(layer.name, layer.fwd_comm, layer.fwd_size, [comp])
        for k in range(n - 1, -1, -1):
            layer = layers[k]
            deps = [fwd_comm[n - 1]] if k == n - 1 else [wg[k + 1], ig_comm[k + 1]]
            ig = e.comp(layer.name, "BWD_IG", layer.ig_time, deps)
            if k:
                ig_comm[k] = e.comm(layer.name, layer.ig_comm, layer.ig_size, [ig])
            wg[k] = e.comp(layer.name, "BWD_WG", layer.wg_time, [ig])


def _hybrid(w: Workload, e: Emitter, passes: int, ig_label: str) -> None:
    layers, n = w.layers, len(w.layers)
    wg_comm = [NO_NODE] * n
    fwd_comm = [0] * n
    wg = [0] * n
    ig_comm = [0] * n
    for _ in e.passes(passes):
        for i, layer in enumerate(layers):
            deps = _present(wg_comm[i], fwd_comm[i - 1] if i else NO_NODE)
            comp = e.comp(layer.name, "FWD", layer.fwd_time, deps)
            fwd_comm[i] = e.comm(layer.name, layer.fwd_comm, layer.fwd_size, [comp])
        for k in range(n - 1, -1, -1):
            layer = layers[k]
            deps = [fwd_comm[n - 1]] if k == n - 1 else [wg[k + 1], ig_comm[k + 1]]
            ig = e.comp(layer.name, "BWD_IG", layer.ig_time, deps)
            if k:
                ig_comm[k] = e.comm(layer.name + ig_label, layer.ig_comm, layer.ig_size, [ig])
            wg[k] = e.comp(layer.name, "BWD_WG", layer.wg_time, [ig])
            wg_comm[k] = e.comm(layer.name, layer.wg_comm, layer.wg_size, [wg[k]])


def hybrid_data_model(w: Workload, e: Emitter, passes: int) -> None:
    _hybrid(w, e, passes, "_IG_COMM_")


def hybrid_model_data(w: Workload, e: Emitter, passes: int) -> None:
    _hybrid(w, e, passes, "")


def check_dlrm(w: Workload) -> None:
    """The last bottom layers on which ``chakra_converter`` dies (a dependency on a node it never made)."""
    n, last = len(w.layers), w.last_bottom_layer
    if last == 0 and n:
        raise TraceContentError(
            w.path,
            "line 1: the last bottom layer cannot be 0: its forward pass would wait "
            "for layer 0's all-to-all before issuing it (chakra_converter dies here)",
        )
    if 0 < last < n and w.layers[0].fwd_comm != "ALLTOALL":
        raise TraceContentError(
            w.path,
            f"line {w.layers[0].line}: layer 0's forward collective must be ALLTOALL: "
            f"the last bottom layer ({last}) waits for it (chakra_converter dies here)",
        )
    if last == -1 and n:
        raise TraceContentError(
            w.path,
            "line 1: the last bottom layer cannot be -1: layer 0 has no input-gradient "
            "compute to issue the all-to-all after (chakra_converter dies here)",
        )


def dlrm(w: Workload, e: Emitter, passes: int) -> None:
    if passes > 0:
        check_dlrm(w)
    layers, n, last_bottom = w.layers, len(w.layers), w.last_bottom_layer
    fwd = [0] * n
    fwd_comm, wg, wg_comm, ig, ig_comm = ([NO_NODE] * n for _ in range(5))
    for _ in e.passes(passes):
        last = -1
        for i, layer in enumerate(layers):
            deps = _present(wg_comm[i] if wg_comm[i] != NO_NODE else wg[i], fwd[i - 1] if i else NO_NODE)
            if i == last_bottom:
                deps.append(fwd_comm[0])  # check_dlrm: made earlier in this pass
            last = fwd[i] = e.comp(layer.name, "FWD", layer.fwd_time, deps)
            if layer.fwd_comm == "ALLTOALL":
                fwd_comm[i] = e.comm(layer.name, layer.fwd_comm, layer.fwd_size, [fwd[i]])
        for k in range(n - 1, -1, -1):
            layer = layers[k]
            deps = [last] if k == n - 1 else _present(ig[k + 1], ig_comm[k])
            wg[k] = e.comp(layer.name, "BWD_WG", layer.wg_time, deps)
            if layer.wg_comm != "NONE":
                wg_comm[k] = e.comm(layer.name, layer.wg_comm, layer.wg_size, [wg[k]])
            ig_k = NO_NODE
            if k:
                ig_k = ig[k] = e.comp(layer.name, "BWD_IG", layer.ig_time, [wg[k]])
            if k == last_bottom + 1:  # check_dlrm: k > 0, so ig_k was made
                first = layers[0]
                ig_comm[0] = e.comm(first.name, first.ig_comm, first.ig_size, [ig_k])


# -- the types ASTRA-sim 1.0 ran and the reference refuses ------------------------------------------
def transformer(w: Workload, e: Emitter, passes: int) -> None:
    """``iterate_hybrid_parallel_Transformer`` (and ``..._fwd_in_bckwd``): forward and input-gradient
    collectives blocking, over the model-parallel group; weight-gradient collectives non-blocking,
    over the data-parallel group, waited for by the same layer's next forward pass. With
    checkpoints, a layer that initiates re-computation first re-runs the forward pass (compute and
    collective) of the layers from the nearest checkpoint at or below it up to the layer before it."""
    layers, n = w.layers, len(w.layers)
    wg_comm: list[int | None] = [None] * n
    chain: list[int] = []  # the last node of the compute stream (or of a blocking collective)

    def forward(k: int, phase: str, label: str) -> None:
        layer = layers[k]
        waited = wg_comm[k]
        deps = chain[-1:] + ([waited] if waited is not None and phase == "FWD" else [])
        comp = e.comp(layer.name, phase, layer.fwd_time, deps)
        comm = e.collective(layer.name + label, layer.fwd_comm, layer.fwd_size, [comp], Span.MODEL)
        chain[:] = [comp if comm is None else comm]

    for _ in e.passes(passes):
        for i in range(n):
            forward(i, "FWD", "")
        for k in range(n - 1, -1, -1):
            layer = layers[k]
            if k in w.checkpoint_initiates:
                start = max(c for c in w.checkpoints if c <= k)
                for j in range(start, k):
                    forward(j, "FWD_RECOMPUTE", "_RECOMPUTE")
            ig = e.comp(layer.name, "BWD_IG", layer.ig_time, chain[-1:])
            comm = e.collective(layer.name, layer.ig_comm, layer.ig_size, [ig], Span.MODEL)
            wg = e.comp(layer.name, "BWD_WG", layer.wg_time, [ig if comm is None else comm])
            wg_comm[k] = e.collective(layer.name, layer.wg_comm, layer.wg_size, [wg], Span.DATA)
            chain[:] = [wg]


#: ``decode_involved_dimensions`` of a HYBRID_CUSTOMIZED layer's parallelism: the span of its
#: forward, input-gradient and weight-gradient collectives (None: no dimension, no collective).
_LAYER_SPANS: dict[str, tuple[Span | None, Span | None, Span | None]] = {
    "DATA": (None, None, Span.ALL),
    "HYBRID_DLRM": (None, None, Span.ALL),
    "HYBRID_DLRM_ENHANCED": (None, None, Span.ALL),
    "MICRO": (None, None, Span.ALL),
    "MODEL": (Span.ALL, Span.ALL, None),
    "DISTRIBUTED_INFERENCE": (Span.ALL, Span.ALL, None),
    "HYBRID_MODEL_DATA": (Span.REST, Span.REST, Span.FIRST),
    "HYBRID_DATA_MODEL": (Span.FIRST, Span.FIRST, Span.REST),
}


def customized(w: Workload, e: Emitter, passes: int) -> None:
    """``iterate_hybrid_parallel_customized``: the HYBRID_DATA_MODEL loop (forward collectives
    blocking; input-gradient ones, from the last layer down to layer 1, waited for before the next
    layer's input gradient; weight-gradient ones before the same layer's next forward pass), each
    layer's collectives over the dimensions of its own parallelism."""
    layers, n = w.layers, len(w.layers)
    wg_comm: list[int | None] = [None] * n
    chain: list[int] = []
    waits: list[int] = []  # the input-gradient collective the next input gradient waits for
    for _ in e.passes(passes):
        for i, layer in enumerate(layers):
            fwd_span, _, _ = _LAYER_SPANS[layer.policy]
            waited = wg_comm[i]
            deps = chain[-1:] + ([] if waited is None else [waited])
            comp = e.comp(layer.name, "FWD", layer.fwd_time, deps)
            comm = (
                None if fwd_span is None else e.collective(layer.name, layer.fwd_comm, layer.fwd_size, [comp], fwd_span)
            )
            chain[:] = [comp if comm is None else comm]
        for k in range(n - 1, -1, -1):
            layer = layers[k]
            _, ig_span, wg_span = _LAYER_SPANS[layer.policy]
            ig = e.comp(layer.name, "BWD_IG", layer.ig_time, chain[-1:] + waits)
            comm = None
            if k and ig_span is not None:
                comm = e.collective(layer.name, layer.ig_comm, layer.ig_size, [ig], ig_span)
            waits = [] if comm is None else [comm]
            wg = e.comp(layer.name, "BWD_WG", layer.wg_time, [ig])
            wg_comm[k] = (
                None if wg_span is None else e.collective(layer.name, layer.wg_comm, layer.wg_size, [wg], wg_span)
            )
            chain[:] = [wg]


def data_reorder(w: Workload, e: Emitter, passes: int) -> None:
    """``iterate_data_parallel_reorder`` of the ASTRA-sim 1.0 tutorials' exercise 4 (asplos2022,
    isca2022, mlsys2022: ``astra-sim/workload/Workload.cc`` as ``exercise_4.patch`` makes it):
    DATA's loop, its backward pass reordered. One compute stream: the forward pass, each layer
    waiting for its own weight-gradient collective of the pass before; then from the last layer
    down, the input-gradient compute, the weight-gradient compute and its collective
    (non-blocking, over every NPU; 1.0's DATA gives forward and input-gradient collectives no
    dimension, so they are not issued). After layer 1's weight gradient comes layer 0's: layer 0
    has no input-gradient compute, unless it is the only layer."""
    layers, n = w.layers, len(w.layers)
    wg_comm: list[int | None] = [None] * n
    chain: list[int] = []  # the compute stream's last node
    for _ in e.passes(passes):
        for i, layer in enumerate(layers):
            waited = wg_comm[i]
            chain[:] = [e.comp(layer.name, "FWD", layer.fwd_time, chain[-1:] + ([] if waited is None else [waited]))]
        for k in range(n - 1, -1, -1):
            layer = layers[k]
            if k or n == 1:
                chain[:] = [e.comp(layer.name, "BWD_IG", layer.ig_time, chain[-1:])]
            wg = e.comp(layer.name, "BWD_WG", layer.wg_time, chain[-1:])
            wg_comm[k] = e.collective(layer.name, layer.wg_comm, layer.wg_size, [wg], Span.ALL)
            chain[:] = [wg]


def inference(w: Workload, e: Emitter, passes: int) -> None:
    """``iterate_distributed_inference``: forward passes only, each collective blocking, over all NPUs."""
    chain: list[int] = []
    for _ in e.passes(passes):
        for layer in w.layers:
            comp = e.comp(layer.name, "FWD", layer.fwd_time, chain[-1:])
            comm = e.collective(layer.name, layer.fwd_comm, layer.fwd_size, [comp], Span.ALL)
            chain[:] = [comp if comm is None else comm]


LAYOUTS: dict[str, Layout] = {
    "MICRO": micro,
    "DATA": data,
    "MODEL": model,
    "HYBRID_DATA_MODEL": hybrid_data_model,
    "HYBRID_MODEL_DATA": hybrid_model_data,
    "HYBRID_DLRM": dlrm,
    "HYBRID_DLRM_ENHANCED": dlrm,
    "HYBRID_TRANSFORMER": transformer,
    "HYBRID_TRANSFORMER_FWD_IN_BCKWD": transformer,
    "HYBRID_CUSTOMIZED": customized,
    "DISTRIBUTED_INFERENCE": inference,
    "DATA_REORDER": data_reorder,
}

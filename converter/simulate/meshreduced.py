"""The reduced job of a layout job (tensor, pipeline, FSDP or data parallelism in sub-groups, from
``chakra-profile``'s layout file): one block of the mesh (every TP and PP group, a few data-parallel
replicas) on a network whose dimensions are the mesh's, timed so that ASTRA-sim times every
message as it would in the N-rank job (docs/reduced.md has the derivation and the proof by running
both).

What ASTRA-sim 518bd51 and its congestion-unaware analytical network (599a047) do, read in
``CommunicatorGroup.cc``, ``Sys.cc`` (``generate_collective``, ``determine_chunk_size``),
``Ring.cc``, ``PacketBundle.cc``, ``MemBus.cc`` and ``MultiDimTopology.cpp``:

* a collective over a group smaller than the job runs as a ring over the group's NPUs (sorted
  ids, a logical ring of one ``Local`` dimension: the memory bus costs 10 ns each way), with the
  collective's own algorithm where the network has one dimension and always a ring where it has
  several; a group of every NPU runs on the network's own dimensions;
* its chunks are ``S // splits`` bytes, raised to the job's NPU count (``total_nodes``) where
  smaller (all-gather aside): the N-rank job's count, so a reduced job is given those bytes;
* a ring over n NPUs sends n-1 messages of ``m`` bytes to the next NPU for an all-gather (m: the
  chunk) or a reduce-scatter (m: chunk // n, each reduced on arrival: ``3 int(m / M)`` ns), 2(n-1)
  for an all-reduce (the first n-1 reduced); each ``int(h L + m / B)`` ns plus the bus's 10 ns;
* a message goes over the **first network dimension where the two NPUs' addresses differ**, with
  that dimension's hops, latency and bandwidth (``MultiDimTopology::send``); a Ring's hops are the
  shorter way round, a Switch's 2, a FullyConnected's 1.

So in the N-rank job a mesh (``rank = (p D + d) TP + t``) sends each TP, DP and PP message between
ranks a fixed stride apart (1, TP, D x TP), each ring's way back over (size-1) strides; such a
message crosses the lowest non-zero digit of the stride in the network's mixed radix (``link``).
Where a ring's way back crosses alike (a Switch, FullyConnected; a Ring of N with TP <= 2 and no PP;
Ring 8 x Switch with TP 2, ...), the reduced network has one dimension per mesh dimension,
``[TP, k, PP]`` (addresses ``[t, d, p]``: rank ids unchanged in form), each a Ring, so every
message crosses exactly its own dimension:

* TP and PP: the same messages, at the full job's link (hop latency ``h L`` and bandwidth);
* DP (k replicas of the D): each step ``L' = (D-1)(h L + 10)/(k-1) - 10``, so that the k-1 steps'
  constant part is the D-1 steps'; and each DP collective's bytes are rewritten so that its k-1
  messages take the D-1 messages' time (the chunk found by a search over ASTRA-sim's own rounding:
  ``ring_ns``), the stream count kept.

k: one captured DP rank per replica class, p classes in a DP group: the smallest multiple of p at
least 64(p-1) (rank-to-rank waits below (p-1)/(2(k-1)) of a collective, as for the DP reduction).

Not modelled (the full job runs, with the reason): a ring whose way back crosses otherwise, FSDP
alone (collectives over every rank) on several dimensions, the congestion-aware backend, an
algorithm other than the ring on one dimension, all-to-all and other collectives in sub-groups
(broadcast is replayed), a collective over every rank beside sub-groups.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from math import prod
from typing import Any

from ..errors import ConverterError
from ..et.decode import read_et
from ..ranks import layoutscale
from ..ranks.layoutscale import Layout, LayoutScaler, Mesh
from ..schema.astra import ALL_RANKS_GROUPS
from ..schema.chakra import CollectiveCommType, NodeType
from .allreduce import BYTES_PER_GB, HOPS
from .configs import Network
from .job import Job

#: As reduced.STEPS_PER_EXTRA_CLASS: the DP dimension keeps at least this many replicas per extra class.
STEPS_PER_EXTRA_CLASS = 64
#: ASTRA-sim's memory bus for a sub-group (``MemBus::Transmition::Fast``): 10 ns each way.
LOCAL_BUS_NS = 10
_AR, _AG, _RS = CollectiveCommType.ALL_REDUCE, CollectiveCommType.ALL_GATHER, CollectiveCommType.REDUCE_SCATTER
_MODELLED = {_AR: "all-reduce", _AG: "all-gather", _RS: "reduce-scatter"}
_MESH_NAMES = {"tp": "tensor", "dp": "data", "pp": "pipeline"}
_REPLAYED = frozenset({CollectiveCommType.BROADCAST})
_IMPLEMENTATIONS = (
    "all-reduce-implementation",
    "all-gather-implementation",
    "reduce-scatter-implementation",
    "all-to-all-implementation",
)


@dataclass(frozen=True)
class MeshReduction:
    """How the reduced layout job is written: ``ranks`` (TP x k x PP) ranks scaled from the capture
    with FSDP bytes at the full job's degree (``bytes_ranks``: N), then each collective's bytes
    rewritten by ``sizes`` ((mesh dimension, comm_type, bytes) -> bytes: ``scale``'s ``resized``),
    run with ``system``."""

    ranks: int
    bytes_ranks: int
    sizes: tuple[tuple[tuple[str, int, int], int], ...]
    system: dict[str, Any]
    tp: int = 1
    pp: int = 1

    def full_rank(self, rank: int) -> int:
        """The N-rank job's rank at the place of the block's ``rank`` in the mesh, (p, d, t): the
        same ids where there is no PP (``(p D + d) TP + t``)."""
        block = self.tp * self.pp
        return Mesh(self.bytes_ranks // block, self.tp, self.pp).rank(
            *Mesh(self.ranks // block, self.tp, self.pp).coords(rank)
        )


def ring_ns(kind: int, n: int, hop_ns: float, bandwidth_gbps: float, chunk: int, bus: int, mem_gbps: float) -> int:
    """ASTRA-sim's time for one chunk of a ring collective over n NPUs (ns): its messages each
    ``int(hop_ns + m/B)`` plus the bus on arrival, the reduced ones ``3 int(m/M)`` more, and one
    bus delay to open the phase."""
    bpns = bandwidth_gbps * BYTES_PER_GB / 1e9
    if kind == _AG:
        message, messages, reduced = chunk, n - 1, 0
    else:
        message, messages, reduced = chunk // n, (2 if kind == _AR else 1) * (n - 1), n - 1
    net = int(hop_ns + message / bpns)
    return bus + messages * (net + bus) + reduced * 3 * int(message / (mem_gbps * 1e9) * 1e9)


def closest_chunk(target: int, time_of: Callable[[int], int], low: int) -> int:
    """The chunk (at least ``low``) whose time (``time_of``, nondecreasing) is closest to ``target``."""
    high = max(low, 1)
    while time_of(high) < target:
        high *= 2
    lo = low
    while lo < high:  # the smallest chunk at or past the target
        mid = (lo + high) // 2
        if time_of(mid) < target:
            lo = mid + 1
        else:
            high = mid
    if lo > low and target - time_of(lo - 1) < time_of(lo) - target:
        return lo - 1
    return lo


def _resized_chunk(
    target: int, kind: int, k: int, hop_ns: float, bandwidth: float, bus: int, mem: float, low: int
) -> int:
    """The chunk (at least ``low``) whose ring over k NPUs takes closest to ``target`` ns."""
    return closest_chunk(target, lambda c: ring_ns(kind, k, hop_ns, bandwidth, c, bus, mem), low)


def link(network: Network, stride: int) -> tuple[float, float, int]:
    """(latency ns, bandwidth GB/s, dimension) of a message between ranks ``stride`` ids apart on
    ``network``, whichever the pair: it crosses the lowest dimension where their addresses differ
    (``MultiDimTopology::send``), the lowest non-zero digit of ``stride`` in the network's
    mixed radix (no carry reaches it), over that dimension's hops between the two digits (a Ring:
    the shorter way round, which depends on the digit alone)."""
    rest = stride
    for dim, (topology, npus) in enumerate(zip(network.topology, network.npus, strict=True)):
        digit = rest % npus
        rest //= npus
        if digit:
            hops = min(digit, npus - digit) if topology == "Ring" else HOPS[topology]
            return hops * network.latency[dim], network.bandwidth[dim], dim
    raise ValueError(f"stride {stride} on {network.name}: the same NPU")


@dataclass(frozen=True)
class MeshPlan:
    """The reduced network and job, or why there is none (``network`` None)."""

    network: Network | None
    why: str
    reduction: MeshReduction | None = None
    worst_error: float = 0.0
    how: str = ""
    #: False where the full job is as cheap (no reduced job to miss: no warning)
    warn: bool = True


def plan(
    job: Job, layout: Layout, layout_path: str, network: Network, ranks: int, system: dict[str, Any], backend: str
) -> MeshPlan:
    """The reduced job of the layout job ``job`` as ``ranks`` ranks on ``network``, or why not."""
    if backend != "unaware":
        return MeshPlan(
            None, "the congestion-aware backend shares links between flows; no equivalence is proven for it"
        )
    unknown = sorted(set(network.topology) - set(HOPS))
    if unknown:
        return MeshPlan(None, f"topology {unknown[0]} is not modelled")
    for key in ("preferred-dataset-splits", "endpoint-delay", "local-mem-bw"):
        value = system.get(key)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
            return MeshPlan(None, f"the system configuration's {key} is {value!r}: not modelled")
    if int(system.get("model-shared-bus", 0)) or system.get("boost-mode", 0):
        return MeshPlan(None, "model-shared-bus or boost-mode is not modelled")
    if system.get("active-chunks-per-dimension", 1) != 1:
        return MeshPlan(
            None, f"active-chunks-per-dimension {system.get('active-chunks-per-dimension')}: only 1 is proven"
        )
    custom = sorted(k for k in system if k.endswith("-implementation-custom"))
    if custom:
        return MeshPlan(None, f"{custom[0]}: custom collectives are not modelled")
    mesh = layout.mesh
    tp, pp, dp = mesh.tp, mesh.pp, ranks // (mesh.tp * mesh.pp)
    wide = [d for d, n in (("tp", tp), ("dp", dp), ("pp", pp)) if n > 1]
    classes = mesh.dp
    k = 2 if classes == 1 else -(-STEPS_PER_EXTRA_CLASS * (classes - 1) // classes) * classes
    if k >= dp:
        return MeshPlan(None, f"its data-parallel degree ({dp:,}) is no wider than a reduced one ({k})", warn=False)
    whole = len(wide) == 1  # one mesh dimension: its groups are every rank (ASTRA-sim's own dimensions)
    if whole and len(network.npus) > 1:
        return MeshPlan(None, f"collectives over every rank of a network of {len(network.npus)} dimensions")
    for key in _IMPLEMENTATIONS:  # over several dimensions a sub-group runs a ring whatever the list says
        names = system.get(key)
        ring = isinstance(names, list) and names and str(names[0]) in ("ring", "oneRing")
        if len(network.npus) == 1 and not ring:
            return MeshPlan(None, f"{key} {names!r}: sub-group collectives are modelled for the ring")
    # each mesh dimension's ring: its steps (stride) and its way back must cross the network alike
    rings = (("tp", tp, 1), ("dp", dp, tp), ("pp", pp, dp * tp))
    links = {name: link(network, stride) if size > 1 else (0.0, 1.0, -1) for name, size, stride in rings}
    for name, size, stride in rings:
        back = link(network, (size - 1) * stride) if size > 2 else links[name]
        if back[:2] != links[name][:2]:
            return MeshPlan(
                None,
                f"its {_MESH_NAMES[name]}-parallel rings' way back ({size - 1} x {stride} ranks) "
                f"crosses {network.name} otherwise than their steps ({back[0]:g} ns, {back[1]:g} GB/s against "
                f"{links[name][0]:g} ns, {links[name][1]:g} GB/s)",
            )
    scaler = LayoutScaler(layout, layout_path, job.ranks, ranks)
    splits, endpoint, mem = (
        int(system["preferred-dataset-splits"]),
        int(system["endpoint-delay"]),
        float(system["local-mem-bw"]),
    )
    found: dict[tuple[str, int, int], None] = {}
    for rank in range(job.ranks):
        trace = read_et(job.rank_file(rank))
        for row, dim, size, _, _ in scaler.plan(rank, trace):
            node_type, attrs = trace.types[row], trace.comm[row]
            if node_type != NodeType.COMM_COLL_NODE:
                continue  # sends and receives: the same bytes over the same hops, on their own dimension
            where = f"rank {rank} node {trace.ids[row]} '{trace.names[row]}'"
            try:
                kind = CollectiveCommType(int(attrs.get("comm_type", -1)))
            except ValueError:
                return MeshPlan(None, f"{where} has comm_type {attrs.get('comm_type')!r}")
            if kind in _REPLAYED:
                continue
            if kind not in _MODELLED:
                name = kind.name.lower().replace("_", "-")
                article = "an" if name[0] in "aeiou" else "a"
                why = (
                    f"{where} is {article} {name}: the reduced layout job models all-reduce, all-gather, reduce-scatter"
                )
                return MeshPlan(None, why)
            if str(attrs.get("pg_name", "")) in ALL_RANKS_GROUPS and len(wide) > 1:
                return MeshPlan(None, f"{where} is over every rank beside sub-groups: not modelled")
            if size > 0:
                found[(dim, int(kind), size)] = None
    hop = {name: value[0] for name, value in links.items()}
    bandwidth = links["dp"][1]
    bus = endpoint if whole else LOCAL_BUS_NS
    dp_latency = (dp - 1) * (hop["dp"] + bus) / (k - 1) - bus
    reduced_ranks = tp * k * pp
    sizes: dict[tuple[str, int, int], int] = {}
    worst = 0.0
    for dim, comm_type, size in found:
        kind = CollectiveCommType(comm_type)
        chunk = size // splits
        whole_size = size
        if kind != _AG and chunk < ranks:  # raised to the N-rank job's NPU count
            chunk, whole_size = ranks, splits * ranks
        if dim != "dp":
            if whole_size != size:
                sizes[(dim, comm_type, size)] = whole_size
            continue
        if chunk < 1:
            return MeshPlan(None, f"a {_MODELLED[kind]} of {size} bytes: chunks of no bytes")
        streams = -(-whole_size // chunk)
        if streams > splits + 1:
            why = f"a {_MODELLED[kind]} of {size} bytes: {streams} streams of {chunk} bytes are not modelled"
            return MeshPlan(None, why)
        target = ring_ns(kind, dp, hop["dp"], bandwidth, chunk, bus, mem)
        low = 1 if kind == _AG else reduced_ranks
        new_chunk = _resized_chunk(
            target, kind, k, dp_latency, bandwidth, bus, mem, max(low, 2 if streams > splits else 1)
        )
        got = ring_ns(kind, k, dp_latency, bandwidth, new_chunk, bus, mem)
        worst = max(worst, abs(got - target) / target)
        sizes[(dim, comm_type, size)] = splits * new_chunk + (1 if streams > splits else 0)
    dims = [(tp, hop["tp"], links["tp"][1]), (k, dp_latency, bandwidth), (pp, hop["pp"], links["pp"][1])]
    kept = [(n, lat, bw) for n, lat, bw in dims if n > 1]
    reduced = Network(
        tuple("Ring" for _ in kept),
        tuple(n for n, _, _ in kept),
        tuple(bw for _, _, bw in kept),
        tuple(lat for _, lat, _ in kept),
    )
    new_system = dict(system)
    if not whole:  # several dimensions: a sub-group runs a ring whatever the list says; one a dimension
        for key in _IMPLEMENTATIONS:
            new_system[key] = ["ring"] * len(kept)
    how = (
        f"one block of the mesh: data-parallel {dp:,} -> {k} replicas (tensor-parallel {tp}, pipeline-parallel "
        f"{pp} kept), each network dimension a mesh dimension, the data-parallel collectives' bytes resized"
    )
    assert prod(reduced.npus) == reduced_ranks
    return MeshPlan(
        reduced, "", MeshReduction(reduced_ranks, ranks, tuple(sorted(sizes.items())), new_system, tp, pp), worst, how
    )


def layout_path(prefix: str) -> str:
    path = layoutscale.find(prefix)
    if path is None:
        raise ConverterError(f"{prefix}: no layout file")
    return path

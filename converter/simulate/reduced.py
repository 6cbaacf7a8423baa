"""The reduced network: a data-parallel job of N ranks simulated on a few replicas, with the
last dimension's latency and bandwidth set so that ASTRA-sim times every collective as it would
on N ranks (docs/reduced.md has the derivation and the proof by running both).

What ASTRA-sim 518bd51 does with an all-reduce on its congestion-unaware analytical network
(read in ``astra-sim/system/Sys.cc``, ``astraccl/.../Ring.cc``, ``PacketBundle.cc``,
``MemBus.cc``, and astra-network-analytical 599a047's ``BasicTopology.cpp``):

* the collective of S bytes is cut into chunks of ``c = S // splits`` (``preferred-dataset-
  splits``), one stream each, ``ceil(S / c)`` of them; unless ``c`` is below the job's NPU count
  (all-gather aside): then ``c`` is that count and S is ``splits * c``; a chunk's phases run
  one after another, a chunk after the previous one on each dimension;
* with ``localBWAware`` a chunk is reduce-scattered over every dimension but the last, all-reduced
  over the last one, and all-gathered back; a reduce-scatter over n NPUs leaves ``c // n`` bytes;
* a ring all-reduce over n NPUs of a chunk c sends 2(n-1) messages of ``m = c // n`` bytes to the
  next NPU; each costs ``int(hops * latency + m / bw)`` ns (bw in B/ns, 1 GB = 2**30 B; hops: 1
  on a Ring or FullyConnected, 2 through a Switch), then the endpoint delay (``endpoint-delay``
  ns) on arrival, and the first n-1 arrivals a reduction of ``3 * int(m / local-mem-bw)`` ns; one
  endpoint delay opens the phase.

So a chunk's all-reduce over the last dimension takes ``e + 2(n-1)(int(hL + m/B) + e) +
(n-1) 3 int(m/M)``. On k NPUs instead of n, a latency L' and a bandwidth B' give the same time
for every chunk when

    k-1 steps of (hL' + e) = n-1 steps of (hL + e)          (the constant part)
    (k-1)/k (2/B' + 3/M)   = (n-1)/n (2/B + 3/M)            (the part per byte)

(up to the simulator's rounding to whole ns, which the fit below takes in). Every other phase
runs on the same NPUs as in the full job, so it is the same. The replicas that remain keep the
round-robin pattern of the captured ranks (rank r is captured rank r mod K), so the slowest rank's
step is the full job's. One difference remains where a ring holds replicas of different captured
ranks (p > 1 classes on it): ranks that start a collective at different times wait for each other
step by step, and a reduced ring has longer steps; a rank is then off by at most (p-1) steps of
the reduced ring a chunk (and its next chunk starts that much off). The reduced ring is therefore
at least 64(p-1) NPUs wide there (k, a multiple of p: a bound of (p-1)/(2(k-1)) < 0.8% of a
collective, measured well below it: docs/reduced.md), and 2 NPUs where p = 1 (exact).

The algorithms (``all-reduce-implementation``, one a dimension): any native one on the dimensions
before the last (they run on the same NPUs with the same bytes in both jobs; doubleBinaryTree
all-reduces there, so the last dimension gets the whole chunk); on the last one the ring (above;
``oneRing`` where the network has one dimension), the halving-doubling where n is a power of two
and one captured rank fills a group (``halving_doubling_all_reduce_ns``: its 2 log2(n) messages
timed as ASTRA-sim sends them, fitted by a group of 2, which sends one message each way as a ring
of 2 does), and the direct all-reduce over one dimension with one captured rank (``_direct``).

Everything else runs the full job, with a warning (``Plan.warning``: why, and what to do): the
congestion-aware backend (links are shared there), doubleBinaryTree on the last dimension, the
direct and halving-doubling ones where the above does not hold, the "one" variants over several
dimensions (one logical ring over every NPU), custom collectives, collectives other than
all-reduce and all-to-all (broadcast aside: ASTRA-sim replays it for its traced duration; the
ring all-to-all over every rank on one dimension is resized, ``_all_to_all_sizes``), collectives
over sub-groups, sends and receives (a layout job's: ``meshreduced.py``), system configurations
this model does not read (``model-shared-bus``, ``collective-optimization`` other than
``localBWAware`` over several dimensions); and, without a warning, jobs already about as small as
their reduced job.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from math import gcd, prod
from typing import Any

from ..et.decode import read_et
from ..ranks import layoutscale
from ..ranks.layoutscale import Layout
from ..schema.astra import ALL_RANKS_GROUPS
from ..schema.chakra import CollectiveCommType, NodeType
from .allreduce import BYTES_PER_GB, HOPS, fit_group, halving_doubling_all_reduce_ns, last_chunk
from .configs import Network
from .job import Job
from .meshreduced import MeshReduction, closest_chunk

#: Where p > 1 captured ranks share a ring, the reduced ring is the smallest multiple of p at least
#: STEPS_PER_EXTRA_CLASS * (p - 1) wide: its rank-to-rank waits then stay below (p-1)/(2(k-1)) < 0.8%
#: of a collective.
STEPS_PER_EXTRA_CLASS = 64
_REPLAYED = frozenset({CollectiveCommType.BROADCAST})


@dataclass(frozen=True)
class Plan:
    """How an N-rank job is simulated: ``network`` (None: the full job, for ``reason``)."""

    ranks: int  # N, the job asked for
    captured: int  # K, the captured ranks
    full: Network
    network: Network | None  # the reduced network, or None
    reason: str  # why the full job runs, or how the reduced one was made
    resize: tuple[tuple[int, int], ...] = ()  # (bytes, bytes in the reduced job): chunks bumped to N
    worst_error: float = 0.0  # the largest relative difference the model predicts for a collective
    #: where the full job runs because no reduced job is proven for it (not `exact`, nor a job already
    #: small): what to do about it; the result then carries ``warning``
    advice: str = ""
    #: a layout job's reduced job (``meshreduced.py``): how it is written and run
    mesh: MeshReduction | None = None
    #: where the full job runs for want of a reduced one: how long ASTRA-sim should take (``fullcost.py``)
    estimate: str = ""

    @property
    def reduced(self) -> bool:
        return self.network is not None

    @property
    def simulated_ranks(self) -> int:
        return prod(self.network.npus) if self.network is not None else self.ranks

    @property
    def warning(self) -> str | None:
        """One line for a full run that a reduced job could not replace: why, and what to do."""
        if self.network is not None or not self.advice:
            return None
        cost = f"; it runs compacted (the same simulated time), {self.estimate}" if self.estimate else ""
        return (
            f"the full job of {self.ranks:,} ranks ran (all of them written and simulated), not a reduced one: "
            f"{self.reason}{cost}; {self.advice}"
        )

    def describe(self) -> str:
        if self.network is None:
            return f"the full job of {self.ranks:,} ranks ({self.reason})"
        links = ", ".join(
            f"{b:.6g} GB/s {lat:.6g} ns" for b, lat in zip(self.network.bandwidth, self.network.latency, strict=True)
        )
        return (
            f"{self.simulated_ranks:,} ranks on {self.network.name} ({links}), equivalent to "
            f"{self.ranks:,} on {self.full.name} ({self.reason})"
        )

    def as_json(self) -> dict[str, Any]:
        net = self.network
        return {
            "ranks": self.ranks,
            "simulated_ranks": self.simulated_ranks,
            "reduced": self.reduced,
            "reason": self.reason,
            "resized_collectives": [list(p) for p in self.resize],
            # a layout job's block (meshreduced.py): each collective resized by its mesh dimension
            "layout_block": None
            if self.mesh is None
            else {
                "ranks": self.mesh.ranks,
                "fsdp_bytes_at_ranks": self.mesh.bytes_ranks,
                "resized_collectives": [[dim, kind, old, new] for (dim, kind, old), new in self.mesh.sizes],
            },
            "model_error": self.worst_error,
            "network": None
            if net is None
            else {
                "topology": list(net.topology),
                "npus_per_dim": list(net.npus),
                "bandwidth_gbps": list(net.bandwidth),
                "latency_ns": list(net.latency),
            },
        }


def full(ranks: int, captured: int, network: Network, reason: str, advice: str = "") -> Plan:
    return Plan(ranks, captured, network, None, reason, advice=advice)


#: What to do where the full job runs for want of a reduced one (Plan.advice), by cause.
#: Parameters in backticks, as every library message names them (the command line shows its flags).
EXACT = "`exact` runs it without this warning (docs/reduced.md)"
ADVICE = {
    "backend": f"`backend` unaware gets a reduced job; {EXACT}",
    "algorithm": (
        "a ring on the last dimension gets a reduced job (`collective` ring, or one algorithm a dimension "
        f"ending in ring: direct,ring); {EXACT}"
    ),
    "system": f"the system configuration's defaults get a reduced job; {EXACT}",
    "job": f"only a data-parallel job of all-reduces over every rank (DDP) has a reduced job; {EXACT}",
    "layout": (
        "a layout job has a reduced job on networks whose mesh rings cross alike all the way round (any Switch or "
        "FullyConnected; a Ring with tensor-parallel 2 at most and no pipeline), with ring collectives and "
        f"`backend` unaware; {EXACT}"
    ),
}


def plan(job: Job, network: Network, ranks: int, system: dict[str, Any], backend: str) -> Plan:
    """The reduced job for ``job`` (K captured ranks) as ``ranks`` ranks on ``network`` under the
    system configuration ``system``, or the full job and why."""
    captured = job.ranks
    last = max((d for d, n in enumerate(network.npus) if n > 1), default=-1)
    if last < 0:
        return full(ranks, captured, network, "a single NPU")
    cause, why = _unsupported(system, backend, network, last)
    if why:
        return full(ranks, captured, network, why, ADVICE[cause])
    sizes, exchanges, why = _collectives(job)
    if not why and exchanges:
        why = _all_to_all_unsupported(system, network, sizes, exchanges)
    if why:
        kind = parallelism(job.prefix)
        return full(ranks, captured, network, f"{kind} job (its layout file): {why}" if kind else why, ADVICE["job"])
    algorithms = [str(a) for a in system["all-reduce-implementation"]]
    before = prod(network.npus[:last])
    classes = captured // gcd(before, captured)  # captured ranks sharing a ring of the last dimension
    width = 2 if classes == 1 else -(-STEPS_PER_EXTRA_CLASS * (classes - 1) // classes) * classes
    n = network.npus[last]
    algorithm = algorithms[last].removeprefix("one")
    algorithm = algorithm[:1].lower() + algorithm[1:]  # oneHalvingDoubling: halvingDoubling
    if algorithm == "halvingDoubling" and (classes > 1 or n & (n - 1)):
        why = "NPUs not a power of two" if n & (n - 1) else f"{classes} captured ranks a group"
        return full(
            ranks,
            captured,
            network,
            f"halving-doubling over the last dimension ({n:,} NPUs, {why}): modelled for a power of two with one "
            "captured rank a group",
            ADVICE["algorithm"],
        )
    exchange = str((system.get("all-to-all-implementation") or ["ring"])[0])
    if exchanges and _DIRECT.fullmatch(exchange):  # the direct all-to-all: as the direct all-reduce
        if sizes and not algorithm.startswith("direct"):
            why = f"a direct all-to-all beside {algorithm} all-reduces: one reduced link does not serve both"
            return full(ranks, captured, network, why, ADVICE["algorithm"])
        return _direct(job, network, ranks, last, classes, sorted({*sizes, *exchanges}), system, bool(sizes), True)
    if algorithm.startswith("direct") and exchanges:
        why = "a direct all-reduce beside ring all-to-alls: one reduced link does not serve both"
        return full(ranks, captured, network, why, ADVICE["algorithm"])
    if algorithm.startswith("direct"):
        return _direct(job, network, ranks, last, classes, sizes, system)
    if width >= n:
        return full(
            ranks, captured, network, f"its last dimension ({n:,} NPUs) is no wider than a reduced one ({width:,})"
        )
    splits = int(system["preferred-dataset-splits"])
    resize = tuple(sorted({(s, splits * ranks) for s in sizes if s // splits < ranks}))
    bumped = dict(resize)
    chunks = sorted({last_chunk(bumped.get(s, s) // splits, network.npus[:last], algorithms) for s in sizes})
    chunks = [c for c in chunks if c >= 1]
    if not chunks and not exchanges:
        return full(ranks, captured, network, "no all-reduce reaches the last dimension", ADVICE["job"])
    hops, endpoint, mem = HOPS[network.topology[last]], int(system["endpoint-delay"]), float(system["local-mem-bw"])
    latency, bandwidth = network.latency[last], network.bandwidth[last]
    if not chunks:  # all-to-alls alone: the ring's n(n-1)/2 steps' fixed part on width(width-1)/2 steps
        steps = n * (n - 1) / (width * (width - 1))
        fitted_a2a = ((steps * (hops * latency + endpoint) - endpoint) / hops, bandwidth, 0.0)
    full_ns = None
    if algorithm == "halvingDoubling":  # a ring of 2 is a halving-doubling of 2 (one message each way)

        def full_ns(c: int) -> int:
            return halving_doubling_all_reduce_ns(n, network.topology[last], latency, bandwidth, c, endpoint, mem)

    fitted = fit_group(n, width, hops, latency, bandwidth, chunks, endpoint, mem, full_ns) if chunks else fitted_a2a
    if fitted is None:
        return full(
            ranks, captured, network, "no positive latency and bandwidth reproduce its collectives", ADVICE["system"]
        )
    new_latency, new_bandwidth, error = fitted
    if exchanges:
        resized, a2a_error, why = _all_to_all_sizes(
            exchanges, n, width, ranks, hops, (latency, bandwidth), (new_latency, new_bandwidth), splits, endpoint
        )
        if why:
            return full(ranks, captured, network, why, ADVICE["job"])
        resize, error = tuple(sorted({*resize, *resized})), max(error, a2a_error)
    npus = (*network.npus[:last], width, *network.npus[last + 1 :])
    reduced = Network(
        network.topology,
        npus,
        (*network.bandwidth[:last], new_bandwidth, *network.bandwidth[last + 1 :]),
        (*network.latency[:last], new_latency, *network.latency[last + 1 :]),
    )
    others = sorted({algorithms[d] for d in range(last) if network.npus[d] > 1} - {"ring"})
    unchanged = f" ({', '.join(others)} on the others, unchanged)" if others else ""
    how = (
        f"{algorithm} all-reduce over the last dimension: {n:,} -> {width} NPUs{unchanged}, "
        f"{'one captured rank a ring: exact' if classes == 1 else f'{classes} captured ranks a ring'}"
    )
    return Plan(ranks, captured, network, reduced, how, resize, error)


def _direct(
    job: Job,
    network: Network,
    ranks: int,
    last: int,
    classes: int,
    sizes: list[int],
    system: dict[str, Any],
    reduces: bool = True,
    exchanges: bool = False,
) -> Plan:
    """The direct all-reduce over a network of one dimension (n NPUs): every chunk c sends its n-1
    messages of m = c // n bytes at once (``AllToAll.cc``, window n-1), the reduce-scatter half and
    then the all-gather half, so a chunk takes ``e + 2(int(h L + m/B) + e) + 3 int(m/M)`` with h the
    farthest peer's hops (a Ring: n // 2; a Switch: 2; FullyConnected: 1): only m and h depend on n.
    A group of 2 NPUs whose collectives are resized to chunks of 2m bytes sends the same messages;
    the farthest peer's latency is kept: exact where one captured rank fills the group (every NPU
    does the same). With several captured ranks a group, ranks wait for the late ones, whose
    farthest peer is nearer (a Ring of 64: 1.9% of the communication off): not modelled. Several
    dimensions: the earlier ones would see the resized bytes (not modelled). The direct all-to-all
    (``exchanges``) sends the same n-1 messages of c // n bytes once (measured on 4-16 NPUs:
    ``2e + int(h L + m/B)`` a chunk), so the same group of 2 with the same resizing stands for it.
    ``reduces``: the job has all-reduces (their algorithm is direct too)."""
    captured, n = job.ranks, network.npus[last]
    names = [str(system["all-reduce-implementation"][last])] * reduces
    names += [str(system["all-to-all-implementation"][0])] * exchanges
    name = next((a for a in names if _window(a) and int(_window(a)) < n - 1), names[0])
    window = _window(name)
    if prod(network.npus[:last]) > 1:
        return full(
            ranks,
            captured,
            network,
            "direct all-reduce over the last of several dimensions: modelled over one dimension only",
            ADVICE["algorithm"],
        )
    if window and int(window) < n - 1:
        return full(
            ranks,
            captured,
            network,
            f"{name}: a window below the group ({n:,} NPUs) is not modelled",
            ADVICE["algorithm"],
        )
    if classes > 1:  # measured: the late class's farthest peer is nearer than n // 2 on a Ring (1.9% at 64)
        what = "all-reduce" if reduces else "all-to-all"
        why = f"direct {what} with {classes} captured ranks a group: modelled with one"
        return full(ranks, captured, network, why, ADVICE["algorithm"])
    k = 2
    if k >= n:
        return full(ranks, captured, network, f"its network ({n:,} NPUs) is no wider than a reduced one ({k})")
    topology = network.topology[last]
    splits = int(system["preferred-dataset-splits"])
    resize = []
    for size in sizes:
        whole = splits * ranks if size // splits < ranks else size  # ASTRA-sim raises a chunk to the NPU count
        chunk = whole // splits
        streams = -(-whole // chunk)
        new = splits * k * (chunk // n) + (1 if streams > splits else 0)  # the same chunks, of k m bytes
        if new != size:
            resize.append((size, new))

    def farthest(npus: int) -> int:
        return npus // 2 if topology == "Ring" else HOPS[topology]

    latency = network.latency[last] * farthest(n) / farthest(k)
    reduced = Network(network.topology, (k,), network.bandwidth, (latency,))
    how = (
        f"direct {'all-to-all' if exchanges and not reduces else 'collectives' if exchanges else 'all-reduce'}: "
        f"{n:,} -> {k} NPUs, each collective's chunks resized to keep its messages, the farthest "
        "peer's latency kept, one captured rank: exact"
    )
    return Plan(ranks, captured, network, reduced, how, tuple(sorted(resize)), 0.0)


def _window(name: str) -> str:
    """A direct algorithm's window ("direct8": "8"; "direct": "")."""
    return name.removeprefix("one").lower().removeprefix("direct")


def _unsupported(system: dict[str, Any], backend: str, network: Network, last: int) -> tuple[str, str]:
    """(cause, why) where the model does not cover this run (ADVICE names what to do per cause)."""
    if backend != "unaware":
        return "backend", "the congestion-aware backend shares links between flows; no equivalence is proven for it"
    why = _algorithms(system, network, last)
    if why:
        return "algorithm", why
    for key in ("preferred-dataset-splits", "endpoint-delay", "local-mem-bw"):
        value = system.get(key)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
            return "system", f"the system configuration's {key} is {value!r}: not modelled"
    if int(system.get("model-shared-bus", 0)):
        return "system", "model-shared-bus is not modelled"
    if system.get("active-chunks-per-dimension", 1) != 1:
        return "system", f"active-chunks-per-dimension {system.get('active-chunks-per-dimension')}: only 1 is proven"
    if system.get("boost-mode", 0):
        return "system", "boost-mode is not modelled"
    if len(network.npus) > 1 and system.get("collective-optimization") != "localBWAware":
        return "system", f"collective-optimization {system.get('collective-optimization')} over several dimensions"
    for topology in network.topology:
        if topology not in HOPS:
            return "system", f"topology {topology} is not modelled"
    return "", ""


#: All-reduce algorithms (ASTRA-sim's names) that may run on a dimension before the last one: the
#: reduced job runs those dimensions on the same NPUs with the same bytes, whatever the algorithm.
#: ``direct`` takes a window (``direct8``). doubleBinaryTree all-reduces there (no reduce-scatter).
_EARLIER = re.compile(r"ring|direct\d*|halvingDoubling|doubleBinaryTree")
_DIRECT = re.compile(r"(oneD|d)irect\d*")


def _algorithms(system: dict[str, Any], network: Network, last: int) -> str:
    """Why the all-reduce algorithms are not modelled, or "": the last dimension's is the ring (the
    model of this module; ``oneRing`` is that ring where the network has one dimension), the earlier
    ones' any native one. The "one" variants over several dimensions run one logical ring over every
    NPU (GeneralComplexTopology), and the direct, halving-doubling and double-binary-tree all-reduces
    time the last dimension otherwise: not modelled."""
    custom = sorted(k for k in system if k.endswith("-implementation-custom"))
    if custom:
        return f"{custom[0]}: custom collectives are not modelled"
    algorithms = system.get("all-reduce-implementation")
    if not isinstance(algorithms, list) or len(algorithms) < len(network.npus):
        return f"all-reduce-implementation {algorithms!r}: one algorithm a network dimension is modelled"
    names = [str(a) for a in algorithms]
    one = [a for d, a in enumerate(names[: len(network.npus)]) if a.startswith("one") and network.npus[d] > 1]
    if one and len(network.npus) > 1:
        return (
            f"all-reduce-implementation {','.join(names)}: {one[0]} runs one logical ring over every NPU of "
            f"the {len(network.npus)} dimensions; the reduced job models a ring of the last dimension"
        )
    if names[last] not in ("ring", "oneRing", "halvingDoubling", "oneHalvingDoubling") and not _DIRECT.fullmatch(
        names[last]
    ):
        return (
            f"all-reduce-implementation {','.join(names)}: the last dimension's all-reduce is {names[last]}; "
            "the reduced job models ring, halvingDoubling and direct there"
            + (" (a tree: each rank finishes by its place in it)" if names[last] == "doubleBinaryTree" else "")
        )
    for d in range(last):
        if network.npus[d] > 1 and not _EARLIER.fullmatch(names[d]):
            return f"all-reduce-implementation {','.join(names)}: {names[d]} is not modelled"
    return ""


def layout_of(prefix: str) -> Layout | None:
    """The job's layout file (``chakra-profile``'s), where it says more than data parallelism."""
    path = layoutscale.find(prefix)
    if path is None:
        return None
    layout = layoutscale.read_layout(path)
    return layout if layoutscale.needs_layout(layout) else None


def parallelism(prefix: str) -> str:
    """The job's parallelism as its layout file names it ("FSDP 2 x tensor-parallel 2"), or ""."""
    layout = layout_of(prefix)
    if layout is None:
        return ""
    mesh = layout.mesh
    parts = [f"{'FSDP' if layout.dp_mode == 'fsdp' else 'data-parallel'} {mesh.dp}"]
    parts += [f"tensor-parallel {mesh.tp}"] * (mesh.tp > 1) + [f"pipeline-parallel {mesh.pp}"] * (mesh.pp > 1)
    return ("an " if layout.dp_mode == "fsdp" else "a ") + " x ".join(parts)


def _collectives(job: Job) -> tuple[list[int], list[int], str]:
    """The all-reduce and the all-to-all sizes of the captured job, or why it cannot be reduced."""
    everyone = sorted(range(job.ranks))
    all_ranks = {name for name, members in job.groups.items() if sorted(members) == everyone}
    sizes: set[int] = set()
    exchanges: set[int] = set()
    for rank in range(job.ranks):
        trace = read_et(job.rank_file(rank))
        for row, attrs in trace.comm.items():
            node_type = trace.types[row]
            where = f"rank {rank} node {trace.ids[row]} '{trace.names[row]}'"
            if node_type != NodeType.COMM_COLL_NODE:
                return [], [], f"{where} is a send or receive (pipeline peers)"
            pg_name = str(attrs.get("pg_name", ""))
            if pg_name not in ALL_RANKS_GROUPS and pg_name not in all_ranks:
                return [], [], f"{where} is on communicator group {pg_name}, not every rank"
            try:
                kind = CollectiveCommType(int(attrs.get("comm_type", -1)))
            except ValueError:
                return [], [], f"{where} has comm_type {attrs.get('comm_type')!r}"
            if kind in _REPLAYED:
                continue
            if kind == CollectiveCommType.ALL_TO_ALL:
                exchanges.add(int(attrs.get("comm_size", 0)))
                continue
            if kind != CollectiveCommType.ALL_REDUCE:
                name = kind.name.lower().replace("_", "-")
                article = "an" if name[0] in "aeiou" else "a"
                why = f"{where} is {article} {name}: only all-reduce and all-to-all are modelled"
                return [], [], why
            sizes.add(int(attrs.get("comm_size", 0)))
    return sorted(s for s in sizes if s > 0), sorted(s for s in exchanges if s > 0), ""


def _all_to_all_unsupported(system: dict[str, Any], network: Network, sizes: list[int], exchanges: list[int]) -> str:
    """Why the job's all-to-alls (over every rank) have no reduced job, or "": modelled on a network
    of one dimension with ASTRA-sim's ring all-to-all, whose sizes differ from the all-reduces'."""
    algorithm = system.get("all-to-all-implementation")
    name = str(algorithm[0]) if isinstance(algorithm, list) and algorithm else repr(algorithm)
    if len(network.npus) > 1:
        return f"all-to-all over every rank of a network of {len(network.npus)} dimensions: modelled on one"
    if name not in ("ring", "oneRing") and not _DIRECT.fullmatch(name):
        return (
            f"all-to-all-implementation {name}: modelled for the ring and the direct one (halvingDoubling: "
            "ASTRA-sim's HalvingDoubling.cc exits on an all-to-all: unknown communication type)"
        )
    shared = sorted(set(sizes) & set(exchanges))
    if shared and not _DIRECT.fullmatch(name):  # the direct resizing is one rule for both
        return f"an all-to-all and an all-reduce both of {shared[0]:,} bytes (resized apart: not modelled)"
    return ""


def ring_all_to_all_ns(n: int, hops: int, latency: float, bandwidth_gbps: float, chunk: int, endpoint: int) -> int:
    """ASTRA-sim's ring all-to-all of one chunk over n NPUs (``Ring.cc``: n(n-1)/2 messages of
    chunk // n bytes to the next NPU, one after another; no reduction), measured equal to the ns."""
    bpns = bandwidth_gbps * BYTES_PER_GB / 1e9
    return endpoint + n * (n - 1) // 2 * (int(hops * latency + (chunk // n) / bpns) + endpoint)


def _all_to_all_sizes(
    exchanges: list[int],
    n: int,
    width: int,
    ranks: int,
    hops: int,
    link: tuple[float, float],
    reduced: tuple[float, float],
    splits: int,
    endpoint: int,
) -> tuple[list[tuple[int, int]], float, str]:
    """Each all-to-all's bytes in the reduced job (the chunk whose width(width-1)/2 messages on the
    reduced link take the n(n-1)/2 messages' time, stream count kept), the worst relative
    difference, or why not."""
    out, worst = [], 0.0
    for size in exchanges:
        chunk, whole = size // splits, size
        if chunk < ranks:  # ASTRA-sim raises a chunk to the job's NPU count
            chunk, whole = ranks, splits * ranks
        streams = -(-whole // chunk)
        if streams > splits + 1:
            return [], 0.0, f"an all-to-all of {size:,} bytes: {streams} streams are not modelled"
        target = ring_all_to_all_ns(n, hops, link[0], link[1], chunk, endpoint)

        def time_of(c: int) -> int:
            return ring_all_to_all_ns(width, hops, reduced[0], reduced[1], c, endpoint)

        new = closest_chunk(target, time_of, max(width, 2))
        worst = max(worst, abs(time_of(new) - target) / target)
        out.append((size, splits * new + (1 if streams > splits else 0)))
    return out, worst, ""

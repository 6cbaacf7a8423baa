"""The user's own ASTRA-sim configuration: their system, network and remote-memory files, the
collective algorithm per network dimension, the chunks in flight per dimension; each checked
before a run, and what ``simulate`` still sets over them stated.

* ``--system-config FILE`` (JSON): used as given, except ``trace-enabled`` (always 1: the result
  is read from the per-node lines it makes ASTRA-sim write), the roofline's keys
  (``roofline-enabled``, ``peak-perf``, ``local-mem-bw``) when a roofline is asked for, the four
  ``*-implementation`` lists with ``--collective``, ``active-chunks-per-dimension`` with
  ``--active-chunks``. Its implementation lists must name algorithms ASTRA-sim knows, one a
  network dimension.
* ``--network-config FILE`` (ASTRA-sim's analytical YAML: ``topology``, ``npus_count``,
  ``bandwidth``, ``latency``): nothing set over it; checked for known topologies, one value a
  dimension, links in the command line's ranges and NPUs that multiply to the job's ranks, and
  given to ASTRA-sim as read here (``configfiles``: each file read once, strictly, and written
  back by us, so that ASTRA-sim and this package read one network). It replaces
  ``--topology``, ``--npus-per-dim``, ``--bandwidth`` and ``--latency``.
* ``--remote-memory-config FILE`` (JSON with ``memory-type``): checked, and given as read.

The algorithms (``astra-sim/system/astraccl/CollectiveImplLookup.cc`` at 518bd51): ring, oneRing,
direct, oneDirect, halvingDoubling, oneHalvingDoubling, doubleBinaryTree. doubleBinaryTree is an
all-reduce only (``Sys::generate_collective_phase`` builds a ``DoubleBinaryTreeAllReduce`` for
any collective it is given): on that dimension the other collectives keep ring.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from math import prod
from typing import Any

from ..errors import ConverterError, OptionError
from . import bounds, configfiles
from .configs import REMOTE_MEMORY, TOPOLOGIES, Accelerator, Network, system_config

#: ASTRA-sim's names of its native collective algorithms, by the lower-case name users type.
ALGORITHMS = {
    a.lower(): a
    for a in ("ring", "oneRing", "direct", "oneDirect", "halvingDoubling", "oneHalvingDoubling", "doubleBinaryTree")
}
IMPLEMENTATIONS = (
    "all-reduce-implementation",
    "all-gather-implementation",
    "reduce-scatter-implementation",
    "all-to-all-implementation",
)
ALL_REDUCE_ONLY = {"doubleBinaryTree"}
_ROOFLINE_KEYS = ("roofline-enabled", "peak-perf", "local-mem-bw")
_DIRECT_WINDOW = re.compile(r"(one)?direct(\d+)?", re.IGNORECASE)


@dataclass(frozen=True)
class Setup:
    """ASTRA-sim's configuration for one run, besides the job and its groups."""

    system: dict[str, Any]
    remote_memory: dict[str, Any]
    network_file: str | None = None  # the user's network file (ASTRA-sim is given it as read: configfiles)
    system_file: str | None = None
    remote_memory_file: str | None = None
    overridden: tuple[str, ...] = ()  # keys of the user's system file that simulate set
    notes: list[str] = field(default_factory=list)

    def describe(self) -> str:
        """One line for people: whose files, and what simulate set over them."""
        parts = []
        if self.system_file:
            over = f" (simulate set {', '.join(self.overridden)})" if self.overridden else ""
            parts.append(f"system {self.system_file}{over}")
        if self.network_file:
            parts.append(f"network {self.network_file}")
        if self.remote_memory_file:
            parts.append(f"remote memory {self.remote_memory_file}")
        algorithms = self.system.get("all-reduce-implementation")
        if isinstance(algorithms, list) and any(a != "ring" for a in algorithms):
            parts.append(f"all-reduce {','.join(map(str, algorithms))}")
        chunks = self.system.get("active-chunks-per-dimension")
        if chunks is not None and chunks != 1:
            parts.append(f"{chunks} active chunks per dimension")
        return "; ".join(parts)

    def as_json(self) -> dict[str, Any]:
        return {
            "system_config": self.system_file,
            "network_config": self.network_file,
            "remote_memory_config": self.remote_memory_file,
            "overridden": list(self.overridden),
            "system": self.system,
        }


def collectives(text: str, dimensions: int) -> list[str]:
    """``--collective`` (one algorithm, or one a dimension, comma-separated) in ASTRA-sim's names."""
    names = [p.strip() for p in text.split(",")]
    known = []
    for name in names:
        found = ALGORITHMS.get(name.lower())
        if found is None:
            raise OptionError(
                f"`collective` {text}: unknown algorithm {name!r} (one of "
                f"{', '.join(ALGORITHMS.values())}; one for every dimension, or one a dimension)"
            )
        known.append(found)
    if len(known) == 1:
        return known * dimensions
    if len(known) != dimensions:
        raise OptionError(f"`collective` {text}: {len(known)} algorithm(s) for {dimensions} network dimension(s)")
    return known


def make_setup(
    dimensions: int,
    roofline: Accelerator | None,
    *,
    system_file: str | None = None,
    network_file: str | None = None,
    remote_memory_file: str | None = None,
    collective: str | None = None,
    active_chunks: int | None = None,
) -> Setup:
    """The system config (ours, or the user's with our keys set over it) and the remote memory's."""
    if active_chunks is not None and active_chunks < 1:
        raise OptionError(f"`active_chunks` {active_chunks}: at least 1")
    ours = system_config(dimensions, roofline)
    overridden: list[str] = []
    if system_file is None:
        system = ours
    else:
        system = configfiles.checked(
            configfiles.read_json_object(system_file, "`system_config`"),
            configfiles.SYSTEM_KEYS,
            "`system_config`",
            system_file,
        )
        for key in ("trace-enabled", *(_ROOFLINE_KEYS if roofline is not None else ())):
            if system.get(key) != ours[key]:
                overridden.append(key)
            system[key] = ours[key]
    if collective is not None:
        per_dim = collectives(collective, dimensions)
        for key in IMPLEMENTATIONS:
            value = per_dim if key == IMPLEMENTATIONS[0] else ["ring" if a in ALL_REDUCE_ONLY else a for a in per_dim]
            if system_file is not None and system.get(key) != value:
                overridden.append(key)
            system[key] = value
    if active_chunks is not None:
        if system_file is not None and system.get("active-chunks-per-dimension") != active_chunks:
            overridden.append("active-chunks-per-dimension")
        system["active-chunks-per-dimension"] = active_chunks
    if system_file is not None:
        _check_system(system, dimensions, system_file)
    remote = dict(REMOTE_MEMORY) if remote_memory_file is None else _remote_memory(remote_memory_file)
    return Setup(system, remote, network_file, system_file, remote_memory_file, tuple(overridden))


def _check_system(system: dict[str, Any], dimensions: int, path: str) -> None:
    missing = [key for key in ("preferred-dataset-splits", *IMPLEMENTATIONS) if key not in system]
    if missing:  # ASTRA-sim's default splits (0) divide by zero; a collective without an algorithm never runs
        raise ConverterError(
            f"`system_config` {path}: no {', '.join(missing)} (ASTRA-sim needs them: its default of "
            "preferred-dataset-splits, 0, divides by zero, and a collective without an implementation never "
            'ends; e.g. 4 and ["ring"], one a dimension, or set the algorithms with `collective`)'
        )
    for key in IMPLEMENTATIONS:
        value = system[key]
        if not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            raise ConverterError(f"`system_config` {path}: {key} must be a list of algorithm names")
        for name in value:
            direct = _DIRECT_WINDOW.fullmatch(name)
            if name not in ALGORITHMS.values() and not (direct and name.startswith(("direct", "oneDirect"))):
                raise ConverterError(
                    f"`system_config` {path}: {key} names {name!r}, not an algorithm ASTRA-sim knows "
                    f"({', '.join(ALGORITHMS.values())})"
                )
        if len(value) != dimensions:
            raise ConverterError(
                f"`system_config` {path}: {key} has {len(value)} entr(ies) for a network of "
                f"{dimensions} dimension(s) (one a dimension; or set them with `collective`)"
            )
    chunks = system.get("active-chunks-per-dimension")
    if chunks is not None and not (type(chunks) is int and chunks >= 1):
        raise ConverterError(
            f"`system_config` {path}: active-chunks-per-dimension {chunks!r} is not a whole number >= 1"
        )


def _remote_memory(path: str) -> dict[str, Any]:
    data = configfiles.checked(
        configfiles.read_json_object(path, "`remote_memory_config`"),
        configfiles.REMOTE_MEMORY_KEYS,
        "`remote_memory_config`",
        path,
    )
    if not isinstance(data.get("memory-type"), str):
        raise ConverterError(
            f'`remote_memory_config` {path}: no "memory-type" (e.g. "NO_MEMORY_EXPANSION", as ASTRA-sim\'s examples)'
        )
    return data


def read_network(path: str, ranks: int | None) -> Network:
    """The user's network file, checked (against a job of ``ranks`` when given): ASTRA-sim is
    given this ``Network`` as ``Network.yaml`` writes it, never the file (``configfiles``)."""
    fields = configfiles.network_fields(configfiles.read_text(path, "`network_config`"), path)
    missing = [k for k in configfiles.NETWORK_KEYS if k not in fields]
    if missing:
        raise ConverterError(
            f"`network_config` {path}: no {', '.join(missing)} (ASTRA-sim's analytical network: "
            "topology, npus_count, bandwidth, latency, one value a dimension)"
        )
    topology = []
    for name in fields["topology"]:
        if name not in TOPOLOGIES.values():
            raise ConverterError(
                f"`network_config` {path}: topology {name!r} is not one of {', '.join(TOPOLOGIES.values())}"
            )
        topology.append(name)
    dims = len(topology)
    if not 1 <= dims <= bounds.MAX_DIMENSIONS:
        raise ConverterError(f"`network_config` {path}: {dims} dimensions (1 to {bounds.MAX_DIMENSIONS})")
    for key in ("npus_count", "bandwidth", "latency"):
        if len(fields[key]) != dims:
            raise ConverterError(f"`network_config` {path}: {len(fields[key])} {key} value(s) for {dims} dimension(s)")
    npus = tuple(configfiles.whole_value(v, "npus_count", path, 2, bounds.MAX_RANKS) for v in fields["npus_count"])
    bandwidth = tuple(
        configfiles.real_value(v, "bandwidth", path, bounds.BANDWIDTH_GBPS, "GB/s") for v in fields["bandwidth"]
    )
    latency = tuple(configfiles.real_value(v, "latency", path, bounds.LATENCY_NS, "ns") for v in fields["latency"])
    if prod(npus) > bounds.MAX_RANKS:
        raise ConverterError(f"`network_config` {path}: {prod(npus):,} NPUs (at most {bounds.MAX_RANKS:,})")
    if ranks is not None and prod(npus) != ranks:
        raise ConverterError(
            f"`network_config` {path}: {'x'.join(map(str, npus))} = {prod(npus)} NPUs, but the job has {ranks} ranks"
        )
    return Network(tuple(topology), npus, bandwidth, latency)

"""The configuration files ASTRA-sim needs, written by us: network, system, remote memory, logging.

Units, read in ASTRA-sim's sources (``astra-sim/system/Sys.cc``, ``Roofline.cc``,
``workload/Workload.cc``) and confirmed by running its binaries: a cycle is a nanosecond (node
durations, in microseconds in the trace, are multiplied by 1,000); the network's bandwidth is in
GB/s and its latency in ns per dimension; ``peak-perf`` is in TFLOPS (x 1e12) and ``local-mem-bw``
in GB/s (x 1e9); with ``roofline-enabled`` a non-CPU compute node takes
``num_ops / min(peak, local_mem_bw * num_ops / tensor_size)`` seconds.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from math import prod
from typing import Any

from ..errors import OptionError

#: ASTRA-sim's analytical network topologies (its ``topology:`` names), by the lower-case name users type.
TOPOLOGIES = {"ring": "Ring", "switch": "Switch", "fullyconnected": "FullyConnected"}
DEFAULT_BANDWIDTH_GBPS = 50.0
DEFAULT_LATENCY_NS = 500.0


@dataclass(frozen=True)
class Network:
    """One network: per dimension its topology, NPU count, bandwidth (GB/s) and latency (ns)."""

    topology: tuple[str, ...]
    npus: tuple[int, ...]
    bandwidth: tuple[float, ...]
    latency: tuple[float, ...]

    @property
    def name(self) -> str:
        dims = "x".join(map(str, self.npus))
        return f"{','.join(self.topology)} {dims}"

    def yaml(self) -> str:
        def row(values: tuple[Any, ...]) -> str:
            return "[ " + ", ".join(map(str, values)) + " ]"

        return (
            f"topology: {row(self.topology)}\nnpus_count: {row(self.npus)}\n"
            f"bandwidth: {row(self.bandwidth)}  # GB/s\nlatency: {row(self.latency)}  # ns\n"
        )


def network(
    topology: str, ranks: int, npus_per_dim: str | None = None, bandwidth: str | None = None, latency: str | None = None
) -> Network:
    """The network of ``ranks`` NPUs named by ``topology`` ("Ring", "Ring,Switch", ...).

    ``npus_per_dim`` is a comma list, one size a dimension, whose product is ``ranks``; one ``*``
    stands for what the others leave (``8,*``); one dimension needs none. ``bandwidth`` (GB/s) and
    ``latency`` (ns) are comma lists, one value a dimension, or one value for all of them."""
    names = [t.strip() for t in topology.split(",")]
    dims: list[str] = []
    for name in names:
        known = TOPOLOGIES.get(name.lower())
        if known is None:
            raise OptionError(
                f"`topology` {topology}: unknown topology {name!r} (one of "
                f"{', '.join(TOPOLOGIES.values())}, or several joined by commas: Ring,Switch)"
            )
        dims.append(known)
    npus = _sizes(npus_per_dim, len(dims), ranks, topology)
    for kind, size in zip(dims, npus, strict=True):
        if size < 2:
            raise OptionError(
                f"`topology` {topology} on {ranks} ranks: a {kind} of {size} NPU(s) (every dimension needs at least 2)"
            )
    return Network(
        tuple(dims),
        npus,
        _per_dim(bandwidth, len(dims), DEFAULT_BANDWIDTH_GBPS, "`bandwidth`"),
        _per_dim(latency, len(dims), DEFAULT_LATENCY_NS, "`latency`"),
    )


def check_backend(network: Network, backend: str) -> None:
    """What a backend cannot simulate: the congestion-aware one (network analytical 599a047) takes
    one dimension only ("only support 1-dim topology"), any of Ring, Switch and FullyConnected
    (each run here to its end), and aborts on a Ring of 2 NPUs (it connects the same two devices
    twice: ``Device::connect`` asserts ``!connected(id)``)."""
    if backend == "aware" and len(network.npus) > 1:
        raise OptionError(
            f"the congestion-aware backend simulates one dimension only, not {network.name}: use `backend` unaware"
        )
    if backend == "aware" and any(t == "Ring" and n == 2 for t, n in zip(network.topology, network.npus, strict=True)):
        raise OptionError(
            f"the congestion-aware backend aborts on a Ring of 2 NPUs ({network.name}): use "
            "FullyConnected there (for 2 NPUs the same links: one each way), or `backend` unaware"
        )


def _sizes(text: str | None, count: int, ranks: int, topology: str) -> tuple[int, ...]:
    if text is None:
        if count == 1:
            return (ranks,)
        raise OptionError(
            f"`topology` {topology} has {count} dimensions: give their sizes with "
            f"`npus_per_dim` (e.g. {','.join(['2'] * (count - 1))},*)"
        )
    parts = [p.strip() for p in text.split(",")]
    if len(parts) != count:
        raise OptionError(f"`npus_per_dim` {text}: {len(parts)} size(s) for the {count} dimension(s) of {topology}")
    if parts.count("*") > 1:
        raise OptionError(f"`npus_per_dim` {text}: at most one '*'")
    try:
        known = [int(p) for p in parts if p != "*"]
    except ValueError:
        raise OptionError(f"`npus_per_dim` {text}: sizes are whole numbers (or one '*')") from None
    if any(k < 1 for k in known):
        raise OptionError(f"`npus_per_dim` {text}: sizes are at least 1")
    if "*" in parts:
        rest, left = divmod(ranks, prod(known))
        if left or rest < 1:
            raise OptionError(f"`npus_per_dim` {text}: {ranks} ranks are not a multiple of {prod(known)}")
        return tuple(rest if p == "*" else int(p) for p in parts)
    if prod(known) != ranks:
        raise OptionError(f"`npus_per_dim` {text}: {prod(known)} NPUs, but the job has {ranks} ranks")
    return tuple(known)


def _per_dim(text: str | None, count: int, default: float, option: str) -> tuple[float, ...]:
    if text is None:
        return (default,) * count
    try:
        values = [float(p) for p in text.split(",")]
    except ValueError:
        raise OptionError(f"{option} {text}: numbers, one a dimension (comma-separated)") from None
    if any(not v > 0 or v == float("inf") for v in values):
        raise OptionError(f"{option} {text}: values must be positive")
    if len(values) == 1:
        return (values[0],) * count
    if len(values) != count:
        raise OptionError(f"{option} {text}: {len(values)} value(s) for {count} dimension(s)")
    return tuple(values)


@dataclass(frozen=True)
class Accelerator:
    """A roofline: dense peak (TFLOPS) and memory bandwidth (GB/s), with where the numbers come from."""

    name: str
    peak_tflops: float
    mem_bandwidth_gbps: float
    source: str


#: Dense BF16 tensor-core peak (no sparsity) and HBM bandwidth, from the vendors' datasheets.
ACCELERATORS = {
    a.name.lower(): a
    for a in (
        Accelerator(
            "V100", 125.0, 900.0, "NVIDIA V100 SXM2 datasheet: 125 TFLOPS FP16 tensor (no BF16), 900 GB/s HBM2"
        ),
        Accelerator("A100", 312.0, 2039.0, "NVIDIA A100 80GB SXM datasheet: 312 TFLOPS BF16 dense, 2,039 GB/s HBM2e"),
        Accelerator(
            "H100",
            989.0,
            3350.0,
            "NVIDIA H100 SXM datasheet: 989 TFLOPS BF16 dense (1,979 with sparsity), 3.35 TB/s HBM3",
        ),
        Accelerator("H200", 989.0, 4800.0, "NVIDIA H200 SXM datasheet: 989 TFLOPS BF16 dense, 4.8 TB/s HBM3e"),
        Accelerator(
            "MI300X", 1307.4, 5300.0, "AMD Instinct MI300X datasheet: 1,307.4 TFLOPS BF16 dense, 5.3 TB/s HBM3"
        ),
    )
}


def accelerator(name: str | None, peak_tflops: float | None, mem_bandwidth: float | None) -> Accelerator | None:
    """The roofline asked for: a preset, a preset with one number replaced, or both numbers; None
    when none is asked for (compute nodes then take their traced durations)."""
    preset = None
    if name is not None:
        preset = ACCELERATORS.get(name.lower())
        if preset is None:
            known = ", ".join(a.name for a in ACCELERATORS.values())
            raise OptionError(
                f"`accelerator` {name}: unknown (one of {known}; or give `peak_tflops` and `mem_bandwidth`)"
            )
    if preset is None and peak_tflops is None and mem_bandwidth is None:
        return None
    if preset is None and (peak_tflops is None or mem_bandwidth is None):
        raise OptionError("the roofline needs both `peak_tflops` and `mem_bandwidth` (or `accelerator` NAME)")
    for option, value in (("`peak_tflops`", peak_tflops), ("`mem_bandwidth`", mem_bandwidth)):
        if value is not None and not 0 < value < float("inf"):
            raise OptionError(f"{option} {value}: must be positive")
    peak = peak_tflops if peak_tflops is not None else preset.peak_tflops if preset else 0.0
    bandwidth = mem_bandwidth if mem_bandwidth is not None else preset.mem_bandwidth_gbps if preset else 0.0
    label = preset.name if preset else "custom"
    source = preset.source if preset and peak_tflops is None and mem_bandwidth is None else "given on the command line"
    return Accelerator(label, peak, bandwidth, source)


def system_config(dimensions: int, roofline: Accelerator | None, replay: bool = False) -> dict[str, Any]:
    """The system configuration: ASTRA-sim's example one (ring collectives, one entry a network
    dimension), per-node tracing on (the ``issue``/``callback`` lines the results are read from)
    and the roofline when asked for; ``replay``: ``replay-only`` (every node, communication
    included, takes its traced duration)."""
    collectives = ["ring"] * dimensions
    config: dict[str, Any] = {
        "scheduling-policy": "LIFO",
        "endpoint-delay": 10,
        "active-chunks-per-dimension": 1,
        "preferred-dataset-splits": 4,
        "all-reduce-implementation": collectives,
        "all-gather-implementation": collectives,
        "reduce-scatter-implementation": collectives,
        "all-to-all-implementation": collectives,
        "collective-optimization": "localBWAware",
        "local-mem-bw": 1600,
        "boost-mode": 0,
        "roofline-enabled": 0,
        "peak-perf": 900,
        "trace-enabled": 1,
    }
    if replay:
        config["replay-only"] = 1
    if roofline is not None:
        config.update(
            {"roofline-enabled": 1, "peak-perf": roofline.peak_tflops, "local-mem-bw": roofline.mem_bandwidth_gbps}
        )
    return config


REMOTE_MEMORY: dict[str, Any] = {"memory-type": "NO_MEMORY_EXPANSION"}


def logging_config(events_path: str) -> str:
    """ASTRA-sim's ``--logging-configuration`` (spdlog_setup TOML): the workload's and the system's
    messages into one unrotated file (its default log rotates at 10 x 10 MB, losing the beginning
    of a large run's per-node lines), and the workload's info lines on stdout as well."""
    return (
        f'[[sink]]\nname = "events"\ntype = "basic_file_sink_mt"\nfilename = {json.dumps(events_path)}\n'
        'truncate = true\nlevel = "debug"\n\n'
        # the workload's info lines (each rank's ``finished``) on stdout too, flushed line by line: a
        # run that aborts at exit loses the file sink's buffer, not these
        '[[sink]]\nname = "console"\ntype = "stdout_sink_mt"\nlevel = "info"\n\n'
        '[[logger]]\nname = "workload"\nsinks = ["events", "console"]\nlevel = "debug"\n\n'
        '[[logger]]\nname = "system"\nsinks = ["events"]\nlevel = "info"\n'
    )

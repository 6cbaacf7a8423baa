"""What ``simulate`` is asked for (``SimulateOptions``) and what follows from it alone: the network
of a width, the system and remote-memory configs, how messages name the roofline's option.
``optioncheck.py`` checks every field first."""

from __future__ import annotations

from dataclasses import dataclass

from . import configs
from .configs import Accelerator, Network
from .setup import Setup, make_setup, read_network


@dataclass(frozen=True)
class SimulateOptions:
    """What ``simulate`` is asked for (the command line's options, as strings where it takes lists;
    ``bandwidth`` and ``latency`` also as a number, or one a dimension). ``api.simulate`` checks
    every field as the command line checks its flags, ranges included (``optioncheck.py``)."""

    topology: str = "Ring"
    npus_per_dim: str | None = None
    bandwidth: str | None = None  # GB/s, one a dimension or one for all
    latency: str | None = None  # ns, the same
    backend: str = "unaware"
    comm_groups: str | None = None
    astra_sim_bin: str | None = None
    accelerator: str | None = None
    peak_tflops: float | None = None
    mem_bandwidth: float | None = None  # GB/s
    timeout: float | None = None
    check: bool = True  # the job's files checked first (preflight.py)
    system_config: str | None = None  # the user's files (setup.py)
    network_config: str | None = None
    remote_memory_config: str | None = None
    collective: str | None = None  # one algorithm, or one a dimension
    active_chunks: int | None = None
    replay: bool = False  # replay-only: every node its traced duration


def roofline_option(options: SimulateOptions) -> str:
    """The option that asked for a roofline, as messages name it."""
    if options.accelerator is not None:
        return f"`accelerator` {options.accelerator}"
    return "`peak_tflops`" if options.peak_tflops is not None else "`mem_bandwidth`"


def network_of(options: SimulateOptions, ranks: int, topology: str | None = None) -> Network:
    """The network of ``ranks`` NPUs: the user's file, else made from the options (``topology``
    replacing theirs: a sweep's line)."""
    if options.network_config is not None:
        return read_network(options.network_config, ranks)
    return configs.network(
        topology or options.topology, ranks, options.npus_per_dim, options.bandwidth, options.latency
    )


def setup_of(options: SimulateOptions, network: Network, roofline: Accelerator | None) -> Setup:
    setup = make_setup(
        len(network.npus),
        roofline,
        system_file=options.system_config,
        network_file=options.network_config,
        remote_memory_file=options.remote_memory_config,
        collective=options.collective,
        active_chunks=options.active_chunks,
    )
    if options.replay:  # every node its traced duration, communication included (Workload::issue)
        setup.system["replay-only"] = 1
    return setup

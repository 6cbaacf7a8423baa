"""Running converted traces in the real ASTRA-sim, for the benchmarks and the end-to-end tests:
a thin adapter over the package's ``simulate`` (``converter/simulate``: it writes the configs,
runs the binary of ``$ASTRA_SIM_HOME/bin``, reads its log and checks that every rank finished),
keeping the shape these callers use: a failed run is a ``Simulation`` with a non-zero
``returncode`` and the one-line reason in ``output`` rather than an exception.

The network is ``simulate.sh``'s default: a Ring of NPUS at 50 GB/s and 500 ns (a Switch of 2 for
the congestion-aware backend, which aborts on a Ring of 2).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from chakra_convert_fast.converter.errors import ConverterError, SimulatorError
from chakra_convert_fast.converter.simulate import configs, run
from chakra_convert_fast.converter.simulate.job import find_job

ENV = run.ENV


@dataclass
class RankRun:
    rank: int
    finished: bool = False
    cycles: int = 0
    exposed_communication: int = 0
    nodes_done: int = 0
    comm_done: dict[str, int] = field(default_factory=dict)  # "collective"/"send"/"recv" -> count
    comm_cycles: int = 0  # sum over communication nodes of callback tick - issue tick
    exposed_comm_ns: int = 0  # ours: communication in flight and no compute or memory node running


@dataclass
class Simulation:
    returncode: int
    ranks: list[RankRun]
    output: str
    logdir: Path

    @property
    def all_finished(self) -> bool:
        return all(r.finished for r in self.ranks)


def home() -> Path | None:
    value = os.environ.get(ENV)
    return Path(value) if value else None


def simulate(
    prefix: Path,
    npus: int,
    *,
    backend: str = "unaware",
    comm_groups: Path | None = None,
    workdir: Path,
    timeout: float = 600,
    system_overrides: dict[str, object] | None = None,
) -> Simulation:
    """Simulate ``PREFIX.<rank>.et`` (``npus`` ranks) with ``comm_groups``; ``workdir`` is kept for
    the callers' sake (the package removes its own temporary files)."""
    root = home()
    if root is None:
        raise RuntimeError(f"{ENV} is not set")
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        job = find_job(str(prefix), None if comm_groups is None else str(comm_groups))
        if job.ranks != npus:
            raise SimulatorError(f"{prefix}: {job.ranks} rank files, {npus} NPUs asked for")
        network = configs.network("Switch" if backend == "aware" and npus == 2 else "Ring", npus)
        result = run.simulate(
            job,
            network,
            backend=backend,
            roofline=_roofline(system_overrides),
            simulator=run.find_simulator(backend, str(root)),
            timeout=timeout,
        )
    except ConverterError as exc:
        return Simulation(1, [RankRun(r) for r in range(npus)], str(exc), workdir)
    ranks = [
        RankRun(
            r.rank,
            True,
            r.step_ns,
            r.astra_exposed_ns,
            r.nodes,
            {k: v for k, v in (("collective", r.collectives), ("send", r.sends), ("recv", r.recvs)) if v},
            r.comm_ns,
            r.exposed_comm_ns,
        )
        for r in result.ranks
    ]
    return Simulation(0, ranks, "\n".join(result.warnings), workdir)


def _roofline(overrides: dict[str, object] | None) -> configs.Accelerator | None:
    """The roofline of a system-config override (``roofline-enabled``, ``peak-perf`` TFLOPS,
    ``local-mem-bw`` GB/s), as the package's ``simulate`` takes it."""
    if not overrides or not overrides.get("roofline-enabled"):
        return None
    return configs.Accelerator(
        "measured", float(str(overrides["peak-perf"])), float(str(overrides["local-mem-bw"])), "system_overrides"
    )

"""``simulate PREFIX --ranks N``: the captured job run as a data-parallel job of N ranks without
writing N rank files where an equivalent reduced job is proven (``reduced``), else the full job
(``scale`` to N ranks, in a temporary folder). The result says which ran, and why.

The job written for the run (either one) lives in a temporary folder (or ``work_dir``) removed
after the run; the captured files are only read. The reduced job is written compacted.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import replace
from typing import IO, Any

from ..errors import ConverterError
from ..et import wire
from ..et.decode import attribute_spans, read_et
from ..ranks import expertscale
from ..ranks.scale import check_ranks, scale
from . import configs, fullcost, meshreduced, preflight, reduced
from .configs import Accelerator, Network
from .job import Job, find_job
from .reduced import Plan
from .run import (
    BINARIES,
    Progress,
    SimulateOptions,
    SimulationResult,
    find_simulator,
    make_workdir,
    network_of,
    roofline_option,
    run_job,
    setup_of,
)
from .setup import Setup

_COMM_SIZE = wire.attr_name("comm_size")


#: Past this many ranks a full job that no reduced one can stand for runs only when asked for
#: (``--exact``): ASTRA-sim takes minutes at 1,024 ranks here and hours at 8,192 (docs/reduced.md).
FULL_WITHOUT_ASKING = 8192


def plan_for(job: Job, network: Network, ranks: int, backend: str, setup: Setup, exact: bool) -> Plan:
    """How ``job`` runs as ``ranks`` ranks on ``network`` with ``setup`` (the system configuration
    the run uses: the reduced job is fitted to what it says): reduced where proven, else full (why);
    refused where no reduced job stands for more than FULL_WITHOUT_ASKING ranks (``--exact`` runs it)."""
    if ranks == job.ranks:
        return reduced.full(ranks, job.ranks, network, "the captured width")
    if exact:
        return reduced.full(ranks, job.ranks, network, "`exact`")
    if expertscale.is_expert_job(job.prefix):  # no reduced job models the busiest expert rank's all-to-alls
        return reduced.full(
            ranks,
            job.ranks,
            network,
            f"an expert-parallel job of {job.ranks} ranks (its layout file's ep): written at {ranks:,} "
            "ranks by scale (the all-to-alls that return rows sized for the new job's experts)",
        )
    if ranks % job.ranks and reduced.layout_of(job.prefix) is None:
        chosen = reduced.full(
            ranks,
            job.ranks,
            network,
            f"{ranks:,} is not a multiple of the {job.ranks} captured ranks",
            f"a multiple of {job.ranks} gets a reduced job; {reduced.EXACT}",
        )
    else:
        chosen = _layout_plan(job, network, ranks, backend, setup) or reduced.plan(
            job, network, ranks, setup.system, backend
        )
    if chosen.warning is not None:
        chosen = replace(chosen, estimate=_estimate(job, ranks, setup))
    if chosen.warning is not None and ranks > FULL_WITHOUT_ASKING:
        raise ConverterError(
            f"`ranks` {ranks:,}: no reduced job stands for it ({chosen.reason}), and the full job of {ranks:,} "
            f"ranks takes hours in ASTRA-sim ({chosen.estimate}): it runs only with `exact`; "
            f"{chosen.advice.split(';')[0]}"
        )
    return chosen


def _estimate(job: Job, ranks: int, setup: Setup) -> str:
    """How long the full job should take in ASTRA-sim, for the warning (``fullcost.py``)."""
    layout = reduced.layout_of(job.prefix)
    group = ranks // (layout.mesh.tp * layout.mesh.pp) if layout is not None else ranks
    splits = setup.system.get("preferred-dataset-splits")
    splits = splits if isinstance(splits, int) and not isinstance(splits, bool) and splits > 0 else 4
    seconds, nodes, collectives = fullcost.full_job_seconds(job, ranks, group, splits)
    return (
        f"about {fullcost.duration(seconds)} in ASTRA-sim here ({ranks:,} ranks x {nodes:,} nodes, "
        f"{collectives:,} collective{'s' * (collectives != 1)} over about {group:,} ranks each)"
    )


def _layout_plan(job: Job, network: Network, ranks: int, backend: str, setup: Setup) -> Plan | None:
    """The reduced job of a layout job (``meshreduced.py``) or the full one and why; None for a job
    without a layout file (data parallelism: ``reduced.py``)."""
    layout = reduced.layout_of(job.prefix)
    if layout is None:
        return None
    found = meshreduced.plan(job, layout, meshreduced.layout_path(job.prefix), network, ranks, setup.system, backend)
    if found.network is None:
        kind = reduced.parallelism(job.prefix)
        return reduced.full(
            ranks,
            job.ranks,
            network,
            f"{kind} job (its layout file): {found.why}",
            reduced.ADVICE["layout"] if found.warn else "",
        )
    return Plan(ranks, job.ranks, network, found.network, found.how, (), found.worst_error, mesh=found.reduction)


def check_width(job: Job, ranks: int) -> None:
    """N any count ``scale`` takes (rank r a copy of captured rank r mod K; with sub-groups, a
    multiple of them); of TP x PP where a layout file gives them (``scale``: the data-parallel
    degree becomes N / (TP x PP), each rank a copy of one captured)."""
    layout = reduced.layout_of(job.prefix)
    if layout is not None:
        unit = layout.mesh.tp * layout.mesh.pp
        if ranks < 2 * unit or ranks % unit:
            raise ConverterError(
                f"`ranks` {ranks}: a job of tensor-parallel {layout.mesh.tp} x pipeline-parallel {layout.mesh.pp} "
                f"(its layout file) scales to a multiple of {unit} (data-parallel degree 2 or more)"
            )
        return
    check_ranks(job.prefix, ranks, job.comm_groups)  # what scale takes (rank r a copy of r mod K), sweeps too


def simulate_width(
    prefix: str,
    ranks: int,
    options: SimulateOptions,
    *,
    exact: bool = False,
    compact: bool = False,
    work_dir: str | None = None,
    timeline: str | IO[str] | None = None,
    progress: Callable[[Progress], None] | None = None,
) -> SimulationResult:
    """Everything checked first (the job, the network at N ranks, the roofline, the configs, the
    simulator), then the reduced or the full job written and run."""
    if options.backend not in BINARIES:
        raise ConverterError(f"`backend` {options.backend}: one of {', '.join(BINARIES)}")
    job = find_job(prefix, options.comm_groups)
    check_width(job, ranks)
    network = network_of(options, ranks)
    configs.check_backend(network, options.backend)
    roofline = configs.accelerator(options.accelerator, options.peak_tflops, options.mem_bandwidth)
    setup = setup_of(options, network, roofline)
    if options.check:
        preflight.check_job(job, roofline, roofline_option(options))
    simulator = find_simulator(options.backend, options.astra_sim_bin)
    if work_dir is not None and not os.path.isdir(work_dir):
        raise ConverterError(f"`work_dir` {work_dir}: no such directory")
    chosen = plan_for(job, network, ranks, options.backend, setup, exact)
    return run_plan(
        job,
        chosen,
        options,
        roofline,
        setup,
        simulator,
        compact=compact,
        work_dir=work_dir,
        timeline=timeline,
        progress=progress,
    )


def run_plan(
    job: Job,
    chosen: Plan,
    options: SimulateOptions,
    roofline: Accelerator | None,
    setup: Setup,
    simulator: str,
    *,
    compact: bool,
    work_dir: str | None,
    timeline: str | IO[str] | None = None,
    progress: Callable[[Progress], None] | None = None,
) -> SimulationResult:
    """Write the job ``chosen`` names (in a temporary folder) and run it. A reduced job is always
    written compacted (``compact/``: the same simulated time with far fewer nodes), the full one
    only with ``compact``; a reduced job runs on its own network (never the user's network file,
    which describes the N-rank one)."""
    network = chosen.network or chosen.full
    if chosen.warning is not None:  # the full job for want of a reduced one: compacted (the same time)
        compact = True
    if chosen.reduced:
        compact, setup = True, replace(setup, network_file=None)
    if chosen.mesh is not None:
        setup = replace(setup, system=chosen.mesh.system)
    said = None  # how scale laid the job out, where the trace chose it (FSDP recognised)
    with ExitStack() as stack:
        target = job
        if chosen.mesh is not None or chosen.simulated_ranks != job.ranks or compact or chosen.resize:
            scratch = make_workdir("chakra-ranks-", work_dir)
            stack.callback(shutil.rmtree, scratch, True)
            written = os.path.join(scratch, os.path.basename(job.prefix))
            mesh = chosen.mesh  # a layout job's block: FSDP bytes as at N, then resized by mesh dimension
            scaled = scale(
                job.prefix,
                written,
                chosen.simulated_ranks,
                compact=compact,
                comm_groups=job.comm_groups,
                bytes_ranks=mesh.bytes_ranks if mesh is not None else None,
                resized=dict(mesh.sizes) if mesh is not None else None,
            )
            said = scaled.note if scaled.layout is not None else None  # a layout scale chose (FSDP recognised)
            if chosen.resize:
                _resize(written, chosen.simulated_ranks, dict(chosen.resize))
            target = find_job(written)
        result = run_job(target, network, options, roofline, setup, simulator, timeline=timeline, progress=progress)
    if said is not None:
        result = replace(result, warnings=[said, *result.warnings])
    return _labelled(result, chosen, job.prefix)


def _labelled(result: SimulationResult, chosen: Plan, prefix: str) -> SimulationResult:
    fields: dict[str, Any] = dict(result.__dict__)
    fields.update(plan=chosen, network=chosen.full, prefix=prefix)
    if chosen.mesh is not None:  # a layout job's block: each rank named as in the N-rank job
        mesh = chosen.mesh
        fields["ranks"] = [replace(r, rank=mesh.full_rank(r.rank)) for r in result.ranks]
        fields["recorded"] = {mesh.full_rank(r): found for r, found in result.recorded.items()}
    if chosen.warning is not None:
        fields["warnings"] = [chosen.warning, *result.warnings]
    return SimulationResult(**fields)


def _resize(prefix: str, ranks: int, sizes: dict[int, int]) -> None:
    """Rewrite the ``comm_size`` of the collectives named in ``sizes`` (old -> new) in each rank file
    of ``prefix`` (written by us, in our temporary folder)."""
    for rank in range(ranks):
        path = f"{prefix}.{rank}.et"
        records: list[bytes] = []
        trace = read_et(path, records=records)
        for row, attrs in trace.comm.items():
            new = sizes.get(int(attrs.get("comm_size", 0)))
            if new is None:
                continue
            message = records[row + 1]
            for name, start, end in attribute_spans(message):
                if name == "comm_size":
                    message = message[:start] + wire.int64_attr(_COMM_SIZE, new, "comm_size") + message[end:]
                    break
            records[row + 1] = message
        with open(path, "wb") as fh:
            fh.write(b"".join(wire.delimited_message(m) for m in records))

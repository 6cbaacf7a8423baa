"""``simulate``: a job's ``.et`` files run in ASTRA-sim (configs written here), the result read
from its log; ``--sweep`` scales the job to each rank count and simulates every point."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable
from typing import Any

from tqdm import tqdm

from .. import api
from ..errors import ConverterError
from ..memory.fit import Fit, job_fit
from ..ranks.scale import MAX_RANKS
from ..simulate import measured as steps

# The ranges simulate's numbers may take (a usage error outside): the library's, which its options
# (``SimulateOptions``) and the user's config files are held to as well.
from ..simulate.bounds import BANDWIDTH_GBPS, LATENCY_NS, MAX_ACTIVE_CHUNKS, PEAK_TFLOPS, TIMEOUT_S
from ..simulate.sweep import parse as parse_sweep
from .common import PROG, add_output_options, declare, subcommand
from .numbers import MAX_JOBS, quantities, quantity, whole
from .report import Reporter, with_flags

_SHOWN_RANKS = 16
#: ``--measured-ms``: a step of a microsecond to about eleven days
MEASURED_MS = (0.001, 1e9)


def _range(limits: tuple[float, float]) -> str:
    return f"{limits[0]:g} to {limits[1]:g}"


def add(commands: Any) -> None:
    parser = subcommand(
        commands,
        "simulate",
        "run a job's .et files (PREFIX.<rank>.et) in ASTRA-sim and report the simulated step",
        f"  {PROG} simulate outputs/gpt2_small_np2\n"
        f"  {PROG} simulate et/trace --topology Ring,Switch --npus-per-dim 4,* --bandwidth 200,50 "
        "--timeline run.json\n"
        f"  {PROG} simulate outputs/gpt2_accel --accelerator H100 --json result.json  "
        "# converted with --roofline --target accelerator\n"
        f"  {PROG} simulate outputs/gpt2_small_np2 --sweep ranks=2,8,64,256 --topology Ring --topology Switch\n"
        f"  {PROG} simulate outputs/gpt2_small_np2 --sweep ranks=2,64,1024 --compact --jobs 4\n"
        f"  {PROG} simulate outputs/gpt2_small_np2 --sweep bandwidth=25,50,100,200 --topology Ring --topology Switch\n"
        f"  {PROG} simulate outputs/gpt2_small_np2_accel --sweep accelerator=A100,H100,MI300X --ray\n"
        f"  {PROG} simulate outputs/gpt2_small_np2 --ranks 1048576   # an equivalent reduced job: docs/reduced.md\n"
        f"  {PROG} simulate kineto/job --replay      # every node its traced duration, vs the measured step\n"
        f"  {PROG} simulate kineto/job --replay --measured-ms 45.9   # vs your own untraced step\n",
    )
    parser.add_argument("prefix", metavar="PREFIX", help="the job: PREFIX.0.et ... PREFIX.<N-1>.et")
    net = parser.add_argument_group("network (ASTRA-sim's analytical backend)")
    net.add_argument(
        "--topology",
        action="append",
        metavar="T",
        help="Ring, Switch, FullyConnected, or one a dimension joined by commas (Ring,Switch); "
        "default Ring (--sweep: give it several times for several lines)",
    )
    net.add_argument(
        "--npus-per-dim",
        metavar="N,..",
        help="NPUs per dimension, product = ranks; one '*' is "
        "what the others leave (4,*); not needed for one dimension",
    )
    net.add_argument(
        "--bandwidth",
        type=quantities(*BANDWIDTH_GBPS, "GB/s"),
        metavar="GB/s,..",
        help=f"link bandwidth per dimension, or one for all (default 50; {_range(BANDWIDTH_GBPS)})",
    )
    net.add_argument(
        "--latency",
        type=quantities(*LATENCY_NS, "ns"),
        metavar="ns,..",
        help=f"link latency per dimension, or one for all (default 500; {_range(LATENCY_NS)})",
    )
    net.add_argument(
        "--backend",
        choices=("unaware", "aware"),
        default="unaware",
        help="congestion-unaware (default) or -aware analytical network",
    )
    own = parser.add_argument_group("your own ASTRA-sim configuration (docs/simulating.md: what simulate still sets)")
    own.add_argument(
        "--system-config",
        metavar="F.json",
        help="ASTRA-sim system config, used as given except "
        "trace-enabled (always 1), the roofline's keys with --accelerator, and what --collective and "
        "--active-chunks set",
    )
    own.add_argument(
        "--network-config",
        metavar="F.yml",
        help="ASTRA-sim analytical network config, used as given "
        "(instead of --topology, --npus-per-dim, --bandwidth, --latency)",
    )
    own.add_argument("--remote-memory-config", metavar="F.json", help="ASTRA-sim remote memory config, used as given")
    own.add_argument(
        "--collective",
        metavar="ALG,..",
        help="collective algorithm per network dimension, or one for "
        "all: ring (default), oneRing, direct, oneDirect, halvingDoubling, oneHalvingDoubling, "
        "doubleBinaryTree (all-reduce only; the other collectives keep ring there)",
    )
    own.add_argument(
        "--active-chunks",
        type=whole(1, MAX_ACTIVE_CHUNKS),
        metavar="N",
        help="chunks in flight per dimension (active-chunks-per-dimension; default 1)",
    )
    compute = parser.add_argument_group("compute: the roofline (non-CPU compute nodes with num_ops and tensor_size)")
    compute.add_argument(
        "--gpu-memory",
        type=whole(1, 1 << 60),
        metavar="BYTES",
        help="say which ranks' peak memory would not fit in this many bytes (the job's memory files, "
        "convert --memory; --accelerator alone checks its preset's memory; docs/memory.md)",
    )
    compute.add_argument(
        "--accelerator",
        metavar="A",
        help="a preset: "
        + ", ".join(
            f"{a.name} ({a.peak_tflops:g} TFLOPS, {a.mem_bandwidth_gbps:g} GB/s)" for a in api.ACCELERATORS.values()
        ),
    )
    compute.add_argument(
        "--peak-tflops",
        type=quantity(*PEAK_TFLOPS, "TFLOPS"),
        metavar="T",
        help=f"peak compute, TFLOPS ({_range(PEAK_TFLOPS)})",
    )
    compute.add_argument(
        "--mem-bandwidth",
        type=quantity(*BANDWIDTH_GBPS, "GB/s"),
        metavar="GB/s",
        help=f"memory bandwidth, GB/s ({_range(BANDWIDTH_GBPS)})",
    )
    parser.add_argument(
        "--replay",
        action="store_true",
        help="replay-only: every node, communication included, "
        "takes its traced duration; with .et files converted from Kineto traces (or with --astra-sim), prints "
        "the measured step and the error: against the untraced step where the conversion took the "
        "profiler's time out and knew it (docs/overhead.md)",
    )
    parser.add_argument(
        "--measured-ms",
        type=quantity(*MEASURED_MS, "ms"),
        metavar="MS",
        help="the job's step as you measured it untraced, in milliseconds: held against every rank's simulated "
        "step instead of the step the files record (where the conversion knew no untraced step; docs/overhead.md)",
    )
    parser.add_argument(
        "--comm-groups",
        metavar="F",
        help="communicator group file (default: PREFIX.comm_group.json, else comm_group.json beside the files)",
    )
    parser.add_argument(
        "--astra-sim-bin",
        metavar="PATH",
        help="the ASTRA-sim binary or its folder (default: $ASTRA_SIM_HOME, else PATH)",
    )
    parser.add_argument(
        "--no-check",
        dest="check",
        action="store_false",
        help="skip checking the files first (as the check command does; up to 8 ranks all, past "
        "that 4 of them) for what ASTRA-sim would abort on",
    )
    parser.add_argument(
        "--timeout",
        type=quantity(*TIMEOUT_S, "s"),
        metavar="S",
        help="stop ASTRA-sim, and whatever it started, after S seconds (an error); a device or FIFO "
        f"output gets S seconds to take its output too ({_range(TIMEOUT_S)})",
    )
    out = parser.add_argument_group("outputs")
    out.add_argument(
        "--json", nargs="?", const="-", metavar="FILE", help="the result as JSON: on stdout, or written to FILE"
    )
    out.add_argument("--timeline", metavar="OUT.json", help="a Chrome/Perfetto trace of the simulated run")
    width = parser.add_argument_group("data-parallel width (docs/reduced.md)")
    width.add_argument(
        "--ranks",
        type=whole(1, MAX_RANKS),
        metavar="N",
        help="simulate the job as N data-parallel ranks (a "
        "multiple of the captured ones; of TP x PP with a layout file: one block of the mesh runs): on an "
        "equivalent reduced job where one is proven, else on the full job (compacted), with a warning saying "
        "why and how long it should take; the result says which ran",
    )
    width.add_argument("--exact", action="store_true", help="with --ranks or --sweep ranks=...: always the full job")
    width.add_argument(
        "--ranks-as",
        choices=api.RANKS_AS,
        default="captured",
        help="replay every rank as captured (default), or with the compute of the slowest or the median "
        "rank (its compute nodes' durations; where ranks differ in compute, a warning says so and how "
        "much of the step is waiting: docs/simulating.md)",
    )
    sweep = parser.add_argument_group("sweep")
    sweep.add_argument(
        "--sweep",
        action="append",
        metavar="KEY=V,..",
        help="simulate each value on each --topology: ranks=N,.. "
        "(the job scaled to each count, the scale command), bandwidth=GB/s,.. (every link), "
        "accelerator=A,.. (roofline presets)",
    )
    sweep.add_argument(
        "-j",
        "--jobs",
        type=whole(1, MAX_JOBS),
        default=1,
        metavar="N",
        help="--sweep: values simulated at once in local processes (default 1)",
    )
    sweep.add_argument(
        "--ray",
        nargs="?",
        const="auto",
        metavar="ADDRESS",
        help="--sweep: each value a task on the Ray cluster at ADDRESS (default: RAY_ADDRESS, else "
        "the cluster on this machine, else a new local one; as convert-all --ray); the job must "
        "be at the same path on every node",
    )
    sweep.add_argument(
        "--out", metavar="OUT", help="sweep outputs OUT.md (table), OUT.png (plot), OUT.json (default: PREFIX.sweep)"
    )
    sweep.add_argument(
        "--work-dir",
        metavar="DIR",
        help="where scaled jobs are written while they are simulated "
        "(--sweep, --ranks; default: the system's temporary directory)",
    )
    sweep.add_argument(
        "--compact",
        action="store_true",
        help="scale each point (--sweep) or the job (--ranks) "
        "with --compact: the same simulated step with far fewer nodes (see docs/compact.md); a full job that "
        "no reduced one stands for is always compacted",
    )
    add_output_options(parser)
    parser.set_defaults(run=_run)
    declare(parser, ("comm_groups", "json", "timeline"))


def _options(args: argparse.Namespace, topology: str) -> api.SimulateOptions:
    return api.SimulateOptions(
        topology=topology,
        npus_per_dim=args.npus_per_dim,
        bandwidth=args.bandwidth,
        latency=args.latency,
        backend=args.backend,
        comm_groups=args.comm_groups,
        astra_sim_bin=args.astra_sim_bin,
        accelerator=args.accelerator,
        peak_tflops=args.peak_tflops,
        mem_bandwidth=args.mem_bandwidth,
        timeout=args.timeout,
        check=args.check,
        system_config=args.system_config,
        network_config=args.network_config,
        remote_memory_config=args.remote_memory_config,
        collective=args.collective,
        active_chunks=args.active_chunks,
        replay=args.replay,
    )


def _run(args: argparse.Namespace, reporter: Reporter) -> int:
    if args.network_config and (args.topology or args.npus_per_dim or args.bandwidth or args.latency):
        args.usage_error(
            "--network-config is the whole network: drop --topology, --npus-per-dim, --bandwidth "
            "and --latency (or drop --network-config)"
        )
    topologies = args.topology or ["Ring"]
    if args.sweep and len(args.sweep) > 1:
        keys = ", ".join(s.split("=", 1)[0] for s in args.sweep)
        args.usage_error(
            f"--sweep is given {len(args.sweep)} times ({keys}): a sweep varies one thing; "
            "give one --sweep KEY=V1,V2,.. (several --topology make its lines)"
        )
    if args.sweep and args.measured_ms is not None:
        args.usage_error("--measured-ms is one job's step: for one simulation, not a --sweep")
    if args.sweep:
        return _run_sweep(args, reporter, topologies)
    if len(topologies) > 1:
        args.usage_error("several --topology are for --sweep; simulate one network at a time")
    if args.out or args.ray or args.jobs != 1:
        args.usage_error("--out, --jobs and --ray are for --sweep")
    if args.ranks is None and (args.compact or args.exact or (args.work_dir and args.ranks_as == "captured")):
        args.usage_error(
            "--work-dir, --compact and --exact are for --sweep or --ranks (compact one job with the compact command)"
        )
    bar = _Bar(reporter.shows_progress)
    try:
        result = api.simulate(
            args.prefix,
            _options(args, topologies[0]),
            timeline=args.timeline,
            json_output=None if args.json in (None, "-") else args.json,
            progress=bar.progress,
            ranks=args.ranks,
            exact=args.exact,
            compact=args.compact,
            work_dir=args.work_dir,
            gpu_memory=args.gpu_memory,
            ranks_as=args.ranks_as,
            measured_ms=args.measured_ms,
        )
    finally:
        bar.close()
    if args.json == "-":
        print(json.dumps(result.as_json(), indent=2))
    else:
        for line in result_lines(result):
            print(line)
    if result.memory is not None and args.json != "-":
        print(result.memory["line"])
    for warning in result.warnings:
        reporter.warning(warning)
    if args.json != "-":
        for note in result.notes:
            reporter.warning(note)
    if args.timeline:
        reporter.info(
            f"wrote {args.timeline}: {result.timeline_events:,} nodes on {len(result.ranks)} rank(s) "
            "(open it in https://ui.perfetto.dev or chrome://tracing)"
        )
    return 0


def _run_sweep(args: argparse.Namespace, reporter: Reporter, topologies: list[str]) -> int:
    if args.timeline:
        args.usage_error("--timeline is for one simulation, not a --sweep")
    if args.ray and args.jobs != 1:
        args.usage_error("--jobs is for local processes; with --ray the cluster runs the values")
    if args.ranks is not None:
        args.usage_error("--ranks is one width; --sweep ranks=... gives several")
    try:
        key, points = parse_sweep(args.sweep[0])
    except ConverterError as exc:
        args.usage_error(with_flags(str(exc), reporter.flags))
    if args.exact and key != "ranks":
        args.usage_error("--exact is for --sweep ranks=...")
    if args.compact and key != "ranks":
        args.usage_error("--compact is for --sweep ranks=... (compact the job with the compact command)")
    if key == "bandwidth" and args.bandwidth:
        args.usage_error("--sweep bandwidth=... sets the bandwidth: drop --bandwidth")
    if key == "bandwidth":
        try:
            quantities(*BANDWIDTH_GBPS, "GB/s")(",".join(points))
        except argparse.ArgumentTypeError as exc:
            args.usage_error(f"argument --sweep bandwidth=...: {exc}")
    if key == "accelerator" and (args.accelerator or args.peak_tflops or args.mem_bandwidth):
        args.usage_error(
            "--sweep accelerator=... sets the roofline: drop --accelerator, --peak-tflops and --mem-bandwidth"
        )
    fits = _sweep_fits(args, key, points)
    bar = _Bar(reporter.shows_progress)
    try:
        sweep = api.simulate_sweep(
            args.prefix,
            points,
            topologies,
            _options(args, topologies[0]),
            out_prefix=args.out,
            work_dir=args.work_dir,
            on_point=lambda p: _point_done(reporter, bar, p, fits),
            progress=bar.progress if args.jobs == 1 and not args.ray else None,
            compact=args.compact,
            key=key,
            jobs=args.jobs,
            ray=args.ray,
            exact=args.exact,
            json_output=None if args.json in (None, "-") else args.json,
            ranks_as=args.ranks_as,
        )
    finally:
        bar.close()
    said_imbalance(reporter, args.prefix, args.ranks_as)
    if args.json == "-":
        print(json.dumps(sweep.as_json(), indent=2))
    else:
        print(sweep.table(), end="")
    for value, fit in fits.items():  # the points that would not run: their ranks do not fit
        if fit is not None and fit.too_big:
            print(f"{key}={value}: {fit.line()}")
    for note in sweep.notes:
        reporter.warning(note)
    also = "" if args.json in (None, "-") else f" (and the JSON to {args.json})"
    reporter.info(f"wrote {sweep.table_path}, {sweep.plot_path} and {sweep.json_path}{also}")
    return 0


def said_imbalance(reporter: Reporter, prefix: str, ranks_as: str) -> None:
    """Where the job's ranks differ in compute, one line saying so (``simulate`` says it in its
    result's warnings; a sweep and ``scale`` here)."""
    found = api.rank_imbalance(prefix)
    if found.notable:
        said = found.describe()
        reporter.warning(said if ranks_as == "captured" else f"{said.split(';')[0]} (`ranks_as` {ranks_as})")


def _sweep_fits(args: argparse.Namespace, key: str, points: list[str]) -> dict[str, Fit | None]:
    """Per swept value, whether the job's ranks fit in memory there (``memory/fit.py``): checked
    before any simulation, so that ``--gpu-memory`` on a job without memory files fails first."""
    if args.gpu_memory is None and args.accelerator is None and key != "accelerator":
        return {}
    return {
        value: job_fit(
            args.prefix,
            value if key == "accelerator" else args.accelerator,
            args.gpu_memory,
            int(value) if key == "ranks" else None,
        )
        for value in points
    }


def _point_done(
    reporter: Reporter, bar: _Bar, point: api.SweepPoint, fits: dict[str, Fit | None] | None = None
) -> None:
    bar.close()
    what = f"{point.ranks:>5} ranks" if not point.value or point.value == str(point.ranks) else point.value
    fit = (fits or {}).get(point.value or str(point.ranks))
    reporter.info(
        f"{what} on {point.network}: step {point.step_ns / 1e6:,.2f} ms, communication "
        f"{point.comm_share:.1%}, simulated in {point.seconds:.1f} s (scaled in {point.scale_seconds:.1f} s)"
        + (f"; ran {point.simulated_as}" if point.simulated_ranks not in (0, point.ranks) else "")
        + (f"; DOES NOT FIT: {len(fit.too_big)} rank(s) over memory" if fit is not None and fit.too_big else "")
    )
    if point.warning:
        reporter.warning(f"{point.ranks:,} ranks on {point.network}: {point.warning}")


class _Bar:
    """Nodes simulated (of an estimate), with the ranks finished and the simulated time so far."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._bar: Any = None

    @property
    def progress(self) -> Callable[[api.SimulationProgress], None] | None:
        """None where no bar is shown (the job's nodes are then not even counted)."""
        return self.update if self.enabled else None

    def update(self, p: api.SimulationProgress) -> None:
        if self._bar is None:
            self._bar = tqdm(
                total=p.nodes_total, desc="simulate", unit="node", unit_scale=True, file=sys.stderr, leave=False
            )
        self._bar.total = max(self._bar.total or 0, p.nodes_total)
        self._bar.set_postfix_str(
            f"{p.ranks_finished}/{p.ranks} ranks finished, at {p.simulated_ns / 1e6:,.1f} ms", refresh=False
        )
        self._bar.update(p.nodes_done - self._bar.n)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


def shown_ranks(ranks: list[api.RankResult], slowest: api.RankResult) -> list[api.RankResult]:
    """Every rank up to 16; past that the first eight, and the slowest where it is not among them."""
    if len(ranks) <= _SHOWN_RANKS:
        return ranks
    first = ranks[:8]
    return first if slowest in first else [*first, slowest]


def _stands_for(plan: api.SimulationPlan) -> str:
    k = plan.captured
    if plan.mesh is not None:  # a layout job's block: rows named as in the N-rank job
        return (
            f"each row is the rank of the {plan.ranks:,} at its place (p, d, t) of the mesh, standing for every rank "
            f"of the same p and t whose d is the same modulo the captured data-parallel degree"
        )
    return f"each simulated rank r is captured rank r mod {k}, as is every rank r mod {k} + {k}j of the {plan.ranks:,}"


def result_lines(result: api.SimulationResult) -> list[str]:
    """The result for people: a row per rank (the first ones and the slowest past 16 ranks), the job's step."""
    net = result.network
    links = ", ".join(f"{b:g} GB/s {lat:g} ns" for b, lat in zip(net.bandwidth, net.latency, strict=True))
    system = result.setup.system if result.setup is not None else {}
    compute = (
        "traced durations" + (" (replay-only)" if result.replay else "")
        if result.roofline is None
        else (
            f"roofline {result.roofline.name}: {result.roofline.peak_tflops:g} TFLOPS, "
            f"{result.roofline.mem_bandwidth_gbps:g} GB/s"
        )
    )
    if result.roofline is None and system.get("roofline-enabled") and not result.replay:
        compute = f"roofline of the system config: {system.get('peak-perf')} TFLOPS, {system.get('local-mem-bw')} GB/s"
    plan = result.plan
    lines = [
        f"{result.prefix}: {result.modelled_ranks:,} rank(s) on {net.name} ({links}), "
        f"congestion-{result.backend}, compute: {compute}; simulated in {result.seconds:.1f} s",
        *([f"ran: {plan.describe()}"] if plan is not None else []),
        *([_stands_for(plan)] if plan is not None and plan.reduced else []),
        *([f"configs: {result.setup.describe()}"] if result.setup is not None and result.setup.describe() else []),
        f"{'rank':>6} {'step (ms)':>12} {'comm (ms)':>11} {'transfer':>10} {'waiting':>10} "
        f"{'exposed comm (ms)':>18} {'collectives':>11} {'send/recv':>9} {'nodes':>9}",
    ]
    slowest = result.slowest
    shown = shown_ranks(result.ranks, slowest)
    for r in shown:
        mark = "  (slowest)" if r is slowest and len(result.ranks) > 1 else ""
        lines.append(
            f"{r.rank:>6} {r.step_ns / 1e6:>12,.3f} {r.comm_ns / 1e6:>11,.3f} {r.transfer_ns / 1e6:>10,.3f} "
            f"{r.waiting_ns / 1e6:>10,.3f} {r.exposed_comm_ns / 1e6:>18,.3f} {r.collectives:>11,} "
            f"{f'{r.sends}/{r.recvs}':>9} {r.nodes:>9,}{mark}"
        )
    if len(shown) < len(result.ranks):
        steps = [r.step_ns / 1e6 for r in result.ranks]
        lines.append(
            f"  ... {len(result.ranks) - len(shown):,} more; step per rank min / median / max: "
            f"{min(steps):,.3f} / {statistics.median(steps):,.3f} / {max(steps):,.3f} ms"
        )
    lines.append(
        "  (comm = transfer + waiting: a collective waits until the last rank of its group issues it; "
        "docs/simulating.md)"
    )
    share = slowest.comm_busy_ns / slowest.step_ns if slowest.step_ns else 0.0
    lines.append(
        f"job step: {result.step_ns / 1e6:,.3f} ms (rank {slowest.rank}, the slowest); communication "
        f"{slowest.comm_busy_ns / 1e6:,.3f} ms of it ({share:.1%}), exposed "
        f"{slowest.exposed_comm_ns / 1e6:,.3f} ms"
    )
    return lines + replay_lines(result)


def replay_lines(result: api.SimulationResult) -> list[str]:
    """Simulated against measured, where the files record a measured step (Kineto conversions, and
    the host path's with ``--astra-sim``) or the user gave one: the untraced step where the profiler's
    time was taken out and the conversion knew it (the traced one beside it), else the traced step,
    with a line saying what that error is (``simulate/measured.py``)."""
    measured = result.measured
    job = steps.job_measured(measured)
    said = steps.note(measured, result.roofline is not None)
    if job is None or not job.ns:  # nothing to hold it against: said of a replay only (not of a what-if)
        return [said] if said and result.replay else []
    word = "error" if result.roofline is None else "difference"  # a what-if is not a replay: no error
    kind = job.kind
    said_traced = job.recorded is not None and job.recorded.baseline is not None  # else a file from before notes
    header = {
        steps.TRACED: "traced (ms)" if said_traced else "measured (ms)",
        steps.UNTRACED: "untraced (ms)",
        steps.YOURS: "yours (ms)",
    }
    beside = kind != steps.TRACED and any(m.traced_ns for m in measured.values())
    lines = [
        f"{'rank':>6} {header[kind]:>14}" + (f" {'traced (ms)':>12}" if beside else "") + f" {'simulated (ms)':>15} "
        f"{word:>10}"
    ]
    for r in result.ranks:
        m = measured.get(r.rank)
        if m is None or not m.ns:
            continue
        traced = f" {m.traced_ns / 1e6:>12,.3f}" if m.traced_ns else f" {'-':>12}"
        lines.append(
            f"{r.rank:>6} {m.ns / 1e6:>14,.3f}"
            + (traced if beside else "")
            + f" {r.step_ns / 1e6:>15,.3f} {(r.step_ns - m.ns) / m.ns:>+10.2%}"
        )
    if said:
        lines.append(said)
    lines.append(
        f"measured step: {job.ns / 1e6:,.3f} ms{_measured_is(job)}; simulated {result.step_ns / 1e6:,.3f} ms; "
        f"{word} {(result.step_ns - job.ns) / job.ns:+.2%}"
        + ("" if result.roofline is None or kind != steps.TRACED else " (a what-if against the traced step)")
    )
    return lines


def _measured_is(m: steps.Measured) -> str:
    """What the job's measured step is, in words (after its figure)."""
    b = m.recorded.baseline if m.recorded is not None else None
    traced = f"; traced {m.traced_ns / 1e6:,.3f} ms ({steps.traced_said(m)})" if m.traced_ns else ""
    if m.kind == steps.YOURS:
        return f", yours (--measured-ms){traced}"
    if m.kind == steps.UNTRACED:
        where = f", {b.calibration}" if b is not None and b.calibration else ""
        return f", untraced (the median of the untraced steps chakra-profile timed in the same run{where}){traced}"
    if b is not None and not b.removed:
        untraced = f"; untraced {m.untraced_ns / 1e6:,.3f} ms" if m.untraced_ns else ""
        return (
            f", traced ({steps.traced_said(m)}: the right comparison, --tracing-overhead none kept the traced "
            f"durations){untraced}"
        )
    return f" ({steps.traced_said(m)})"

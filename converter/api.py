"""Typed entry points: everything the command line does, as functions.

* ``convert``: one merged or host trace -> ``.et`` (byte-identical to ``chakra_converter`` by default);
* ``convert_pair``: a host trace and its Kineto trace, linked and converted in one process;
* ``link``: host + Kineto -> the merged JSON ``chakra_trace_link`` writes;
* ``convert_all``: every rank found in a directory, in parallel processes;
* ``repair``: the last complete JSON object of a host trace that holds several;
* ``check``: ``.et`` files (ours or anyone's) read back and checked against what ASTRA-sim accepts;
* ``scale``: a captured job written as a data-parallel job of N ranks;
* ``simulate``: a job run in ASTRA-sim, its logs read into one result (and sweeps of scaled jobs);
* ``text``: an ASTRA-sim 1.0 text workload -> a ``.et`` file per NPU (``chakra_converter Text``);
* ``jsonize``, ``visualize``, ``generate``: mlc-chakra's other tools (``chakra_jsonizer``,
  ``chakra_visualizer``, ``chakra_generator``) without it.

Every function raises a ``ConverterError`` subclass on input it cannot handle or an output it
cannot write (``OutputError``: checked before any work, and every ``OSError`` of writing) and then
leaves no output behind (``convert_all`` reports failing ranks in its result instead). Every
function checks its arguments first (``arguments``: the values the command line refuses, it
refuses too): a wrong type is a ``TypeError``, a value that cannot apply an ``OptionError``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import re
from collections.abc import Callable, Sequence
from typing import Any

from . import arguments as _args
from ._types import Progress
from .check.rules import CheckReport
from .check.rules import check as _check
from .compact.rewrite import CompactResult
from .compact.rewrite import compact_file as _compact_file
from .compact.rewrite import compact_ranks as _compact_ranks
from .compare import Comparison
from .compare import compare as _compare
from .compare.plot import comparison_png
from .convert.pipeline import HOST_TIMES, TARGETS, ConversionResult, ConvertOptions, RemovedEdge, convert_file
from .convert.roofline import RooflineSummary
from .devices.profile import DeviceProfile
from .devices.profile import resolve as resolve_profile
from .errors import (
    ConverterError,
    CyclicDependencyError,
    JobCheckError,
    OptionError,
    OutputError,
    SimulatorError,
    TraceContentError,
    TraceFormatError,
    UnsupportedSchemaError,
)
from .et.decode import read_et
from .io.output import check_output
from .kineto import DEPENDENCY_KINDS, KinetoConversion
from .kineto import convert_kineto as _convert_kineto
from .link.pipeline import LinkResult
from .link.pipeline import link as _link
from .link.steps import ALL_STEPS, StepChoice, StepSelection
from .memory.fit import job_fit
from .ranks import commgroups
from .ranks import imbalance as _imbalance
from .ranks.commgroups import CommGroups
from .ranks.convert_all import MultiRankResult, RankOutcome
from .ranks.convert_all import convert_all as _convert_all
from .ranks.discover import job_rank_files as _discover_ranks
from .ranks.discover import trace_kind
from .ranks.fullsize import recorded_size
from .ranks.imbalance import RANKS_AS
from .ranks.imbalance import Imbalance as RankImbalance
from .ranks.jobsize import host_job_options
from .ranks.pair import PairResult
from .ranks.pair import convert_pair as _convert_pair
from .ranks.scale import ScaleResult
from .ranks.scale import scale as _scale
from .repair import RepairResult
from .repair import repair as _repair
from .schema.opcost import Cost, op_cost
from .simulate.configs import ACCELERATORS, Accelerator, Network
from .simulate.job import find_job
from .simulate.optioncheck import checked as _check_simulate_options
from .simulate.outputs import Outputs, inputs_of
from .simulate.plot import pyplot
from .simulate.reduced import Plan as SimulationPlan
from .simulate.run import Progress as SimulationProgress
from .simulate.run import RankResult, SimulateOptions, SimulationResult, simulate_prefix
from .simulate.sweep import KEYS as SWEEP_KEYS
from .simulate.sweep import SweepPoint, SweepResult
from .simulate.sweep import sweep as _sweep
from .simulate.width import simulate_width as _simulate_width
from .text.convert import MAX_NPUS as MAX_TEXT_NPUS
from .text.convert import MAX_PASSES, TextResult
from .text.convert import convert_text as _convert_text
from .tools.generate import BENCHMARKS as GENERATED_BENCHMARKS
from .tools.generate import GenerateOptions, GenerateResult
from .tools.generate import generate as _generate
from .tools.jsonize import LAYOUTS as JSON_LAYOUTS
from .tools.jsonize import JsonizeResult
from .tools.jsonize import jsonize as _jsonize
from .tools.visualize import MAX_DEPTH, MAX_NODE_ID, VisualizeResult
from .tools.visualize import Cut as GraphCut
from .tools.visualize import visualize as _visualize

PathArg = str | os.PathLike[str]

#: The public API: the package (``chakra_convert_fast.converter``) exports exactly these names.
__all__ = [
    "ACCELERATORS",
    "ALL_STEPS",
    "DEPENDENCY_KINDS",
    "GENERATED_BENCHMARKS",
    "HOST_TIMES",
    "RANKS_AS",
    "TARGETS",
    "Accelerator",
    "CheckReport",
    "CommGroups",
    "CompactResult",
    "Comparison",
    "ConversionResult",
    "ConvertOptions",
    "ConverterError",
    "Cost",
    "CyclicDependencyError",
    "GenerateOptions",
    "GenerateResult",
    "GraphCut",
    "JobCheckError",
    "JsonizeResult",
    "KinetoConversion",
    "LinkResult",
    "MultiRankResult",
    "Network",
    "OptionError",
    "OutputError",
    "PairResult",
    "PathArg",
    "Progress",
    "RankImbalance",
    "RankOutcome",
    "RankResult",
    "RemovedEdge",
    "RepairResult",
    "RooflineSummary",
    "ScaleResult",
    "SimulateOptions",
    "SimulationPlan",
    "SimulationProgress",
    "SimulationResult",
    "SimulatorError",
    "StepChoice",
    "StepSelection",
    "SweepPoint",
    "SweepResult",
    "TextResult",
    "TraceContentError",
    "TraceFormatError",
    "UnsupportedSchemaError",
    "VisualizeResult",
    "check",
    "comm_group_path",
    "compact",
    "compact_ranks",
    "compare",
    "convert",
    "convert_all",
    "convert_kineto",
    "convert_pair",
    "find_comm_groups",
    "generate",
    "is_kineto_trace",
    "jsonize",
    "link",
    "op_cost",
    "rank_imbalance",
    "repair",
    "roofline_cost",
    "scale",
    "simulate",
    "simulate_sweep",
    "text",
    "visualize",
    "write_comm_groups",
]


def convert(
    input_path: PathArg,
    output_path: PathArg,
    options: ConvertOptions | None = None,
    *,
    progress: Progress | None = None,
) -> ConversionResult:
    """Convert a merged (or host) trace, ``.json`` or ``.json.gz``, into a Chakra ``.et`` file.
    With ``astra_sim``, the job the trace records (its default group's size, its process groups)
    goes into the GlobalMetadata record, with ``rank`` where given (``docs/jobs-from-traces.md``)."""
    source = _args.path("input_path", input_path)
    checked = _args.instance("options", options, ConvertOptions, ConvertOptions)
    return convert_file(
        source,
        _args.path("output_path", output_path),
        host_job_options(checked, source),
        _args.function("progress", progress),
    )


def is_kineto_trace(path: PathArg) -> bool:
    """Whether ``path`` is a Kineto (Chrome JSON) trace rather than a host or merged trace (the
    top-level keys are read up to the first big array). Unreadable files raise ``ConverterError``."""
    return trace_kind(_args.path("path", path)) == "device"


def convert_kineto(
    input_path: PathArg,
    output_path: PathArg,
    *,
    step: int | None = None,
    rank: int | None = None,
    drop: Sequence[str] = (),
    roofline: bool = False,
    accelerator: bool = False,
    compact: bool = False,
    serial_streams: bool = False,
    tracing_overhead: str | float = "auto",
    device_profile: PathArg | DeviceProfile | None = None,
    source_profile: PathArg | DeviceProfile | None = None,
) -> KinetoConversion:
    """Convert one ProfilerStep of a Kineto trace (alone, no host trace) into an ASTRA-sim-ready
    ``.et`` (``docs/kineto.md``): ``step`` (default: the last complete one), ``rank`` (default:
    ``distributedInfo``'s), ``drop``: dependency kinds left out (``DEPENDENCY_KINDS``, the ablation);
    ``roofline``: ``num_ops``/``tensor_size`` on the GPU compute nodes from their launching ops'
    recorded shapes (``accelerator``, which needs it: those left without are written as CPU ops);
    ``compact``: the output compacted (``docs/compact.md``); ``serial_streams``: kernels that
    overlapped on several streams keep their traced durations (ASTRA-sim then runs them one after
    another) instead of being written to end when they ended (``docs/kineto.md``);
    ``tracing_overhead``: the profiler's time taken out of the host timeline
    (``docs/overhead.md``): ``"auto"`` (a calibration beside the trace, else the cost a GPU job's
    host trace measures of itself, else the default model),
    ``"none"`` (the traced durations) or microseconds per recorded op; none where a device profile
    re-times the host); ``device_profile`` (a profile file, the name of a shipped one such as ``"h200"``, or a
    ``DeviceProfile``): the what-if, every kernel and host node re-timed for that device
    (``docs/device-profiles.md``; ``source_profile``: the capture's GPU's profile, each kernel's
    traced time scaled by the two)."""
    if _args.flag("accelerator", accelerator) and not _args.flag("roofline", roofline):
        raise OptionError("`accelerator` needs `roofline` (a GPU node without num_ops stops ASTRA-sim's roofline)")
    target = _profile("device_profile", device_profile)
    source = _profile("source_profile", source_profile)
    if source is not None and target is None:
        raise OptionError("`source_profile` scales kernels to the `device_profile`'s device: give `device_profile` too")
    if target is not None and accelerator:
        raise OptionError(
            "`device_profile` times each kernel itself; with `accelerator` ASTRA-sim's roofline would time them "
            "again from the datasheet: drop `accelerator` (simulate the what-if without an accelerator)"
        )
    return _convert_kineto(
        _args.path("input_path", input_path),
        _args.path("output_path", output_path),
        step=_args.whole("step", step, 0, _args.MAX_STEP),
        rank=_args.rank("rank", rank),
        drop=_args.kinds("drop", drop, DEPENDENCY_KINDS),
        roofline=roofline,
        accelerator=accelerator,
        compact=_args.flag("compact", compact),
        serial_streams=_args.flag("serial_streams", serial_streams),
        tracing_overhead=_args.tracing_overhead("tracing_overhead", tracing_overhead),
        device_profile=target,
        source_profile=source,
    )


def _profile(name: str, value: PathArg | DeviceProfile | None) -> DeviceProfile | None:
    """A device profile argument: None, a ``DeviceProfile``, a file or a shipped profile's name."""
    if value is None or isinstance(value, DeviceProfile):
        return value
    path = _args.path(name, value)
    return resolve_profile(os.fspath(path))


def convert_pair(
    host_path: PathArg,
    device_path: PathArg,
    output_path: PathArg,
    options: ConvertOptions | None = None,
    *,
    rank: int | None = None,
    keep_merged: PathArg | None = None,
    allow_mismatch: bool = False,
    progress: Progress | None = None,
    steps: StepChoice = None,
) -> PairResult:
    """Link a host trace with its Kineto trace and convert the result; ``keep_merged`` also writes
    the merged JSON. ``rank`` is checked against the Kineto trace's; a pair that does not belong
    together is refused unless ``allow_mismatch``. ``steps``: the ProfilerSteps to convert (None:
    those the Kineto trace covers; N: ProfilerStep#N; ``"all"``: every one)."""
    return _convert_pair(
        _args.path("host_path", host_path),
        _args.path("device_path", device_path),
        _args.path("output_path", output_path),
        _args.instance("options", options, ConvertOptions, ConvertOptions),
        rank=_args.rank("rank", rank),
        keep_merged=_args.path("keep_merged", keep_merged, optional=True),
        allow_mismatch=_args.flag("allow_mismatch", allow_mismatch),
        progress=_args.function("progress", progress),
        steps=_steps("steps", steps),
    )


def link(
    host_path: PathArg,
    device_path: PathArg,
    output_path: PathArg | None,
    *,
    rank: int | None = None,
    allow_mismatch: bool = False,
    steps: StepChoice = None,
) -> LinkResult:
    """Write the merged trace ``chakra_trace_link`` writes for this pair (``.gz`` output is gzipped);
    with ``output_path`` None, only link and check the pair. ``steps``: as ``convert_pair``."""
    return _link(
        _args.path("host_path", host_path),
        _args.path("device_path", device_path),
        _args.path("output_path", output_path, optional=True),
        rank=_args.rank("rank", rank),
        allow_mismatch=_args.flag("allow_mismatch", allow_mismatch),
        steps=_steps("steps", steps),
    )


def convert_all(
    directory: PathArg,
    output_dir: PathArg,
    options: ConvertOptions | None = None,
    *,
    jobs: int | None = None,
    prefix: str | None = None,
    allow_mismatch: bool = False,
    on_rank_done: Callable[[RankOutcome], None] | None = None,
    ray_address: str | None = None,
    step: int | None = None,
) -> MultiRankResult:
    """Link and convert every rank in ``directory`` into ``output_dir/<prefix>.<rank>.et`` (``prefix``
    None: the capture's name, from its files' names, else ``trace``), ``jobs`` ranks at a time
    (or each a task on the Ray cluster at ``ray_address``, "auto" for the local one),
    and write ``<prefix>.comm_group.json``; failing ranks are reported, not raised. A directory of
    Kineto traces alone is converted by the Kineto front end (``step``: ProfilerStep#N, default each
    trace's last complete one)."""
    return _convert_all(
        _args.path("directory", directory),
        _args.path("output_dir", output_dir),
        _args.instance("options", options, ConvertOptions, ConvertOptions),
        jobs=_args.jobs("jobs", jobs),
        prefix=_args.text("prefix", prefix),
        allow_mismatch=_args.flag("allow_mismatch", allow_mismatch),
        on_rank_done=_args.function("on_rank_done", on_rank_done),
        ray_address=_args.text("ray_address", ray_address),
        step=_args.whole("step", step, 0, _args.MAX_STEP),
    )


def write_comm_groups(device_traces: Sequence[PathArg], output_path: PathArg) -> CommGroups:
    """Write ASTRA-sim's communicator group file for a job from its ranks' Kineto traces."""
    return commgroups.write_for_job(_args.paths("device_traces", device_traces), _args.path("output_path", output_path))


def repair(input_path: PathArg, output_path: PathArg) -> RepairResult:
    """Keep the last complete JSON object of a file that holds several (``.gz`` output is gzipped)."""
    return _repair(_args.path("input_path", input_path), _args.path("output_path", output_path))


def check(paths: PathArg | Sequence[PathArg], comm_groups: PathArg | None = None) -> CheckReport:
    """Read ``.et`` files (one per rank, ``<prefix>.<rank>.et``; one path alone is one file) and
    check them, with the communicator groups of ``comm_groups`` (``{"<id>": [ranks]}``), against
    ASTRA-sim. Without ``comm_groups``, files of one prefix use that job's group file if there is
    one (``PREFIX.comm_group.json``, else ``comm_group.json`` beside them): ``report.comm_group_path``."""
    files = _args.paths("paths", paths)
    given = _args.path("comm_groups", comm_groups, optional=True)
    traces = [read_et(path) for path in files]
    group_path = given if given is not None else _job_comm_groups(files)
    report = _check(
        traces,
        None
        if group_path is None
        else commgroups.read(
            group_path, "`comm_groups`" if given is not None else "communicator group file", check_ids=False
        ),
    )  # check reports bad ids among its problems
    report.comm_group_path = group_path
    return report


def _job_comm_groups(paths: Sequence[str]) -> str | None:
    """The group file of the job ``PREFIX.<rank>.et`` when every path is a rank of one prefix."""
    prefixes = {m.group(1) if m else None for m in (re.fullmatch(r"(.+)\.[0-9]+\.et", p) for p in paths)}
    prefix = prefixes.pop() if len(prefixes) == 1 else None
    return None if prefix is None else commgroups.find(prefix)


# -- scale --


def scale(
    in_prefix: PathArg,
    out_prefix: PathArg,
    ranks: int | None = None,
    *,
    progress: Progress | None = None,
    compact: bool = False,
    ranks_as: str = "captured",
    layout: str | None = None,
    expert_load: str | float | None = None,
) -> ScaleResult:
    """Write the captured job ``IN_PREFIX.<k>.et`` (k < K, ``--astra-sim`` output, with its
    communicator group file) as a data-parallel job of ``ranks`` ranks: ``OUT_PREFIX.<r>.et`` is
    captured rank r mod K (its bytes kept, a sub-group's ``pg_name`` renamed per copy of the job)
    and ``OUT_PREFIX.comm_group.json`` the new job's groups; all of them or nothing is written.
    ``progress("ranks", done, ranks)`` is called after each rank written. ``compact`` writes
    every rank compacted (see ``compact``). ``ranks`` None: the job's own size, as its rank 0
    records it (``world_size``, written by a conversion with ``astra_sim`` of traces that hold it).
    ``ranks_as`` "slowest" or "median": every captured rank first given that rank's compute (see
    ``simulate``; ``rank_imbalance`` says how the captured ranks differ). ``layout``: the job's
    parallel layout where its trace cannot tell (``"fsdp"``, ``"ddp,tp=2"``, ``"fsdp,tp=2,pp=2"``);
    None: its layout file, else what its collectives show (FSDP or DDP), refused when they do not
    settle it (``docs/jobs-from-traces.md``). ``expert_load``: an expert-parallel job's routing at
    the new size (``"captured"``, the default: each expert's share of the captured run's rows;
    ``"balanced"``; or the busiest rank's rows over the mean, a number >= 1), refused for other
    jobs (``docs/expert-parallel.md``)."""
    how = _args.choice("ranks_as", ranks_as, RANKS_AS)
    spec = _args.text("layout", layout)
    numeric = isinstance(expert_load, int | float) and not isinstance(expert_load, bool)
    load = str(expert_load) if numeric else _args.text("expert_load", expert_load)
    source: str = _args.path("in_prefix", in_prefix)
    args = (
        _args.path("out_prefix", out_prefix),
        _args.whole("ranks", ranks, 1, _args.MAX_RANKS),
    )
    progress = _args.function("progress", progress)
    compact = _args.flag("compact", compact)
    if how == "captured":
        return _scale(source, *args, progress=progress, compact=compact, layout=spec, expert_load=load)
    captured = [*_discover_ranks(source), *filter(None, [commgroups.find(source)])]
    for rank in range(len(captured)):  # the copy is what is read: the captured files must not be written
        check_output(f"{args[0]}.{rank}.et", *captured)
    check_output(commgroups.path_for(args[0]), *captured)
    with _imbalance.ranks_as(source, how) as evened:
        result = _scale(evened.prefix, *args, progress=progress, compact=compact, layout=spec, expert_load=load)
    return dataclasses.replace(result, in_prefix=source)


def comm_group_path(prefix: PathArg) -> str:
    """Where the communicator group file of the job ``PREFIX.<rank>.et`` goes: ``PREFIX.comm_group.json``."""
    return commgroups.path_for(_args.path("prefix", prefix))


def find_comm_groups(prefix: PathArg) -> str | None:
    """The communicator group file of the job ``PREFIX.<rank>.et``: ``PREFIX.comm_group.json``, else the
    old ``comm_group.json`` in the same folder, else None."""
    return commgroups.find(_args.path("prefix", prefix))


# -- simulate --


def simulate(
    prefix: PathArg,
    options: SimulateOptions | None = None,
    *,
    timeline: PathArg | None = None,
    json_output: PathArg | None = None,
    progress: Callable[[SimulationProgress], None] | None = None,
    ranks: int | None = None,
    exact: bool = False,
    compact: bool = False,
    work_dir: PathArg | None = None,
    gpu_memory: int | None = None,
    ranks_as: str = "captured",
    measured_ms: float | None = None,
) -> SimulationResult:
    """Run the job ``PREFIX.<rank>.et`` (ranks 0..N-1, its communicator groups beside it) in
    ASTRA-sim on the network of ``options`` and read the result from its log: per rank the
    simulated step, communication and exposed communication (ns), the job's step (the slowest
    rank's). A rank that does not finish is a ``SimulatorError`` naming it and the first node
    ASTRA-sim dropped. ``timeline`` writes a Chrome/Perfetto trace of the run, ``json_output``
    the result as JSON: checked against every input and each other before anything runs, and
    written together (both or neither) only when the run succeeded (``simulate/outputs.py``).

    ``ranks`` runs the job as a data-parallel job of that many ranks (a multiple of the captured
    ones): on an equivalent reduced job where one is proven (docs/reduced.md), else on the full
    job written in a temporary folder (``work_dir``; ``compact``: each rank compacted);
    ``exact`` always runs the full job. ``result.plan`` says which ran, and why. Without
    ``ranks``, a job with fewer rank files than its recorded size (``world_size``: traced on rank 0
    alone) runs at that size, and a warning says so.

    ``gpu_memory`` (bytes), or the accelerator of ``options``: whether each rank's peak memory
    fits (``result.memory``, from the job's memory files, docs/memory.md); ``gpu_memory`` on a
    job without them is refused before anything runs.

    Where the captured ranks differ in compute (``rank_imbalance``), a warning says so, with how much
    of the step the most waiting rank waits for peers; ``ranks_as`` "slowest" or "median" replays
    every rank with that rank's compute (a temporary copy of the job, in ``work_dir``;
    docs/simulating.md), "captured" (default) as captured.

    ``result.measured`` is, per rank, the step the replay is held against (docs/overhead.md): the
    untraced step of the same run where the conversion took the profiler's time out and its
    calibration was beside the trace, else the traced step the file records; ``measured_ms``, the
    job's step as you measured it (milliseconds, untraced), is held against every rank instead."""
    job: str = _args.path("prefix", prefix)
    yours = _args.number("measured_ms", measured_ms, positive=True)
    how = _args.choice("ranks_as", ranks_as, RANKS_AS)
    checked = _simulate_options(options)
    gpu_memory = _args.whole("gpu_memory", gpu_memory, 1, 1 << 60)
    timeline_path: str | None = _args.path("timeline", timeline, optional=True)
    json_path: str | None = _args.path("json_output", json_output, optional=True)
    progress = _args.function("progress", progress)
    ranks = _args.whole("ranks", ranks, 1, _args.MAX_RANKS)
    folder: str | None = _args.path("work_dir", work_dir, optional=True)
    _args.only_with(
        [
            ("work_dir", folder is not None),
            ("compact", _args.flag("compact", compact)),
            ("exact", _args.flag("exact", exact)),
        ],
        "with `ranks` (or in a sweep)",
        ranks is not None or (how != "captured" and not compact and not exact),
    )
    outputs = Outputs.check(  # against every input and each other, before anything runs
        [("`timeline`", timeline_path), ("`json_output`", json_path)],
        inputs_of(find_job(job, checked.comm_groups), checked),
        checked.timeout,
    )
    fits = job_fit(job, checked.accelerator, gpu_memory, ranks)
    with outputs, contextlib.ExitStack() as stack:  # every output, or none
        evened = None
        if how != "captured":
            evened = stack.enter_context(_imbalance.ranks_as(job, how, folder))
        captured_job, job = job, job if evened is None else evened.prefix
        note = None
        if ranks is None:
            ranks, note = recorded_size(job)
        with outputs.text(timeline_path) as timeline_file:
            if ranks is not None:
                result = _simulate_width(
                    job,
                    ranks,
                    checked,
                    exact=exact,
                    compact=compact,
                    work_dir=folder,
                    timeline=timeline_file,
                    progress=progress,
                )
            else:
                result = simulate_prefix(job, checked, timeline=timeline_file, progress=progress)
        result = dataclasses.replace(
            result,
            timeline=timeline_path,
            prefix=captured_job,
            yours_ns=None if yours is None else round(yours * 1e6),
        )
        if note is not None:
            result = dataclasses.replace(result, warnings=[note, *result.warnings])
        if fits is not None:
            result = dataclasses.replace(result, memory={**fits.as_json(), "line": fits.line()})
        result = _said_imbalance(result, captured_job, evened)
        outputs.put(json_path, (json.dumps(result.as_json(), indent=2) + "\n").encode())
        outputs.commit()
    return result


def compare(
    a: PathArg,
    b: PathArg,
    *,
    step: int | None = None,
    rank: int | None = None,
    json_output: PathArg | None = None,
    plot: PathArg | None = None,
) -> Comparison:
    """Where the time of two runs of a job went differently (docs/compare.md): each of ``a`` and
    ``b`` a Kineto trace (a file, or a folder of one per rank) or a simulated run (the timeline
    ``simulate`` writes); per rank, per lane (stream), per op class and per op. ``step``: the
    traces' ProfilerStep (default: the last complete one); ``rank``: the rank whose lanes, classes
    and ops are compared (default: each side's slowest). ``json_output`` and ``plot`` (a PNG: the
    ``plot`` extra) are written together, or neither, and never over an input."""
    first: str = _args.path("a", a)
    second: str = _args.path("b", b)
    json_path: str | None = _args.path("json_output", json_output, optional=True)
    plot_path: str | None = _args.path("plot", plot, optional=True)
    inputs = [p for side in (first, second) for p in _compare_inputs(side)]
    outputs = Outputs.check([("`json_output`", json_path), ("`plot`", plot_path)], inputs)
    with outputs:
        if plot_path is not None:  # the plot extra, before any work
            try:
                pyplot()
            except ConverterError:
                raise ConverterError("`plot` needs matplotlib: pip install 'chakra-convert-fast[plot]'") from None
        result = _compare(first, second, step=_args.whole("step", step, 0), rank=_args.rank("rank", rank))
        outputs.put(json_path, (json.dumps(result.as_json(), indent=2) + "\n").encode())
        if plot_path is not None:
            outputs.put(plot_path, comparison_png(result))
        outputs.commit()
    return result


def _compare_inputs(path: str) -> list[str]:
    if os.path.isdir(path):
        return [os.path.join(path, name) for name in sorted(os.listdir(path))]
    return [path]


def rank_imbalance(prefix: PathArg) -> RankImbalance:
    """How the ranks of the job ``PREFIX.<rank>.et`` differ in compute (each rank's compute
    nodes' summed duration; docs/simulating.md)."""
    job: str = _args.path("prefix", prefix)
    return _imbalance.measure(_discover_ranks(job), job)


def _said_imbalance(result: SimulationResult, prefix: str, evened: _imbalance.RanksAs | None) -> SimulationResult:
    """The result with a warning where its captured ranks differ in compute and, simulated, a rank
    waits 5% or more of its step for its peers (up to 256 ranks read)."""
    paths = _discover_ranks(prefix)
    if evened is not None:
        found = evened.imbalance
    elif 1 < len(paths) <= 256:
        found = _imbalance.measure(paths, prefix)
    else:
        return result
    notes = [evened.describe()] if evened is not None else []
    waiting = max(result.ranks, key=lambda r: (r.waiting_ns, -r.rank))
    most = (waiting.rank, waiting.waiting_ns, waiting.step_ns)
    waits = waiting.step_ns > 0 and waiting.waiting_ns / waiting.step_ns >= _imbalance.NOTABLE
    if found.notable and (waits or evened is not None):  # as captured: said where ranks wait for it
        said = found.describe(most if evened is None else None)
        notes.append(said if evened is None else said.split(";")[0] + " (evened out by `ranks_as`)")
    facts = found.as_json(most, "captured" if evened is None else evened.how, notes)
    return dataclasses.replace(result, warnings=[*result.warnings, *notes], imbalance=facts)


def simulate_sweep(
    prefix: PathArg,
    values: Sequence[int | float | str],
    topologies: Sequence[str],
    options: SimulateOptions | None = None,
    *,
    out_prefix: PathArg | None = None,
    work_dir: PathArg | None = None,
    on_point: Callable[[SweepPoint], None] | None = None,
    progress: Callable[[SimulationProgress], None] | None = None,
    compact: bool = False,
    key: str = "ranks",
    jobs: int = 1,
    ray: str | None = None,
    exact: bool = False,
    json_output: PathArg | None = None,
    ranks_as: str = "captured",
) -> SweepResult:
    """Simulate the job ``PREFIX.<rank>.et`` at each of ``values`` of ``key`` on each topology:
    ``ranks`` (the job scaled to each count with ``scale``, with ``compact`` each rank compacted),
    ``bandwidth`` (GB/s, every link) or ``accelerator`` (a roofline preset); writes ``OUT.md``
    (table), ``OUT.png`` (plot: needs the ``plot`` extra) and ``OUT.json`` (``out_prefix``
    defaults to ``PREFIX.sweep``). ``jobs`` local processes, or the Ray cluster at ``ray``
    ("auto": ``ray.init``'s rule), run the values in parallel; the results are the same. A rank
    count runs on an equivalent reduced job where one is proven (docs/reduced.md), unless ``exact``.
    ``json_output``: the JSON written there too. Every output is checked against every input
    and each other before the first point, and they are written together or not at all; every
    point uses ``options.comm_groups``, scaled ones too. ``ranks_as`` "slowest" or "median": every
    point starts from the job with every rank replayed as that rank (see ``simulate``)."""
    options = _simulate_options(options)
    how = _args.choice("ranks_as", ranks_as, RANKS_AS)
    key = _args.choice("key", key, SWEEP_KEYS)
    _args.only_with([("replay", options.replay)], "for one simulation (a sweep of traced durations is flat)", False)
    jobs = _args.whole("jobs", jobs, 1, optional=False)
    ray = _args.text("ray", ray)
    _args.only_with(
        [("exact", _args.flag("exact", exact)), ("compact", _args.flag("compact", compact))],
        "with `key` 'ranks'",
        key == "ranks",
    )
    _args.only_with([("jobs", jobs != 1)], "for local processes (with `ray` the cluster runs the values)", ray is None)
    _args.only_with(
        [("bandwidth", options.bandwidth is not None)],
        "for one bandwidth (`key` 'bandwidth' sets it)",
        key != "bandwidth",
    )
    roofline = [(name, getattr(options, name) is not None) for name in ("accelerator", "peak_tflops", "mem_bandwidth")]
    _args.only_with(roofline, "for one roofline (`key` 'accelerator' sets it)", key != "accelerator")
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise TypeError(f"values must be a sequence, got {type(values).__name__}")
    if isinstance(topologies, (str, bytes)) or not hasattr(topologies, "__iter__"):
        raise TypeError(f"topologies must be a sequence of str, got {type(topologies).__name__}")
    job: str = _args.path("prefix", prefix)
    out: str | None = _args.path("out_prefix", out_prefix, optional=True)
    folder: str | None = _args.path("work_dir", work_dir, optional=True)
    with contextlib.ExitStack() as stack:
        if how != "captured":
            job_as = stack.enter_context(_imbalance.ranks_as(job, how, folder)).prefix
            out = out or f"{job}.sweep"
        return _sweep_job(
            job if how == "captured" else job_as,
            values,
            topologies,
            options,
            out_prefix=out,
            work_dir=folder,
            on_point=on_point,
            progress=progress,
            compact=compact,
            key=key,
            jobs=jobs,
            ray=ray,
            exact=exact,
            json_output=json_output,
        )


def _sweep_job(
    job: str,
    values: Sequence[int | float | str],
    topologies: Sequence[str],
    options: SimulateOptions,
    *,
    out_prefix: str | None,
    work_dir: str | None,
    on_point: Callable[[SweepPoint], None] | None,
    progress: Callable[[SimulationProgress], None] | None,
    compact: bool,
    key: str,
    jobs: int,
    ray: str | None,
    exact: bool,
    json_output: PathArg | None,
) -> SweepResult:
    return _sweep(
        job,
        list(values),
        [_args.text(f"topologies[{k}]", t, optional=False) for k, t in enumerate(topologies)],
        options,
        scale=functools.partial(_scale_point, compact=compact),
        out_prefix=out_prefix,
        work_dir=work_dir,
        on_point=_args.function("on_point", on_point),
        progress=_args.function("progress", progress),
        scale_capture=compact,
        key=key,
        jobs=jobs,
        ray=ray,
        exact=exact,
        json_output=_args.path("json_output", json_output, optional=True),
    )


def _simulate_options(options: Any) -> SimulateOptions:
    """The options of ``simulate`` and ``simulate_sweep``; a network file is the whole network."""
    checked = _check_simulate_options(_args.instance("options", options, SimulateOptions, SimulateOptions))
    if checked.network_config is not None:
        given = [
            ("topology", checked.topology != "Ring"),
            *((name, getattr(checked, name) is not None) for name in ("npus_per_dim", "bandwidth", "latency")),
        ]
        _args.only_with(given, "without `network_config` (the whole network)", False)
    return checked


def _scale_point(source: str, target: str, count: int, comm_groups: str | None, *, compact: bool) -> ScaleResult:
    """``scale`` as a sweep's point calls it (a module-level function: a Ray task pickles it)."""
    return _scale(source, target, count, compact=compact, comm_groups=comm_groups)


# -- text workloads (chakra_converter Text) --


def text(
    input_path: PathArg,
    output_prefix: PathArg,
    npus: int,
    passes: int = 1,
    *,
    first_dim: int | None = None,
    progress: Progress | None = None,
) -> TextResult:
    """Convert an ASTRA-sim 1.0 text workload into ``output_prefix.<npu>.et`` for ``npus`` NPUs and
    ``passes`` training passes: ``chakra_converter Text``'s bytes for the types it converts, ASTRA-sim
    1.0's training loops for the ones it refuses (with ``output_prefix.comm_group.json`` where their
    collectives span groups of NPUs; ``first_dim``: NPUs in the network's first dimension, for
    HYBRID_CUSTOMIZED, default all). Every file is written, or none."""
    return _convert_text(
        _args.path("input_path", input_path),
        _args.path("output_prefix", output_prefix),
        _args.whole("npus", npus, 1, MAX_TEXT_NPUS, optional=False),
        _args.whole("passes", passes, 0, MAX_PASSES, optional=False),
        first_dim=_args.whole("first_dim", first_dim, 1, MAX_TEXT_NPUS),
        progress=_args.function("progress", progress),
    )


# -- compact --
def compact(input_path: PathArg, output_path: PathArg, *, progress: Progress | None = None) -> CompactResult:
    """Write ``input_path`` (a ``.et`` ASTRA-sim runs) compacted into ``output_path`` (the same
    path replaces it): redundant dependencies dropped and runs of compute nodes merged, so that
    ASTRA-sim simulates the same time with fewer nodes (docs/compact.md)."""
    return _compact_file(
        _args.path("input_path", input_path),
        _args.path("output_path", output_path),
        _args.function("progress", progress),
    )


def compact_ranks(
    in_prefix: PathArg, out_prefix: PathArg, *, on_rank_done: Callable[[CompactResult], None] | None = None
) -> list[CompactResult]:
    """``compact`` of every rank ``<in_prefix>.<r>.et`` into ``<out_prefix>.<r>.et``, all written
    or none (``on_rank_done`` is called for each once they all are)."""
    return _compact_ranks(
        _args.path("in_prefix", in_prefix),
        _args.path("out_prefix", out_prefix),
        _args.function("on_rank_done", on_rank_done),
    )


# -- tools: jsonize, visualize, generate (mlc-chakra's other tools) --
def jsonize(
    input_path: PathArg,
    output_path: PathArg,
    layout: str = "document",
    progress: Progress | None = None,
    jobs: int | None = None,
) -> JsonizeResult:
    """Write a ``.et`` file as JSON: ``layout`` "document" (one JSON document: globalMetadata and
    a nodes array), "lines" (one object a line) or "chakra" (``chakra_jsonizer``'s exact bytes);
    a large plain file in ``jobs`` processes (default: the CPUs)."""
    return _jsonize(
        _args.path("input_path", input_path),
        _args.path("output_path", output_path),
        _args.choice("layout", layout, JSON_LAYOUTS),
        _args.function("progress", progress),
        _args.jobs("jobs", jobs),
    )


def generate(
    output_dir: PathArg, options: GenerateOptions | None = None, progress: Progress | None = None
) -> GenerateResult:
    """Write ``chakra_generator``'s microbenchmark traces (its bytes) in ``output_dir``."""
    return _generate(
        _args.path("output_dir", output_dir),
        _args.instance("options", options, GenerateOptions, GenerateOptions),
        _args.function("progress", progress),
    )


def visualize(
    input_path: PathArg,
    output_path: PathArg,
    cut: GraphCut | None = None,
    progress: Progress | None = None,
    laid_out: bool = False,
) -> VisualizeResult:
    """Draw a ``.et`` file as ``chakra_visualizer``'s graph, streamed: ``.dot`` or ``.graphml``
    (``.pdf``/``.svg``, and with ``laid_out`` a ``.dot`` as the reference writes it, through
    graphviz's ``dot`` where it is installed); ``cut`` keeps an id range, the neighbourhood of a
    node, or the collectives and what depends on them."""
    return _visualize(
        _args.path("input_path", input_path),
        _args.path("output_path", output_path),
        _cut(cut),
        _args.function("progress", progress),
        laid_out=_args.flag("laid_out", laid_out),
    )


def _cut(cut: Any) -> GraphCut:
    """A ``GraphCut`` whose ids are node ids (uint64) and whose depths are the command line's."""
    checked = _args.instance("cut", cut, GraphCut, GraphCut, called="GraphCut")
    if checked.ids is not None:
        low, high = (_args.whole("cut.ids", i, 0, MAX_NODE_ID, optional=False) for i in _pair("cut.ids", checked.ids))
        if low > high:
            raise OptionError(f"`ids` {low}:{high}: the first id is above the last")
    if checked.around is not None:
        center, depth = _pair("cut.around", checked.around)
        _args.whole("cut.around", center, 0, MAX_NODE_ID, optional=False)
        _args.whole("depth", depth, 0, MAX_DEPTH, optional=False)
    _args.whole("depth", checked.collectives, 0, MAX_DEPTH)
    return checked


def _pair(name: str, value: Any) -> tuple[Any, Any]:
    if not isinstance(value, tuple) or len(value) != 2:
        raise TypeError(f"{name} must be a pair (a tuple of two ints), got {value!r}")
    return value[0], value[1]


# -- roofline --
def roofline_cost(
    name: str, in_shapes: Sequence[Any], in_types: Sequence[Any], out_shapes: Sequence[Any], out_types: Sequence[Any]
) -> Cost:
    """The roofline rules of ``--roofline`` on one op: (class, FLOPs, bytes read + written) from its
    recorded shapes and types (``schema/opcost.py``); raises ``ValueError`` (``BadShapes``) when
    they cannot be read. ``ConvertOptions(roofline=True, target="accelerator")`` writes them."""
    return op_cost(name, in_shapes, in_types, out_shapes, out_types)


def _steps(name: str, value: Any) -> StepChoice:
    if value is None or value == ALL_STEPS:
        return value  # type: ignore[no-any-return]
    if isinstance(value, int) and not isinstance(value, bool):
        return _args.whole(name, value, 0, _args.MAX_STEP)  # type: ignore[no-any-return]
    raise TypeError(f"{name} must be None, a step number or {ALL_STEPS!r}, got {value!r}")

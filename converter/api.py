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
leaves no output behind (``convert_all`` reports failing ranks in its result instead).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import re
from collections.abc import Callable, Sequence
from typing import Any

from ._types import Progress
from .check.rules import CheckReport
from .check.rules import check as _check
from .compact.rewrite import CompactResult
from .compact.rewrite import compact_file as _compact_file
from .compact.rewrite import compact_ranks as _compact_ranks
from .convert.pipeline import HOST_TIMES, TARGETS, ConversionResult, ConvertOptions, RemovedEdge, convert_file
from .convert.roofline import RooflineSummary
from .errors import OptionError, SimulatorError
from .et.decode import read_et
from .io.output import atomic_text_output, check_output
from .kineto import DEPENDENCY_KINDS, KinetoConversion
from .kineto import convert_kineto as _convert_kineto
from .link.pipeline import LinkResult
from .link.pipeline import link as _link
from .link.steps import ALL_STEPS, StepChoice, StepSelection
from .ranks import commgroups
from .ranks.commgroups import CommGroups
from .ranks.convert_all import MultiRankResult, RankOutcome
from .ranks.convert_all import convert_all as _convert_all
from .ranks.discover import trace_kind
from .ranks.fullsize import recorded_size
from .ranks.pair import PairResult
from .ranks.pair import convert_pair as _convert_pair
from .ranks.scale import ScaleResult
from .ranks.scale import scale as _scale
from .repair import RepairResult
from .repair import repair as _repair
from .schema.opcost import Cost, op_cost
from .simulate.configs import ACCELERATORS, Accelerator, Network
from .simulate.reduced import Plan as SimulationPlan
from .simulate.run import Progress as SimulationProgress
from .simulate.run import RankResult, SimulateOptions, SimulationResult, simulate_prefix
from .simulate.sweep import SweepPoint, SweepResult
from .simulate.sweep import sweep as _sweep
from .simulate.width import simulate_width as _simulate_width
from .text.convert import TextResult
from .text.convert import convert_text as _convert_text
from .tools.generate import BENCHMARKS as GENERATED_BENCHMARKS
from .tools.generate import GenerateOptions, GenerateResult
from .tools.generate import generate as _generate
from .tools.jsonize import JsonizeResult
from .tools.jsonize import jsonize as _jsonize
from .tools.visualize import Cut as GraphCut
from .tools.visualize import VisualizeResult
from .tools.visualize import visualize as _visualize

PathArg = str | os.PathLike[str]

__all__ = [
    "ACCELERATORS",
    "ALL_STEPS",
    "DEPENDENCY_KINDS",
    "GENERATED_BENCHMARKS",
    "HOST_TIMES",
    "TARGETS",
    "Accelerator",
    "CheckReport",
    "CommGroups",
    "CompactResult",
    "ConversionResult",
    "ConvertOptions",
    "Cost",
    "GenerateOptions",
    "GenerateResult",
    "GraphCut",
    "JsonizeResult",
    "KinetoConversion",
    "LinkResult",
    "MultiRankResult",
    "Network",
    "PairResult",
    "PathArg",
    "Progress",
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
    "VisualizeResult",
    "check",
    "comm_group_path",
    "compact",
    "compact_ranks",
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
    """Convert a merged (or host) trace, ``.json`` or ``.json.gz``, into a Chakra ``.et`` file."""
    return convert_file(
        _path("input_path", input_path),
        _path("output_path", output_path),
        _options(options),
        _callable("progress", progress),
    )


def is_kineto_trace(path: PathArg) -> bool:
    """Whether ``path`` is a Kineto (Chrome JSON) trace rather than a host or merged trace (the
    top-level keys are read up to the first big array). Unreadable files raise ``ConverterError``."""
    return trace_kind(_path("path", path)) == "device"


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
) -> KinetoConversion:
    """Convert one ProfilerStep of a Kineto trace (alone, no host trace) into an ASTRA-sim-ready
    ``.et`` (``docs/kineto.md``): ``step`` (default: the last complete one), ``rank`` (default:
    ``distributedInfo``'s), ``drop``: dependency kinds left out (``DEPENDENCY_KINDS``, the ablation);
    ``roofline``: ``num_ops``/``tensor_size`` on the GPU compute nodes from their launching ops'
    recorded shapes (``accelerator``, which needs it: those left without are written as CPU ops);
    ``compact``: the output compacted (``docs/compact.md``)."""
    if accelerator and not roofline:
        raise ValueError("accelerator needs roofline (a GPU node without num_ops stops ASTRA-sim's roofline)")
    if step is not None:
        _int("step", step)
    if rank is not None:
        _int("rank", rank)
    kinds = frozenset(drop)
    if not kinds <= set(DEPENDENCY_KINDS):
        raise ValueError(
            f"drop: unknown kinds {sorted(kinds - set(DEPENDENCY_KINDS))}; known: {', '.join(DEPENDENCY_KINDS)}"
        )
    return _convert_kineto(
        _path("input_path", input_path),
        _path("output_path", output_path),
        step=step,
        rank=rank,
        drop=kinds,
        roofline=bool(roofline),
        accelerator=bool(accelerator),
        compact=bool(compact),
    )


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
        _path("host_path", host_path),
        _path("device_path", device_path),
        _path("output_path", output_path),
        _options(options),
        rank=_int("rank", rank),
        keep_merged=_path("keep_merged", keep_merged, optional=True),
        allow_mismatch=_bool("allow_mismatch", allow_mismatch),
        progress=_callable("progress", progress),
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
        _path("host_path", host_path),
        _path("device_path", device_path),
        _path("output_path", output_path, optional=True),
        rank=_int("rank", rank),
        allow_mismatch=_bool("allow_mismatch", allow_mismatch),
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
    if step is not None:
        _int("step", step)
    if prefix is not None and not isinstance(prefix, str):
        raise TypeError(f"prefix must be a str or None, got {type(prefix).__name__}")
    if ray_address is not None and not isinstance(ray_address, str):
        raise TypeError(f"ray_address must be a str or None, got {type(ray_address).__name__}")
    return _convert_all(
        _path("directory", directory),
        _path("output_dir", output_dir),
        _options(options),
        jobs=_jobs("jobs", jobs),
        prefix=prefix,
        allow_mismatch=_bool("allow_mismatch", allow_mismatch),
        on_rank_done=_callable("on_rank_done", on_rank_done),
        ray_address=ray_address,
        step=step,
    )


def write_comm_groups(device_traces: Sequence[PathArg], output_path: PathArg) -> CommGroups:
    """Write ASTRA-sim's communicator group file for a job from its ranks' Kineto traces."""
    return commgroups.write_for_job(_paths("device_traces", device_traces), _path("output_path", output_path))


def repair(input_path: PathArg, output_path: PathArg) -> RepairResult:
    """Keep the last complete JSON object of a file that holds several (``.gz`` output is gzipped)."""
    return _repair(_path("input_path", input_path), _path("output_path", output_path))


def check(paths: PathArg | Sequence[PathArg], comm_groups: PathArg | None = None) -> CheckReport:
    """Read ``.et`` files (one per rank, ``<prefix>.<rank>.et``; one path alone is one file) and
    check them, with the communicator groups of ``comm_groups`` (``{"<id>": [ranks]}``), against
    ASTRA-sim. Without ``comm_groups``, files of one prefix use that job's group file if there is
    one (``PREFIX.comm_group.json``, else ``comm_group.json`` beside them): ``report.comm_group_path``."""
    files = _paths("paths", paths)
    given = _path("comm_groups", comm_groups, optional=True)
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
) -> ScaleResult:
    """Write the captured job ``IN_PREFIX.<k>.et`` (k < K, ``--astra-sim`` output, with its
    communicator group file) as a data-parallel job of ``ranks`` ranks: ``OUT_PREFIX.<r>.et`` is
    captured rank r mod K (its bytes kept, a sub-group's ``pg_name`` renamed per copy of the job)
    and ``OUT_PREFIX.comm_group.json`` the new job's groups; all of them or nothing is written.
    ``progress("ranks", done, ranks)`` is called after each rank written. ``compact`` writes
    every rank compacted (see ``compact``). ``ranks`` None: the job's own size, as its rank 0
    records it (``world_size``, written by a conversion with ``astra_sim`` of traces that hold it)."""
    return _scale(os.fspath(in_prefix), os.fspath(out_prefix), ranks, progress=progress, compact=compact)


def comm_group_path(prefix: PathArg) -> str:
    """Where the communicator group file of the job ``PREFIX.<rank>.et`` goes: ``PREFIX.comm_group.json``."""
    return commgroups.path_for(prefix)


def find_comm_groups(prefix: PathArg) -> str | None:
    """The communicator group file of the job ``PREFIX.<rank>.et``: ``PREFIX.comm_group.json``, else the
    old ``comm_group.json`` in the same folder, else None."""
    return commgroups.find(prefix)


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
) -> SimulationResult:
    """Run the job ``PREFIX.<rank>.et`` (ranks 0..N-1, its communicator groups beside it) in
    ASTRA-sim on the network of ``options`` and read the result from its log: per rank the
    simulated step, communication and exposed communication (ns), the job's step (the slowest
    rank's). A rank that does not finish is a ``SimulatorError`` naming it and the first node
    ASTRA-sim dropped. ``timeline`` writes a Chrome/Perfetto trace of the run, ``json_output``
    the result as JSON; both atomically, and only when the run succeeded.

    ``ranks`` runs the job as a data-parallel job of that many ranks (a multiple of the captured
    ones): on an equivalent reduced job where one is proven (docs/reduced.md), else on the full
    job written in a temporary folder (``work_dir``; ``compact``: each rank compacted);
    ``exact`` always runs the full job. ``result.plan`` says which ran, and why. Without
    ``ranks``, a job with fewer rank files than its recorded size (``world_size``: traced on rank 0
    alone) runs at that size, and a warning says so."""
    json_target = None if json_output is None else check_output(json_output)
    note = None
    if ranks is None:
        ranks, note = recorded_size(os.fspath(prefix))
    if ranks is not None:
        result = _simulate_width(
            os.fspath(prefix),
            ranks,
            options or SimulateOptions(),
            exact=exact,
            compact=compact,
            work_dir=None if work_dir is None else os.fspath(work_dir),
            timeline=None if timeline is None else os.fspath(timeline),
            progress=progress,
        )
    else:
        result = simulate_prefix(
            os.fspath(prefix),
            options or SimulateOptions(),
            timeline=None if timeline is None else os.fspath(timeline),
            progress=progress,
        )
    if note is not None:
        result = dataclasses.replace(result, warnings=[note, *result.warnings])
    if json_target is not None:
        with atomic_text_output(json_target) as fh:
            json.dump(result.as_json(), fh, indent=2)
            fh.write("\n")
    return result


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
) -> SweepResult:
    """Simulate the job ``PREFIX.<rank>.et`` at each of ``values`` of ``key`` on each topology:
    ``ranks`` (the job scaled to each count with ``scale``, with ``compact`` each rank compacted),
    ``bandwidth`` (GB/s, every link) or ``accelerator`` (a roofline preset); writes ``OUT.md``
    (table), ``OUT.png`` (plot: needs the ``plot`` extra) and ``OUT.json`` (``out_prefix``
    defaults to ``PREFIX.sweep``). ``jobs`` local processes, or the Ray cluster at ``ray``
    ("auto": ``ray.init``'s rule), run the values in parallel; the results are the same. A rank
    count runs on an equivalent reduced job where one is proven (docs/reduced.md), unless ``exact``."""
    return _sweep(
        os.fspath(prefix),
        list(values),
        list(topologies),
        options or SimulateOptions(),
        scale=functools.partial(_scale_point, compact=_bool("compact", compact)),
        out_prefix=None if out_prefix is None else os.fspath(out_prefix),
        work_dir=None if work_dir is None else os.fspath(work_dir),
        on_point=on_point,
        progress=progress,
        scale_capture=compact,
        key=key,
        jobs=jobs,
        ray=ray,
        exact=exact,
    )


def _scale_point(source: str, target: str, count: int, *, compact: bool) -> ScaleResult:
    """``scale`` as a sweep's point calls it (a module-level function: a Ray task pickles it)."""
    return scale(source, target, count, compact=compact)


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
        os.fspath(input_path), os.fspath(output_prefix), npus, passes, first_dim=first_dim, progress=progress
    )


# -- compact --
def compact(input_path: PathArg, output_path: PathArg, *, progress: Progress | None = None) -> CompactResult:
    """Write ``input_path`` (a ``.et`` ASTRA-sim runs) compacted into ``output_path`` (the same
    path replaces it): redundant dependencies dropped and runs of compute nodes merged, so that
    ASTRA-sim simulates the same time with fewer nodes (docs/compact.md)."""
    return _compact_file(os.fspath(input_path), os.fspath(output_path), progress)


def compact_ranks(
    in_prefix: PathArg, out_prefix: PathArg, *, on_rank_done: Callable[[CompactResult], None] | None = None
) -> list[CompactResult]:
    """``compact`` of every rank ``<in_prefix>.<r>.et`` into ``<out_prefix>.<r>.et``, all written
    or none (``on_rank_done`` is called for each once they all are)."""
    return _compact_ranks(os.fspath(in_prefix), os.fspath(out_prefix), on_rank_done)


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
    return _jsonize(os.fspath(input_path), os.fspath(output_path), layout, progress, jobs)


def generate(
    output_dir: PathArg, options: GenerateOptions | None = None, progress: Progress | None = None
) -> GenerateResult:
    """Write ``chakra_generator``'s microbenchmark traces (its bytes) in ``output_dir``."""
    return _generate(os.fspath(output_dir), options, progress)


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
    return _visualize(os.fspath(input_path), os.fspath(output_path), cut, progress, laid_out=laid_out)


# -- roofline --
def roofline_cost(
    name: str, in_shapes: Sequence[Any], in_types: Sequence[Any], out_shapes: Sequence[Any], out_types: Sequence[Any]
) -> Cost:
    """The roofline rules of ``--roofline`` on one op: (class, FLOPs, bytes read + written) from its
    recorded shapes and types (``schema/opcost.py``); raises ``ValueError`` (``BadShapes``) when
    they cannot be read. ``ConvertOptions(roofline=True, target="accelerator")`` writes them."""
    return op_cost(name, in_shapes, in_types, out_shapes, out_types)


# -- argument checks --
# Every entry point checks its arguments: a wrong type is a TypeError naming the argument, a bad
# value a ValueError (or the package's error), the same values the command line refuses.
def _path(name: str, value: Any, *, optional: bool = False) -> Any:
    if value is None and optional:
        return None
    if isinstance(value, (str, os.PathLike)):
        path = os.fspath(value)
        if isinstance(path, str):
            return path
    raise TypeError(f"{name} must be a path (str or os.PathLike[str]), got {type(value).__name__}")


def _paths(name: str, value: Any) -> list[str]:
    """A list of paths; one path alone (a str is not taken letter by letter) is a list of one."""
    if isinstance(value, (str, os.PathLike)):
        return [_path(name, value)]
    if isinstance(value, (bytes, dict)) or not hasattr(value, "__iter__"):
        raise TypeError(f"{name} must be a path or a list of paths, got {type(value).__name__}")
    paths = [_path(f"{name}[{k}]", item) for k, item in enumerate(value)]
    if not paths:
        raise OptionError(f"{name}: no file given")
    return paths


def _options(value: Any) -> ConvertOptions:
    if value is None:
        return ConvertOptions()
    if not isinstance(value, ConvertOptions):
        raise TypeError(f"options must be a ConvertOptions or None, got {type(value).__name__}")
    return value


def _int(name: str, value: Any) -> Any:
    if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
        raise TypeError(f"{name} must be an int or None, got {type(value).__name__}")
    return value


def _jobs(name: str, value: Any) -> Any:
    _int(name, value)
    if value is not None and value < 1:
        raise OptionError(f"{name} must be at least 1 (or None: one per CPU), got {value}")
    return value


def _steps(name: str, value: Any) -> StepChoice:
    if value is None or value == ALL_STEPS or (isinstance(value, int) and not isinstance(value, bool) and value >= 0):
        return value  # type: ignore[no-any-return]
    raise TypeError(f"{name} must be None, a step number or {ALL_STEPS!r}, got {value!r}")


def _bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__}")
    return value


def _callable(name: str, value: Any) -> Any:
    if value is not None and not callable(value):
        raise TypeError(f"{name} must be callable or None, got {type(value).__name__}")
    return value

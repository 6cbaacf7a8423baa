"""One trace converted: reader (records, spilled tails) -> graph -> cycles -> writer.

``convert_file`` reads a JSON trace (a second process parses the second half of a large plain
file); ``convert_document`` reads a trace's JSON from an open stream, such as the
linker's merged trace. Both run the same stages after reading and return a ``ConversionResult``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO

from .. import arguments, baseline, cycles
from .. import overhead as tracing
from .._types import Progress
from ..compact.rewrite import CompactResult, compact_temporary
from ..errors import CycleReport, CyclicDependencyError, OptionError
from ..et.encode import PROCESS_GROUPS, RANK, WORLD_SIZE
from ..gcpause import gc_paused
from ..io.output import OutputTarget, atomic_output, check_output
from ..io.read import check_input
from ..io.spill import SpillFile
from ..schema.chakra import NodeType
from ..schema.comm_kernels import custom_comm_type, is_nccl_kernel
from ..workers import default_jobs
from . import astra, feed, parallel, selfmeasure, spread, untrace, waits
from . import roofline as roofline_pass
from .astra import AstraChanges
from .graph import TraceGraph
from .issue_model import IssueModelInput, IssueModelResult, run_issue_model
from .reader import TraceReader
from .roofline import RooflineSummary
from .writer import TailSpill, collect, write_metadata, write_nodes

_CYCLE_EXAMPLES = 5
TARGETS = ("captured", "accelerator")
HOST_TIMES = ("none", "captured")


@dataclass(frozen=True)
class ConvertOptions:
    """How to convert; the defaults give the reference's output, byte for byte.

    ``break_cycles`` removes the edges that close dependency cycles instead of failing;
    ``allow_missing_parents`` accepts ``ctrl_deps`` that point at no node, as the reference does;
    ``simulate`` runs the reference's simple execution model on the result; ``astra_sim`` writes
    what ASTRA-sim runs instead of the reference's bytes (``convert/astra.py``), with ``rank`` as
    the own end of sends and receives; ``jobs`` is how many processes read a large plain-JSON
    file, each a byte range (``convert/parallel.py``): None for one per CPU, 1 for this one only.
    ``compact`` (implies ``astra_sim``) then writes the compacted graph instead (``compact/``:
    fewer nodes, the same simulated time), published in place of the output in one step.
    ``roofline`` writes ASTRA-sim's roofline fields; ``target="accelerator"`` (which needs
    ``roofline``) makes every compute node a non-CPU op, timed by that roofline, and the nodes
    that do no work CPU ops without duration, or with their captured one (``host_time="captured"``,
    which needs ``target="accelerator"``). ``world_size``: the ranks of the job the trace comes from
    (a link fills it in from the traces' records), written into the GlobalMetadata record as
    ``world_size`` with ``astra_sim`` (``scale`` and ``simulate`` read it), with ``rank`` and
    ``process_groups`` (the job's groups as JSON ``{pg_name: [ranks]}``, where the traces list them).
    ``tracing_overhead``, with ``astra_sim`` (and for the Kineto traces of ``convert_all``): the
    profiler's time taken out of the CPU ops (``converter/overhead.py``): ``"auto"`` (the default
    model; for a Kineto trace or a CPU capture's host trace, a calibration beside it first),
    ``"none"`` (the traced durations) or microseconds per recorded op; the reference's output
    keeps them.
    """

    simulate: bool = False
    break_cycles: bool = False
    allow_missing_parents: bool = False
    astra_sim: bool = False
    rank: int | None = None
    jobs: int | None = None
    compact: bool = False
    roofline: bool = False  # num_ops and tensor_size on every compute node (convert/roofline.py)
    target: str = "captured"  # "accelerator": compute nodes written as non-CPU ops (needs roofline)
    host_time: str = "none"  # "captured": with target "accelerator", the no-work nodes keep their durations
    world_size: int | None = None  # the job's ranks, recorded in the .et with astra_sim
    process_groups: str | None = None  # the job's groups, JSON {pg_name: [ranks]}, recorded with astra_sim
    tracing_overhead: str | float = tracing.AUTO  # with astra_sim: the profiler's time taken out

    def __post_init__(self) -> None:
        """The values the command line accepts, no others (``arguments``): a wrong type is a
        ``TypeError``, a value that cannot apply an ``OptionError``, each naming the field."""
        for name in ("simulate", "break_cycles", "allow_missing_parents", "astra_sim", "compact", "roofline"):
            arguments.flag(f"ConvertOptions.{name}", getattr(self, name))
        arguments.rank("rank", self.rank)
        arguments.jobs("jobs", self.jobs)
        arguments.whole("world_size", self.world_size, 1, arguments.MAX_RANKS)
        if self.process_groups is not None and not isinstance(self.process_groups, str):
            raise TypeError(f"`process_groups` must be a JSON string or None, not {type(self.process_groups).__name__}")
        arguments.choice("target", self.target, TARGETS)
        arguments.choice("host_time", self.host_time, HOST_TIMES)
        if self.target == "accelerator" and not self.roofline:
            raise OptionError(
                "`target` accelerator needs `roofline`: an accelerator op without num_ops and tensor_size "
                "stops ASTRA-sim"
            )
        if self.host_time == "captured" and self.target != "accelerator":
            raise OptionError(
                "`host_time` captured needs `target` accelerator (with the captured target every node keeps its "
                "duration)"
            )
        if self.compact and not self.astra_sim:  # compact implies astra_sim
            object.__setattr__(self, "astra_sim", True)
        setting = arguments.tracing_overhead("tracing_overhead", self.tracing_overhead)
        object.__setattr__(self, "tracing_overhead", setting)
        if isinstance(setting, float) and not self.astra_sim:
            raise OptionError(
                "`tracing_overhead` needs `astra_sim`: the reference's output keeps every traced duration"
            )


@dataclass(frozen=True)
class RemovedEdge:
    """A dependency dropped by ``break_cycles``: ``node`` no longer waits for ``dependency``."""

    node_id: int
    node_name: str
    dependency_id: int
    dependency_name: str
    inter_thread: bool


@dataclass
class StageTimes:
    """Wall seconds of each stage. Reading is parallel (``read``: this process's own range,
    ``wait``: waiting for the workers' ranges); merging their rows, building the graph (with
    cycles and the --astra-sim changes) and writing are sequential."""

    read: float = 0.0
    wait: float = 0.0
    merge: float = 0.0
    build: float = 0.0
    write: float = 0.0

    @property
    def sequential(self) -> float:
        return self.merge + self.build + self.write


@dataclass(frozen=True)
class ConversionResult:
    input_path: str
    output_path: str
    nodes_read: int
    nodes_written: int
    dangling_removed: int
    comm_nodes: int
    data_deps: int
    seconds: float
    removed_edges: list[RemovedEdge] = field(default_factory=list)
    simulation: IssueModelResult | None = None
    astra_changes: AstraChanges | None = None  # with --astra-sim
    simulator_problems: list[str] = field(default_factory=list)  # without it: why ASTRA-sim would refuse the output
    stages: StageTimes = field(default_factory=StageTimes)
    processes: int = 1  # that read the input
    warnings: list[str] = field(default_factory=list)  # e.g. NCCL kernels of no known collective
    compaction: CompactResult | None = None  # with --compact
    roofline: RooflineSummary | None = None  # with --roofline
    overhead: tracing.Removed | None = None  # the profiler's time taken out (--astra-sim)

    @property
    def sequential_fraction(self) -> float:
        """The share of the run spent in its sequential stages (merge, graph, write)."""
        return self.stages.sequential / self.seconds if self.seconds else 0.0


def convert_file(
    input_path: str, output_path: str, options: ConvertOptions, progress: Progress | None = None
) -> ConversionResult:
    """Convert the trace file ``input_path`` into ``output_path``; see ``ConvertOptions``.
    Raises a ``ConverterError`` subclass on bad input or an output that cannot be written; no
    output file is left behind then."""
    check_input(input_path)
    target = check_output(output_path, input_path)
    jobs = options.jobs or default_jobs()
    fed = feed.should_feed(input_path, jobs)
    splits = [] if fed else parallel.find_splits(input_path, jobs)
    workers: parallel.RangeReaders | feed.ChunkWorkers | None = None
    own = [0, 0]  # bytes read by this process, of the file's total

    def report(done: int, total: int) -> None:
        own[:] = done, total
        if progress is not None:
            others = workers.bytes_read() if isinstance(workers, parallel.RangeReaders) else 0
            progress("read", min(total, done + others), total)

    reader = TraceReader(input_path, progress=report if progress is not None else None, astra_sim=options.astra_sim)

    def read(graph: TraceGraph, spill: TailSpill, times: StageTimes) -> None:
        nonlocal workers
        waiting = (lambda: report(*own)) if progress is not None else None
        if fed:
            workers = feed.ChunkWorkers(
                input_path, jobs, spill.directory, keep_simulation_fields=options.simulate, astra_sim=options.astra_sim
            )
            chain = feed.read_fed(reader, graph, spill, workers, report if progress is not None else None)
        elif splits:
            workers = parallel.RangeReaders(
                input_path,
                splits,
                spill.directory,
                keep_simulation_fields=options.simulate,
                astra_sim=options.astra_sim,
            )
            chain = parallel.read_chain(reader, graph, spill, splits, workers, waiting)
        else:
            collect(reader.records(), graph, spill)
            return
        times.wait, times.merge = chain.wait, chain.merge

    try:
        return _run(reader, read, target, options, progress, processes=jobs + 1 if fed else len(splits) + 1)
    finally:
        if workers is not None:
            workers.close()


def convert_document(
    source: IO[bytes], target: OutputTarget, options: ConvertOptions, *, source_name: str
) -> ConversionResult:
    """Convert a trace read from ``source`` (its JSON, e.g. the linker's merged trace as it is
    made; closed here) into ``target`` (see ``io.check_output``); ``source_name`` names it in
    errors. Same output as that JSON in a file."""
    reader = TraceReader(source_name, astra_sim=options.astra_sim)
    return _run(
        reader,
        lambda graph, spill, _times: collect(reader.records_from_document(source), graph, spill),
        target,
        options,
        None,
    )


def _run(
    reader: TraceReader,
    read: Callable[[TraceGraph, TailSpill, StageTimes], None],
    target: OutputTarget,
    options: ConvertOptions,
    progress: Progress | None,
    processes: int = 1,
) -> ConversionResult:
    """The stages after reading: graph, cycles, writing; ``read`` fills the graph and the spill
    (and says how long it spent merging what other processes read)."""
    started = time.perf_counter()
    times = StageTimes()
    compaction: CompactResult | None = None
    graph = TraceGraph(reader.path, keep_simulation_fields=options.simulate)
    spill = TailSpill(SpillFile(target.work_dir))
    try:
        with gc_paused():
            read(graph, spill, times)
        reader.forget_memos()
        reader.check_complete()
        spill.finish_writing()
        stage = time.perf_counter()
        times.read = stage - started - times.wait - times.merge
        graph.build(options.allow_missing_parents)
        metadata = reader.metadata
        if options.astra_sim and options.world_size is not None:  # what the traces record of the job
            metadata = {**metadata, WORLD_SIZE: options.world_size, PROCESS_GROUPS: options.process_groups}
            if options.rank is not None and options.rank < options.world_size:
                metadata[RANK] = options.rank
        changes = astra.apply(graph, options.rank) if options.astra_sim else None
        untraced = None
        if options.astra_sim:
            waits.apply(graph)
            model = tracing.choose(
                options.tracing_overhead,
                untrace.HOST_TRACING,
                reader.path,
                # measured in the trace where it ran on a GPU: on a CPU capture the view-family ops'
                # time is a third of what an op costs the profiler (docs/overhead.md)
                None if untrace.cpu_capture(graph) else lambda: tracing.measured(selfmeasure.samples(graph, spill)),
            )
            if model is not None:  # --tracing-overhead none keeps the traced durations where they were
                if not untrace.cpu_capture(graph):  # where the GPU can run ahead of the host
                    spread.apply(graph, spill)
                untraced = untrace.apply(graph, spill, model)
            # what the replay is judged against: the calibration's untraced step where it is there
            metadata = {**metadata, baseline.BASELINE: baseline.of(model, untraced, reader.path).note()}
        problems = [] if options.astra_sim else astra.diagnose(graph)
        removed = _check_cycles(graph, options.break_cycles)
        costs = None
        if options.roofline:
            costs = roofline_pass.apply(
                graph, spill, options.target == "accelerator", keep_host_time=options.host_time == "captured"
            )
        times.build, stage = time.perf_counter() - stage, time.perf_counter()
        jobs = options.jobs or default_jobs()
        if options.compact:  # written to an unnamed temporary file, compacted into the output
            with compact_temporary(target) as (out, finish):
                write_metadata(out, reader.path, metadata)
                written, comm, edges = write_nodes(out, graph, spill, progress, jobs)
                compaction = finish()
        else:
            with atomic_output(target) as out:
                write_metadata(out, reader.path, metadata)
                written, comm, edges = write_nodes(out, graph, spill, progress, jobs)
        times.write = time.perf_counter() - stage
    finally:
        spill.close()
    return ConversionResult(
        input_path=reader.path,
        output_path=target.path,
        nodes_read=len(graph),
        nodes_written=written,
        dangling_removed=graph.dangling_removed,
        comm_nodes=comm,
        data_deps=edges,
        seconds=time.perf_counter() - started,
        removed_edges=removed,
        simulation=_run_issue_model(graph) if options.simulate else None,
        astra_changes=changes,
        simulator_problems=problems,
        stages=times,
        processes=processes,
        warnings=(
            _unrecognised_kernels(graph)
            + (changes.warnings if changes is not None else [])
            + (costs.warnings() if costs is not None else [])
        ),
        compaction=compaction,
        roofline=costs,
        overhead=untraced,
    )


def _unrecognised_kernels(graph: TraceGraph) -> list[str]:
    """One warning per distinct NCCL kernel name that names no known collective (kept a compute node)."""
    comp = int(NodeType.COMP_NODE)
    found: dict[str, int] = {}
    for row in (r for r, gpu in enumerate(graph.is_gpu) if gpu):
        name = graph.names[row]
        if graph.types[row] == comp and is_nccl_kernel(name):
            found[name] = found.get(name, 0) + 1
    custom: dict[str, int] = {}
    for row in (r for r, gpu in enumerate(graph.is_gpu) if gpu):
        name = graph.names[row]
        if graph.types[row] == comp and custom_comm_type(name) is not None:
            custom[name] = custom.get(name, 0) + 1
    said = (
        [
            f"{sum(custom.values())} GPU kernel(s) of {len(custom)} name(s) are communication that is not NCCL's "
            f"(e.g. '{next(iter(custom))[:80]}'; docs/kineto.md): kept as compute nodes here; convert the Kineto "
            "trace alone (convert --kineto) to have them as communication nodes"
        ]
        if custom
        else []
    )
    return said + [
        f"NCCL kernel '{name}' ({count} node{'s' if count > 1 else ''}) names no known collective "
        "(allreduce, alltoall, allgather, reducescatter, broadcast, sendrecv): kept as a compute node"
        for name, count in found.items()
    ]


def _check_cycles(graph: TraceGraph, break_them: bool) -> list[RemovedEdge]:
    if not graph.has_forward_edges():
        return []
    size = len(graph)
    components = cycles.cyclic_components(graph.final_rows(), graph.successors, size)
    if not components:
        return []
    if not break_them:
        raise CyclicDependencyError(graph.path, [_cycle_report(graph, c) for c in components])
    edges = cycles.break_cycles(components, graph.successors, graph.is_inter_thread, size)
    removed = [
        RemovedEdge(graph.ids[u], graph.names[u], graph.ids[v], graph.names[v], graph.is_inter_thread(u, v))
        for u, v in edges
    ]
    graph.remove_edges(edges)
    return removed


def _cycle_report(graph: TraceGraph, component: list[int]) -> CycleReport:
    shown = sorted(component, key=graph.ids.__getitem__)[:_CYCLE_EXAMPLES]
    return CycleReport(
        size=len(component),
        node_ids=tuple(graph.ids[r] for r in shown),
        node_names=tuple(graph.names[r] for r in shown),
    )


def _run_issue_model(graph: TraceGraph) -> IssueModelResult:
    rows = graph.final_rows()
    position = {row: pos for pos, row in enumerate(rows)}
    return run_issue_model(
        IssueModelInput(
            ids=[graph.ids[r] for r in rows],
            deps=[[position[s] for s in graph.successors(r)] for r in rows],
            is_gpu=[bool(graph.is_gpu[r]) for r in rows],
            durations=[graph.durations[r] for r in rows],
            streams=[graph.streams[r] for r in rows],
        )
    )

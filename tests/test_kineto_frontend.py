"""The Kineto front end (``converter/kineto``): a Kineto trace alone -> an ASTRA-sim-ready ``.et``.

Real public traces (``tests/data/traces/kineto_public``, HTA's; the DLRM workers; chakra-profile's
CPU traces), each read back and checked: the host timeline tiles the step, each dependency kind is
where the trace says it is, NCCL kernels are typed, ``check`` accepts every output; and the bad
inputs of the issue fail with one line and write nothing."""

from __future__ import annotations

import gzip
import itertools
import json
import tarfile
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from chakra_convert_fast.converter import api
from chakra_convert_fast.converter.convert.roofline import MIN_BYTES
from chakra_convert_fast.converter.et.decode import CPU_OP_FALSE, CPU_OP_TRUE, read_et, read_metadata
from chakra_convert_fast.converter.kineto import comm
from chakra_convert_fast.converter.kineto.events import read_events
from chakra_convert_fast.converter.kineto.graph import GAP_NAME, build
from chakra_convert_fast.converter.schema.chakra import CollectiveCommType, NodeType

from .clirun import assert_one_error, listing, run_cli
from .traces import REAL_TRACES_DIR

PUBLIC = REAL_TRACES_DIR / "kineto_public"
EVENT_SYNC = PUBLIC / "hta_a100_cuda_event_sync.json.gz"
MI250 = PUBLIC / "hta_mi250_rocm6.json.gz"
NCCL = PUBLIC / "hta_a100_nccl_rank0of2.json.gz"
SAMPLED = [PUBLIC / f"hta_sampled_rank{r}of128.json.gz" for r in (0, 1)]
CPU_GPT2 = REAL_TRACES_DIR / "cpu_gpt2_ddp2" / "rank0_device.json.gz"


@pytest.fixture(scope="module")
def dlrm_worker0(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dlrm")
    with tarfile.open(REAL_TRACES_DIR / "gpu_public" / "dlrm_kineto.tar.gz") as tar:
        member = next(m for m in tar.getmembers() if "worker0_" in m.name)
        member.name = "worker0.json"
        tar.extract(member, out, filter="data")
    return out / "worker0.json"


def _et(path: Path) -> Any:
    return read_et(path, ("comm_type", "comm_size", "comm_src", "comm_dst", "comm_tag"))


@pytest.mark.parametrize("path", [EVENT_SYNC, MI250, NCCL, *SAMPLED, CPU_GPT2])
def test_host_timeline_tiles_the_step(path: Path) -> None:
    """The host nodes of the timeline (each after the one before) last exactly the step's span
    (less, by the waits the GPU -> CPU dependencies take over, unless those are dropped)."""
    events = read_events(path)
    for drop in (frozenset(), frozenset({"sync"})):
        graph = build(events, drop=drop)
        step = next(e for e in events.steps if e.name == f"ProfilerStep#{graph.step}")
        host = [n for n in graph.nodes if n.cpu]
        assert host[0].name == f"ProfilerStep#{graph.step}"
        for before, after in itertools.pairwise(host):
            assert before.id in after.deps  # CPU order: one chain
        total = sum(n.dur for n in host)
        if drop:
            assert abs(total - step.dur) <= 1, (total, step.dur)
        else:
            assert total <= step.dur + 1
        assert graph.measured_us >= step.dur
        for node in graph.nodes:
            assert all(dep < node.id for dep in node.deps)  # no cycle, no dangling id


@pytest.mark.parametrize("path", [EVENT_SYNC, MI250, NCCL, *SAMPLED, CPU_GPT2])
def test_output_is_astra_sim_ready(path: Path, tmp_path: Path) -> None:
    result = api.convert_kineto(path, tmp_path / "t.0.et")
    report = api.check([tmp_path / "t.0.et"])
    assert report.ok, [p.line() for p in report.problems]
    trace = _et(tmp_path / "t.0.et")
    assert len(trace) == result.nodes
    assert NodeType.METADATA_NODE not in set(trace.types)
    metadata = read_metadata(tmp_path / "t.0.et")
    assert metadata["finish_ts"] - metadata["start_ts"] == round(result.measured_us)


def test_launches_and_synchronisation_event_sync(tmp_path: Path) -> None:
    """CPU -> GPU: every kernel after its cudaLaunchKernel; GPU -> CPU: cudaEventSynchronize's wait
    node depends on the kernel it waited for, and starts no earlier than that kernel's end."""
    graph = build(read_events(EVENT_SYNC))
    by_id = {n.id: n for n in graph.nodes}
    gpu = [n for n in graph.nodes if not n.cpu]
    assert gpu and all(
        any(by_id[d].name == "cudaLaunchKernel" for d in n.deps)
        for n in gpu
        if "Memcpy" not in n.name and "Memset" not in n.name
    )
    waits = [n for n in graph.nodes if n.name == "cudaEventSynchronize (wait)"]
    assert waits
    assert any(not by_id[d].cpu for w in waits for d in w.deps)


def test_rocm_names(tmp_path: Path) -> None:
    graph = build(read_events(MI250))
    by_id = {n.id: n for n in graph.nodes}
    launched_by = Counter(by_id[d].name for n in graph.nodes if not n.cpu for d in n.deps if by_id[d].cpu)
    assert launched_by["hipLaunchKernel"] >= 10 and graph.gpu_ops == 16
    assert graph.step == 1  # ProfilerStep#2 is the 49 us stub the profiler's stop() leaves: no launch


def test_nccl_kernels_with_collective_args(tmp_path: Path) -> None:
    result = api.convert_kineto(NCCL, tmp_path / "n.0.et")
    trace = _et(tmp_path / "n.0.et")
    rows = [r for r, t in enumerate(trace.types) if t == NodeType.COMM_COLL_NODE]
    assert len(rows) == result.comm_nodes == 7
    assert Counter(trace.comm[r]["comm_type"] for r in rows) == {
        CollectiveCommType.ALL_REDUCE: 5,
        CollectiveCommType.BROADCAST: 2,
    }
    for row in rows:
        attrs = trace.comm[row]
        assert attrs["pg_name"] == "0" and not attrs["is_cpu_op"]
        assert attrs["comm_size"] > 0
    raw = json.loads(gzip.decompress(NCCL.read_bytes()))
    element = {"Float": 4, "Long": 8, "Int": 4}  # In msg nelems x the dtype's size
    sizes = {
        e["args"]["In msg nelems"] * element[e["args"]["dtype"]]
        for e in raw["traceEvents"]
        if e.get("cat") == "kernel" and "Collective name" in e.get("args", {})
    }
    assert {trace.comm[r]["comm_size"] for r in rows} <= sizes


def test_nccl_kernels_typed_from_the_op_around_the_launch(tmp_path: Path) -> None:
    """The sampled 128-rank job's ncclKernel_SendRecv kernels carry no collective args: typed from
    the nccl:all_to_all / nccl:all_reduce / nccl:_all_gather_base op the launch sits in; both ranks
    issue the same collectives (the two ranks launched the all-to-alls and all-reduces of the
    backward pass in different orders, as their traces show)."""
    sequences = []
    for rank, path in enumerate(SAMPLED):
        api.convert_kineto(path, tmp_path / f"s.{rank}.et")
        trace = _et(tmp_path / f"s.{rank}.et")
        sequences.append(
            [trace.comm[r]["comm_type"] for r, t in enumerate(trace.types) if t == NodeType.COMM_COLL_NODE]
        )
    assert (
        Counter(sequences[0])
        == Counter(sequences[1])
        == {CollectiveCommType.ALL_TO_ALL: 2, CollectiveCommType.ALL_REDUCE: 2, CollectiveCommType.ALL_GATHER: 1}
    )


def test_dlrm_worker(dlrm_worker0: Path, tmp_path: Path) -> None:
    """PARAM's DLRM (V100, PyTorch 2.0 era: no Record function id, ncclKernel_* names): 5 all-to-all
    and 3 all-reduce per step, as the host trace of the same run has."""
    result = api.convert_kineto(dlrm_worker0, tmp_path / "d.0.et")
    assert result.rank == 0 and result.step == 10 and result.device == "Tesla V100-SXM2-32GB"
    trace = _et(tmp_path / "d.0.et")
    kinds = Counter(trace.comm[r]["comm_type"] for r, t in enumerate(trace.types) if t == NodeType.COMM_COLL_NODE)
    assert kinds == {CollectiveCommType.ALL_TO_ALL: 5, CollectiveCommType.ALL_REDUCE: 3}


def test_cpu_trace_of_chakra_profile(tmp_path: Path) -> None:
    """The gloo all-reduces of a CPU DDP step (``gloo:all_reduce`` on the worker threads) are
    communication nodes: type from the name, bytes from the first input, every rank's group."""
    result = api.convert_kineto(CPU_GPT2, tmp_path / "c.0.et")
    assert result.gpu_ops == 0 and result.rank == 0 and result.nodes > 1000
    assert result.comm_nodes == 2 and not result.warnings
    trace = _et(tmp_path / "c.0.et")
    rows = [r for r, t in enumerate(trace.types) if t == NodeType.COMM_COLL_NODE]
    assert [trace.names[r] for r in rows] == ["gloo:all_reduce"] * 2
    assert {trace.comm[r]["comm_type"] for r in rows} == {CollectiveCommType.ALL_REDUCE}
    assert trace.comm[rows[0]]["comm_size"] == 264192 * 4  # Input Dims [[264192]], float
    assert all(trace.comm[r]["pg_name"] == "0" and not trace.comm[r]["is_cpu_op"] for r in rows)
    durations = sorted(trace.durations[r] for r in rows)  # their traced 4,428.899 and 23,135.750 us
    assert abs(durations[0] - 4429) <= 1 and abs(durations[1] - 23136) <= 1


def test_gloo_collectives_without_shapes_or_peer(tmp_path: Path) -> None:
    """gloo: a collective without recorded shapes is 0 bytes; a send (whose peer Kineto does not
    record) stays a compute node with a warning; collectives with no group args in a job of several
    groups are said to be put in the default group."""
    worker = {"tid": 2}
    document = {
        "distributedInfo": {"rank": 0, "pg_config": [{"pg_name": "0"}, {"pg_name": "1"}]},
        "traceEvents": [
            _STEP,
            _event("c10d::allgather_", 10, 5),
            _event("gloo:all_gather", 12, 30, "user_annotation", **worker),
            _event("c10d::send", 50, 5),
            _event("gloo:send", 51, 3, "user_annotation"),
        ],
    }
    source = _write(tmp_path / "g.json", document)
    result = api.convert_kineto(source, tmp_path / "g.0.et")
    trace = _et(tmp_path / "g.0.et")
    rows = [r for r, t in enumerate(trace.types) if t == NodeType.COMM_COLL_NODE]
    assert result.comm_nodes == len(rows) == 1
    assert trace.comm[rows[0]]["comm_type"] == CollectiveCommType.ALL_GATHER
    assert trace.comm[rows[0]]["comm_size"] == 0 and trace.durations[rows[0]] == 30
    assert any("1 gloo collective(s) kept as compute nodes" in w and "peer" in w for w in result.warnings)
    assert any("default group" in w and "2 groups" in w for w in result.warnings)


@pytest.mark.parametrize("kind", ["cpu", "launch", "sync", "stream", "gaps"])
def test_ablation_drops_one_kind(kind: str) -> None:
    full = build(read_events(EVENT_SYNC))
    dropped = build(read_events(EVENT_SYNC), drop=frozenset({kind}))
    edges = sum(len(n.deps) for n in full.nodes)
    if kind == "gaps":
        assert sum(n.name == GAP_NAME for n in dropped.nodes) == 0 < sum(n.name == GAP_NAME for n in full.nodes)
    else:
        assert sum(len(n.deps) for n in dropped.nodes) < edges


@pytest.mark.parametrize(
    ("name", "args", "ops", "expected"),
    [
        ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", {}, [], (int(CollectiveCommType.ALL_REDUCE), None)),
        ("ncclDevKernel_AllGather_RING_LL(ncclDevComm*)", {}, [], (int(CollectiveCommType.ALL_GATHER), None)),
        (
            "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t",
            {},
            ["nccl:all_to_all"],
            (int(CollectiveCommType.ALL_TO_ALL), None),
        ),
        ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t", {}, [], (None, "not in the trace")),
        ("ncclDevKernel_SendRecv", {"Collective name": "send", "Dst Rank": 3}, [], (None, None)),
        ("ncclDevKernel_SendRecv", {"Collective name": "recv"}, [], (None, "peer rank")),
        ("ncclDevKernel_Reduce_Sum_f32", {}, [], (int(CollectiveCommType.REDUCE), "not a collective ASTRA-sim runs")),
    ],
)
def test_classify(name: str, args: dict[str, Any], ops: list[str], expected: tuple[int | None, str | None]) -> None:
    from chakra_convert_fast.converter.kineto.events import _Args

    class Op:
        def __init__(self, op_name: str) -> None:
            self.name = op_name
            self.args = _Args()

    info = comm.classify(name, _Args(**_renamed(args)), [Op(o) for o in ops], rank=0)
    assert info.comm_type == expected[0]
    if expected[1] is None:
        assert info.problem is None
    else:
        assert info.problem is not None and expected[1] in info.problem


def _renamed(args: dict[str, Any]) -> dict[str, Any]:
    names = {"Collective name": "collective", "Dst Rank": "dst_rank", "Src Rank": "src_rank"}
    return {names[k]: v for k, v in args.items()}


# -- the command line ------------------------------------------------------------------------------
def test_convert_recognises_a_kineto_trace(tmp_path: Path) -> None:
    done = run_cli("convert", EVENT_SYNC, tmp_path / "a.et")
    assert done.returncode == 0, done.stderr
    assert "ProfilerStep#100" in done.stderr and "measured step" in done.stderr
    done = run_cli("convert", "--kineto", "--step", "100", EVENT_SYNC, tmp_path / "b.et")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "a.et").read_bytes() == (tmp_path / "b.et").read_bytes()


def _write(path: Path, document: Any, *, gz: bool = False) -> Path:
    text = document if isinstance(document, str) else json.dumps(document)
    path.write_bytes(gzip.compress(text.encode()) if gz else text.encode())
    return path


def _event(name: str, ts: object, dur: float, cat: str = "cpu_op", **extra: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur, **extra}


_STEP = _event("ProfilerStep#3", 0, 100, "user_annotation")


@pytest.mark.parametrize(
    ("case", "document", "options", "expected"),
    [
        ("no_step", {"traceEvents": [_event("aten::mm", 0, 5)]}, [], "no ProfilerStep#N"),
        (
            "step_not_there",
            {"traceEvents": [_STEP, _event("aten::mm", 1, 5)]},
            ["--step", "7"],
            "no ProfilerStep#7 in the trace (it has 3)",
        ),
        (
            "missing_ts",
            {"traceEvents": [_STEP, {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "dur": 3}]},
            [],
            "traceEvents[1] ('aten::mm'): no 'ts'",
        ),
        ("missing_dur", {"traceEvents": [_STEP, {"ph": "X", "cat": "kernel", "name": "k", "ts": 3}]}, [], "no 'dur'"),
        ("bad_ts", {"traceEvents": [_STEP, _event("aten::mm", "soon", 5)]}, [], "'ts'"),
        ("not_kineto", {"hello": [1, 2]}, ["--kineto"], "no 'traceEvents' array: not a Kineto trace"),
        ("truncated", '{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "ProfilerStep#3", "ts": 0, "dur"', [], ""),
        ("host_trace", {"schema": "1.1.1-chakra.0.0.4", "nodes": []}, ["--kineto"], "not a Kineto trace"),
    ],
)
def test_bad_input_one_line_nothing_written(
    case: str, document: Any, options: list[str], expected: str, tmp_path: Path
) -> None:
    source = _write(tmp_path / f"{case}.json.gz", document, gz=True)
    if case == "truncated":
        options = ["--kineto"]
    before = listing(tmp_path)
    done = run_cli("convert", *options, source, tmp_path / "out.et")
    assert_one_error(done, expected)
    assert listing(tmp_path) == before


def test_truncated_gzip(tmp_path: Path) -> None:
    data = EVENT_SYNC.read_bytes()
    source = tmp_path / "cut.json.gz"
    source.write_bytes(data[: len(data) // 2])
    done = run_cli("convert", "--kineto", source, tmp_path / "out.et")
    assert_one_error(done)
    assert listing(tmp_path) == ["cut.json.gz"]


def test_kineto_options_refused_for_host_traces(tmp_path: Path) -> None:
    host = REAL_TRACES_DIR / "host" / "resnet_1gpu_et.json.gz"
    for args, text in ((("--step", "3", host), "--step"), (("--break-cycles", EVENT_SYNC), "--break-cycles")):
        done = run_cli("convert", *args, tmp_path / "o.et")
        assert done.returncode == 2 and "Traceback" not in done.stderr
        assert text in done.stderr.splitlines()[-1]
    assert listing(tmp_path) == []


def test_kept_events_are_compact_records() -> None:
    """The kept events until the step is chosen: a few hundred bytes each (was 660-860 with each
    event's decoded args and its own name string; bench/results/kineto_memory.md), equal names
    and args one object."""
    import tracemalloc

    tracemalloc.start()
    try:
        events = read_events(NCCL)
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    kept = events.host + events.gpu
    assert held / len(kept) < 450, held / len(kept)
    by_name: dict[str, Any] = {}
    for event in kept:
        assert by_name.setdefault(event.name, event.name) is event.name
    nccl = [e for e in events.gpu if e.name.startswith("ncclKernel")]
    assert nccl and len({id(e.args) for e in nccl}) < len(nccl)


def test_one_owner_of_the_kineto_format() -> None:
    """The linker's Kineto reader and the front end's share one module for the format (D7)."""
    from chakra_convert_fast.converter.kineto import events
    from chakra_convert_fast.converter.link import kineto as link_kineto
    from chakra_convert_fast.converter.schema import kineto as schema

    shared = vars(schema)
    for name in ("CPU_CATEGORIES", "LAUNCH_NAMES", "stream_trace"):
        assert vars(link_kineto)[name] is shared[name]
    for name in ("STEP_PREFIX", "stream_trace"):
        assert vars(events)[name] is shared[name]


# -- --roofline: num_ops and tensor_size from the launching op -------------------------------------
def _launch(corr: int, ts: float, **extra: Any) -> dict[str, Any]:
    return _event("cudaLaunchKernel", ts, 2, "cuda_runtime", args={"correlation": corr}, **extra)


def _kernel(name: str, corr: int, ts: float, dur: float, **args: Any) -> dict[str, Any]:
    return _event(name, ts, dur, "kernel", tid=7, args={"correlation": corr, "stream": 7, **args})


#: aten::addmm(bias [128], x [64, 256], w [256, 128], beta): 2 m k n FLOPs
_ADDMM = {"Input Dims": [[128], [64, 256], [256, 128], []], "Input type": ["float", "float", "float", "Scalar"]}


@pytest.mark.parametrize("accelerator", [False, True])
def test_roofline_from_the_launching_op(tmp_path: Path, accelerator: bool) -> None:
    """An aten::addmm's 2 m k n FLOPs and its inputs' bytes, split between its two kernels by their
    traced durations (1:3); the profiler's ``flops`` where recorded; a memcpy its ``bytes``; a
    kernel launched by no op with shapes gets none, counted in a warning (with --target
    accelerator it is a CPU op, replayed)."""
    document = {
        "traceEvents": [
            _STEP,
            _event("aten::addmm", 1, 20, args=_ADDMM),
            _launch(1, 2),
            _launch(2, 6),
            _event(
                "aten::mm", 30, 10, args={"Input Dims": [[4, 8], [8, 2]], "Input type": ["float"] * 2, "flops": 999}
            ),
            _launch(3, 31),
            _launch(4, 45),
            _event("cudaMemcpyAsync", 60, 2, "cuda_runtime", args={"correlation": 5}),
            _kernel("gemm_a", 1, 5, 10),
            _kernel("gemm_b", 2, 15, 30),
            _kernel("mm_kernel", 3, 50, 4),
            _kernel("orphan_kernel", 4, 55, 3),
            _event(
                "Memcpy DtoH (Device -> Pinned)", 63, 5, "gpu_memcpy", tid=7, args={"correlation": 5, "bytes": 4096}
            ),
        ]
    }
    source = _write(tmp_path / "r.json", document)
    result = api.convert_kineto(source, tmp_path / "r.0.et", roofline=True, accelerator=accelerator)
    trace = read_et(tmp_path / "r.0.et", ("num_ops", "tensor_size"))
    values = {
        trace.names[r]: (trace.int_attrs["num_ops"][r], trace.int_attrs["tensor_size"][r])
        for r in range(len(trace))
        if r in trace.int_attrs.get("num_ops", {})
    }
    flops, moved = 2 * 64 * 256 * 128, 4 * (128 + 64 * 256 + 256 * 128)
    assert values["gemm_a"] == (flops // 4, max(moved // 4, MIN_BYTES))
    assert values["gemm_b"] == (flops * 3 // 4, max(moved * 3 // 4, MIN_BYTES))
    assert values["mm_kernel"][0] == 999  # the profiler's own count
    assert values["Memcpy DtoH (Device -> Pinned)"] == (1, MIN_BYTES)  # 4,096 bytes, floored
    assert "orphan_kernel" not in values
    assert result.roofline is not None and (result.roofline.costed, result.roofline.none) == (4, 1)
    assert any("1 of 5 GPU compute node(s) got no num_ops/tensor_size" in w for w in result.warnings)
    assert not any("--" in w for w in result.warnings)  # the API's names (`roofline`), not the flags
    orphan = trace.names.index("orphan_kernel")
    assert bool(trace.cpu_ops[orphan] == CPU_OP_TRUE) is accelerator


def test_roofline_real_trace_cli(tmp_path: Path) -> None:
    """HTA's MI250 trace (record_shapes on): every kernel gets values; the CLI takes --roofline
    --target accelerator and --compact for a Kineto trace."""
    done = run_cli("convert", "--roofline", "--target", "accelerator", "--compact", MI250, tmp_path / "m.0.et")
    assert done.returncode == 0, done.stderr
    assert "--roofline: 16 of 16 GPU compute node(s)" in done.stderr and "--compact: wrote" in done.stderr
    trace = read_et(tmp_path / "m.0.et", ("num_ops", "tensor_size"))
    gpu = [r for r in range(len(trace)) if trace.cpu_ops[r] == CPU_OP_FALSE and trace.types[r] == NodeType.COMP_NODE]
    assert gpu and all(r in trace.int_attrs["num_ops"] for r in gpu)
    done = run_cli("convert", "--target", "accelerator", MI250, tmp_path / "x.0.et")
    assert done.returncode == 2 and "--target accelerator needs --roofline" in done.stderr


def test_convert_all_compacts_and_costs_kineto_ranks(tmp_path: Path) -> None:
    """convert-all --compact --roofline --target accelerator on a directory of Kineto traces: each
    rank's file is compacted (the CPU GPT-2 step: a few nodes, its two all-reduces kept apart; the
    traced durations: host nodes the tracing correction leaves at zero are kept apart too)."""
    source = tmp_path / "in"
    source.mkdir()
    for number in (0, 1):
        (source / f"rank{number}_device.json.gz").write_bytes(
            (REAL_TRACES_DIR / "cpu_gpt2_ddp2" / f"rank{number}_device.json.gz").read_bytes()
        )
    done = run_cli(
        "convert-all",
        source,
        tmp_path / "out",
        "-j",
        "1",
        "--compact",
        "--roofline",
        "--target",
        "accelerator",
        "--tracing-overhead",
        "none",
    )
    assert done.returncode == 0, done.stderr
    for number in (0, 1):
        trace = _et(tmp_path / "out" / f"trace.{number}.et")
        assert len(trace) < 10
        assert sum(t == NodeType.COMM_COLL_NODE for t in trace.types) == 2
    done = run_cli(
        "convert", "--roofline", "--target", "accelerator", "--host-time", "captured", MI250, tmp_path / "h.et"
    )
    assert done.returncode == 2 and "--host-time is not for a Kineto trace" in done.stderr

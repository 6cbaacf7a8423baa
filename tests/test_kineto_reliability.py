"""The Kineto front end on hostile traces (issue 40): launches linked by ``ac2g`` flows alone,
repeated correlation ids, a step that lasts no time, impossible peers and group names, malformed
fields, a step chosen among thousands, a stream per kernel. Each case failed on the code before:
a wrong graph with exit 0, an ``internal error``, or time quadratic in the trace (asserted here by
counting the work, timed in ``bench/kineto_scaling.py``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from chakra_convert_fast.converter import api
from chakra_convert_fast.converter.errors import ConverterError, OptionError, TraceContentError
from chakra_convert_fast.converter.et.decode import read_et
from chakra_convert_fast.converter.kineto import graph as kineto_graph
from chakra_convert_fast.converter.kineto.events import read_events
from chakra_convert_fast.converter.kineto.graph import build

from .clirun import assert_one_error, listing, run_cli


def event(name: str, ts: float, dur: float, cat: str = "cpu_op", tid: Any = 1, **extra: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, **extra}


def step(number: int, ts: float, dur: float) -> dict[str, Any]:
    return event(f"ProfilerStep#{number}", ts, dur, "user_annotation")


def launch(corr: Any, ts: float, **args: Any) -> dict[str, Any]:
    return event("cudaLaunchKernel", ts, 2, "cuda_runtime", args={"correlation": corr, **args})


def kernel(name: str, corr: Any, ts: float, dur: float, stream: Any = 7, **args: Any) -> dict[str, Any]:
    return event(name, ts, dur, "kernel", tid=stream, args={"correlation": corr, "stream": stream, **args})


def write(path: Path, events: list[Any], **top: Any) -> Path:
    path.write_text(json.dumps({"traceEvents": events, **top}))
    return path


# -- 3: launches linked to their kernels by ac2g flows alone ------------------------------------------
def _flow_linked(steps: int) -> list[dict[str, Any]]:
    """``steps`` steps of two launches each with no ``correlation``: each launch and its kernel
    linked by an ``ac2g`` flow (start on the launching thread, end on the stream; the driver call
    inside the launch starts there too), then the short step torch.profiler's stop() leaves (no
    launch)."""
    events: list[dict[str, Any]] = []
    for n in range(steps):
        t = 100.0 * n
        events.append(step(n + 1, t, 100))
        for i, at in enumerate((t + 10, t + 40)):
            flow = 2 * n + i + 1
            events.append(event("cudaLaunchKernel", at, 2, "cuda_runtime"))
            events.append(event("cuLaunchKernel", at, 1, "cuda_driver"))  # the flow starts where both do
            events.append(event(f"k{flow}", at + 5, 10, "kernel", tid=7, args={"stream": 7}))
            events.append({"ph": "s", "cat": "ac2g", "name": "ac2g", "id": flow, "pid": 1, "tid": 1, "ts": at})
            events.append({"ph": "f", "cat": "ac2g", "name": "ac2g", "id": flow, "pid": 1, "tid": 7, "ts": at + 5})
    events.append(step(steps + 1, 100.0 * steps, 3))
    return events


def test_ac2g_flows_link_launches_to_their_kernels(tmp_path: Path) -> None:
    """The default step is the last full one, not the launch-less stub; its two kernels are GPU
    nodes; ``--step 1`` has no false "no GPU op" warning (the step choice now links launches as the
    graph does: correlation, else the flow)."""
    events = read_events(write(tmp_path / "flows.json", _flow_linked(3)))
    graph = build(events)
    assert (graph.step, graph.gpu_ops, graph.incomplete, graph.warnings) == (3, 2, 0, [])
    first = build(events, 1)
    assert (first.gpu_ops, first.incomplete, first.warnings) == (2, 0, [])
    assert [n.name for n in first.nodes if not n.cpu] == ["k1", "k2"]
    assert first.gpu_ops == 2  # one launch each: the runtime call or its driver call, not both


# -- 8: a ProfilerStep that lasts no time ----------------------------------------------------------------
def test_zero_duration_step_is_refused_or_skipped(tmp_path: Path) -> None:
    """Named, it is refused in one line (it wrote an empty .et, exit 0); by default it is skipped
    for a step that lasts; a trace whose every step lasts no time is refused."""
    events = [step(1, 0, 100), launch(1, 10), kernel("k", 1, 20, 5), step(2, 100, 0)]
    source = write(tmp_path / "zero.json", events)
    done = run_cli("convert", "--step", "2", source, tmp_path / "z.et")
    assert_one_error(done, "traceEvents[3] ('ProfilerStep#2') lasts 0 us: it holds no event to convert")
    assert listing(tmp_path) == ["zero.json"]
    result = api.convert_kineto(source, tmp_path / "z.et")
    assert (result.step, result.gpu_ops) == (1, 1)
    only = write(tmp_path / "only.json", [step(4, 50, 0), event("aten::mm", 50, 0)])
    with pytest.raises(TraceContentError, match=r"ProfilerStep#4'\) lasts 0 us.*as does every step"):
        api.convert_kineto(only, tmp_path / "o.et")


# -- 9: correlation ids that repeat ----------------------------------------------------------------------
def test_repeated_correlation_ids_do_not_multiply_gpu_work(tmp_path: Path) -> None:
    """Two steps whose launches use the same correlation ids 1..4 (the ids restarted): each step
    has its own four kernels (each launch took every kernel of its id: 8 per step, 20x with 20
    repeats), and a warning says so."""
    events: list[dict[str, Any]] = []
    for n in range(20):
        t = 1000.0 * n
        events.append(step(n + 1, t, 1000))
        for corr in range(1, 5):
            events += [launch(corr, t + 100 * corr), kernel(f"k{n}_{corr}", corr, t + 100 * corr + 10, 20)]
    graph = build(read_events(write(tmp_path / "repeat.json", events)))
    assert graph.step == 20 and graph.gpu_ops == 4
    assert sorted(n.name for n in graph.nodes if not n.cpu) == [f"k19_{c}" for c in range(1, 5)]
    assert any("4 correlation id(s) are shared by several launches" in w for w in graph.warnings)


# -- 14: choosing the default step among many ------------------------------------------------------------
class _CountingList(list[Any]):
    """A list that counts the items its loops visit."""

    visits = 0

    def __iter__(self) -> Any:
        for item in super().__iter__():
            self.visits += 1
            yield item


def test_default_step_choice_is_linear(tmp_path: Path) -> None:
    """Every step's kernel is missing but the first's, so the choice looks at every step: the host
    events are walked a few times in all (each step walked all of them: 8,000 steps took 53 s;
    ``bench/kineto_scaling.py``)."""
    steps = 300
    events = [step(1, 0, 10), launch(1, 2), kernel("k", 1, 4, 2)]
    for n in range(2, steps + 1):
        events += [step(n, 10.0 * n, 10), launch(n, 10.0 * n + 2)]  # its kernel was not recorded
    trace = read_events(write(tmp_path / "many.json", events))
    trace.host = counting = _CountingList(trace.host)
    graph = build(trace)
    assert (graph.step, graph.gpu_ops) == (1, 1)
    assert counting.visits <= 5 * len(trace.host)


# -- 15: one stream per kernel ----------------------------------------------------------------------------
class _CountingStreams(dict[Any, Any]):
    visits = 0

    def values(self) -> Any:
        _CountingStreams.visits += len(self)
        return super().values()

    def items(self) -> Any:
        _CountingStreams.visits += len(self)
        return super().items()


def test_a_stream_per_kernel_is_not_quadratic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """600 kernels, each on a stream of its own, each starting late (a cross-stream search) with a
    synchronisation after every ten launches: no search walks every stream (20,000 kernels took
    124 s); the cross-stream edges are the ones the timing shows (each kernel waits for the one
    before, which ended 5 us before it started)."""
    kernels = 600
    events: list[dict[str, Any]] = [step(1, 0, 120.0 * kernels + 200)]
    for i in range(kernels):
        at = 120.0 * i
        events += [launch(i + 1, at), kernel(f"k{i}", i + 1, at + 10, 115, stream=100 + i)]
        if i % 10 == 9:
            events.append(event("cudaStreamSynchronize", at + 70, 56, "cuda_runtime", tid=2, args={"correlation": 0}))
    _CountingStreams.visits = 0
    trace = read_events(write(tmp_path / "streams.json", events))
    original = kineto_graph._Builder.__init__

    def counting_init(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        self.streams = _CountingStreams()

    monkeypatch.setattr(kineto_graph._Builder, "__init__", counting_init)
    graph = build(trace)
    assert graph.gpu_ops == kernels
    assert _CountingStreams.visits <= 2 * kernels
    by_name = {n.name: n for n in graph.nodes}
    for i in range(1, kernels):
        assert by_name[f"k{i - 1}"].id in by_name[f"k{i}"].deps
    waits = [n for n in graph.nodes if n.name == "cudaStreamSynchronize (wait)"]
    assert len(waits) == kernels // 10 and all(by_name[f"k{10 * w + 9}"].id in n.deps for w, n in enumerate(waits))


# -- 10: sends to impossible ranks, odd group names ---------------------------------------------------
def _nccl(collective: str, pg: Any = None, **args: Any) -> list[dict[str, Any]]:
    kernel_args = {"Collective name": collective, "In msg nelems": 4, "dtype": "Float", **args}
    if pg is not None:
        kernel_args["Process Group Name"] = pg
    return [step(1, 0, 100), launch(1, 10), kernel("ncclDevKernel_SendRecv", 1, 20, 5, **kernel_args)]


@pytest.mark.parametrize(
    ("case", "events", "warning"),
    [
        (
            "rank -1",
            _nccl("send", **{"Dst Rank": -1}),
            "a send whose peer rank -1 is not among the job's ranks (0 to 127)",
        ),
        ("rank 500 of 128", _nccl("send", **{"Dst Rank": 500}), "a send whose peer rank 500 is not among the job's"),
        ("from 500", _nccl("recv", **{"Src Rank": 500}), "a recv whose peer rank 500 is not among the job's"),
        ("rank 10^30", _nccl("send", **{"Dst Rank": 10**30}), "a send whose peer rank 1e+30 is not among"),
        ("itself", _nccl("send", **{"Dst Rank": 0}), "a send whose peer is its own rank (0)"),
    ],
)
def test_send_to_an_impossible_rank_is_kept_as_compute(case: str, events: Any, warning: str, tmp_path: Path) -> None:
    """It was a send node to rank -1 (or 500, or itself, or an internal error at 10^30), exit 0 and
    no word: now a compute node, with a warning naming the peer."""
    source = write(tmp_path / "p2p.json", events, distributedInfo={"rank": 0, "world_size": 128})
    result = api.convert_kineto(source, tmp_path / "p2p.0.et")
    assert result.comm_nodes == 0
    assert any(warning in w and "kept as compute nodes" in w for w in result.warnings), result.warnings
    good = write(tmp_path / "good.json", _nccl("send", **{"Dst Rank": 1}), distributedInfo={"rank": 0, "world_size": 2})
    assert api.convert_kineto(good, tmp_path / "good.0.et").comm_nodes == 1


@pytest.mark.parametrize(("name", "shown"), [("default_pg", "'default_pg'"), ("01", "'01'"), (["1"], "\"['1']\"")])
def test_odd_group_names_are_warned(name: Any, shown: str, tmp_path: Path) -> None:
    """A process group named but not as a group id (a word, a leading zero, a list) goes to the
    default group with a warning naming it (it went there, or was written as "01", silently)."""
    source = write(tmp_path / "pg.json", _nccl("allreduce", name), distributedInfo={"rank": 0, "world_size": 2})
    result = api.convert_kineto(source, tmp_path / "pg.0.et")
    assert result.comm_nodes == 1
    trace = read_et(tmp_path / "pg.0.et")
    assert [attrs.get("pg_name") for attrs in trace.comm.values()] == ["0"]
    assert any("name a process group that is no group id ASTRA-sim reads" in w and shown in w for w in result.warnings)
    plain = write(tmp_path / "one.json", _nccl("allreduce", "1"))
    assert api.convert_kineto(plain, tmp_path / "one.0.et").warnings == []


# -- 16: malformed fields: one line naming the file and the event --------------------------------------
def _flow_with_id(flow: Any) -> list[dict[str, Any]]:
    return [
        step(1, 0, 100),
        event("cudaLaunchKernel", 10, 2, "cuda_runtime"),
        {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": flow, "pid": 1, "tid": 1, "ts": 10},
        event("k", 20, 5, "kernel", tid=7, args={"stream": 7}),
    ]


MALFORMED: dict[str, tuple[list[dict[str, Any]], dict[str, Any], str]] = {
    "correlation a list": (
        [step(1, 0, 100), launch([1], 10), kernel("k", 1, 20, 5)],
        {},
        "traceEvents[1] ('cudaLaunchKernel'): 'correlation' must be a number or a string, got [1]",
    ),
    "correlation an object": (
        [step(1, 0, 100), launch(1, 10), kernel("k", {"a": 1}, 20, 5)],
        {},
        "traceEvents[2] ('k'): 'correlation' must be a number or a string, got {'a': 1}",
    ),
    "flow id a list": (_flow_with_id([1]), {}, "traceEvents[2] ('ac2g'): 'id' must be a number or a string, got [1]"),
    "stream and tid a list": (
        [step(1, 0, 100), launch(1, 10), kernel("k", 1, 20, 5, stream=[7])],
        {},
        "traceEvents[2] ('k'): 'tid' must be a number or a string, got [7]",
    ),
    "ts 1e20": (
        [step(1, 0, 100), launch(1, 10), kernel("k", 1, 1e20, 5)],
        {},
        "traceEvents[2] ('k'): 'ts' 1e+20 is beyond 9,007,199,254,740,992 us",
    ),
    "step dur 1e20": (
        [step(1, 0, 1e20), launch(1, 10), kernel("k", 1, 20, 5)],
        {},
        "traceEvents[0] ('ProfilerStep#1'): 'dur' 1e+20 is beyond",
    ),
    "message of 10^30 elements": (
        _nccl("allreduce", **{"In msg nelems": 10**30}),
        {},
        "traceEvents[2] ('ncclDevKernel_SendRecv'): 'In msg nelems' 1e+30 is beyond 288,230,376,151,711,744 elements",
    ),
    "gloo collective of 10^400 bytes": (
        [
            step(1, 0, 100),
            event("gloo:all_reduce", 9, 5, args={"Input Dims": [[10**200, 10**200]], "Input type": ["float"]}),
        ],
        {},
        "traceEvents[1] ('gloo:all_reduce'): a message of 4.00e+400 bytes (its 'In msg nelems', or its launching op's",
    ),
    "NCCL kernel sized by its launching op, 4e30 bytes": (
        [
            step(1, 0, 100),
            event(
                "record_param_comms",
                9,
                5,
                args={"Collective name": "allreduce", "Input Dims": [[10**30]], "Input type": ["float"]},
            ),
            launch(1, 10),
            kernel("ncclDevKernel_AllReduce", 1, 20, 5),
        ],
        {},
        "traceEvents[3] ('ncclDevKernel_AllReduce'): a message of 4e+30 bytes",
    ),
    "profiler flops 10^400": (
        [step(1, 0, 100), event("aten::mm", 5, 30, args={"flops": 10**400}), launch(1, 10), kernel("k", 1, 20, 5.5)],
        {},
        "traceEvents[1] ('aten::mm'): 'flops' 1.00e+400 is beyond 9,223,372,036,854,775,807",
    ),
    "rank 10^30": (
        _nccl("send", **{"Dst Rank": 1}),
        {"distributedInfo": {"rank": 10**30}},
        "distributedInfo's rank 1e+30 is beyond a job's ranks (0 to 1,048,575)",
    ),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_fields_are_one_line_errors(case: str, tmp_path: Path) -> None:
    """Each ended in `internal error: TypeError: unhashable type` or `ValueError: ... out of the
    uint64 range`, naming neither the file nor the event."""
    events, top, expected = MALFORMED[case]
    source = write(tmp_path / "bad.json", events, **top)
    if case in ("correlation a list", "rank 10^30"):  # the command line's contract, on two of them
        done = run_cli("convert", "--roofline", source, tmp_path / "bad.0.et")
        line = assert_one_error(done, expected)
        assert f"{source}: " in line and "internal error" not in line
    else:
        with pytest.raises(ConverterError) as error:
            api.convert_kineto(source, tmp_path / "bad.0.et", roofline=True)
        assert str(error.value) == f"{source}: {expected}" or expected in str(error.value)
        assert str(error.value).startswith(f"{source}: ") and "\n" not in str(error.value)
    assert listing(tmp_path) == ["bad.json"]


# -- 18: convert-all of Kineto traces alone ------------------------------------------------------------
@pytest.mark.parametrize(
    ("options", "flag"),
    [
        (["--simulate"], "--simulate"),
        (["--roofline", "--target", "accelerator", "--host-time", "captured"], "--host-time"),
        (["--break-cycles"], "--break-cycles"),
    ],
)
def test_convert_all_refuses_options_a_kineto_job_cannot_use(options: list[str], flag: str, tmp_path: Path) -> None:
    """As `convert` refuses them for one Kineto trace (they were ignored without a word, exit 0)."""
    source = tmp_path / "in"
    source.mkdir()
    for rank in (0, 1):
        write(source / f"rank{rank}.json", [step(1, 0, 100), launch(1, 10), kernel("k", 1, 20, 5)])
    done = run_cli("convert-all", source, tmp_path / "out", "-j", "1", *options)
    line = assert_one_error(done, f"{flag} is not for a job of Kineto traces alone", status=2)
    assert "--" in line and "`" not in line
    assert listing(tmp_path) == ["in"] and listing(source) == ["rank0.json", "rank1.json"]
    with pytest.raises(OptionError, match="`simulate` is not for a job of Kineto traces alone"):
        api.convert_all(source, tmp_path / "out", api.ConvertOptions(simulate=True))


@pytest.mark.slow
def test_rank_is_not_read_from_a_word_in_the_name(tmp_path: Path) -> None:
    """A Kineto trace without distributedInfo named ``hta_mi250_rocm62.json`` has no rank in its
    name (it was rank 62, beside rank 0, a job of 63 ranks with 61 missing); ``dlrm_eg_5`` still
    has 5."""
    from chakra_convert_fast.converter.ranks.discover import rank_from_name

    assert [rank_from_name(n) for n in ("hta_mi250_rocm62.json", "gpt2.json", "dlrm_eg_5.json")] == [None, None, 5]
    source = tmp_path / "in"
    source.mkdir()
    events = [step(1, 0, 100), launch(1, 10), kernel("k", 1, 20, 5)]
    write(source / "rank0.json", events)
    write(source / "hta_mi250_rocm62.json", events)
    done = run_cli("convert-all", source, tmp_path / "out", "-j", "1")
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in (tmp_path / "out").glob("*.et")) == ["trace.0.et"]
    (source / "rank0.json").unlink()
    done = run_cli("convert-all", source, tmp_path / "out2", "-j", "1")
    assert_one_error(done, "no host or Kineto traces", "with a rank found", "distributedInfo")


@pytest.mark.parametrize(("rank", "shown"), [(-1, "-1"), (10**30, "1e+30"), (1 << 20, "1048576")])
def test_convert_all_refuses_a_distributed_info_rank_out_of_range(rank: int, shown: str, tmp_path: Path) -> None:
    """It wrote `trace.-1.et` and `trace.1000000000000000000000000000000.et`, exit 0."""
    source = tmp_path / "in"
    source.mkdir()
    for name, number in (("a.json", rank), ("b.json", 0)):
        document = {"distributedInfo": {"rank": number, "world_size": 2}, "traceEvents": _nccl("allreduce")}
        (source / name).write_text(json.dumps(document))
    done = run_cli("convert-all", source, tmp_path / "out", "-j", "1")
    assert_one_error(done, f"a.json: distributedInfo's rank {shown} is not a rank (0 to 1,048,575)")
    assert listing(tmp_path) == ["in"]


def test_a_number_too_large_for_a_rank_is_none_in_a_name() -> None:
    from chakra_convert_fast.converter.ranks.discover import rank_from_name

    names = ("host_1700000000.json", "x_99999999999999999999.json", "w_1048575.json", "w_1048576.json")
    assert [rank_from_name(n) for n in names] == [None, None, 1048575, None]


def test_roofline_of_huge_shapes_is_capped(tmp_path: Path) -> None:
    """An op of 10^200 x 10^200 matrices split between two kernels of fractional durations: the
    values are capped at int64 as the host path's (it was `internal error: OverflowError: int too
    large to convert to float`)."""
    shapes = {"Input Dims": [[10**200, 10**200], [10**200, 10**200]], "Input type": ["float", "float"]}
    events = [
        step(1, 0, 100),
        event("aten::mm", 5, 30, args=shapes),
        launch(1, 10),
        launch(2, 12),
        kernel("k1", 1, 20, 5.5),
        kernel("k2", 2, 26, 5.5),
    ]
    result = api.convert_kineto(write(tmp_path / "huge.json", events), tmp_path / "huge.0.et", roofline=True)
    assert result.roofline is not None and result.roofline.costed == 2
    trace = read_et(tmp_path / "huge.0.et", ("num_ops",))
    assert all(abs(value - (1 << 62)) <= 1 for value in trace.int_attrs["num_ops"].values())  # half the cap each


def test_sorted_keys_against_a_sorted_list() -> None:
    """The graph's ordered multiset (``kineto/sortedkeys.py``) answers as a sorted list does, over
    runs split many times (a small ``LOAD``) and keys added, repeated and removed at random."""
    import random
    from bisect import insort

    from chakra_convert_fast.converter.kineto import sortedkeys

    rng = random.Random(40)
    original = sortedkeys.LOAD
    sortedkeys.LOAD = 4
    try:
        keys, plain = sortedkeys.SortedKeys(), list[tuple[int, int]]()
        for _ in range(3000):
            if plain and rng.random() < 0.3:
                key = plain[rng.randrange(len(plain))]
                keys.remove(key)
                plain.remove(key)
            else:
                key = (rng.randrange(200), rng.randrange(3))
                keys.add(key)
                insort(plain, key)
            low, high = sorted((rng.randrange(-5, 205), rng.randrange(-5, 205)))
            assert list(keys.at_most((low, 1))) == [k for k in reversed(plain) if k <= (low, 1)]
            assert list(keys.between((low, 0), (high, 2))) == [k for k in plain if (low, 0) <= k <= (high, 2)]
        assert len(keys) == len(plain)
        with pytest.raises(ValueError, match="not in the keys"):
            keys.remove((500, 0))
    finally:
        sortedkeys.LOAD = original

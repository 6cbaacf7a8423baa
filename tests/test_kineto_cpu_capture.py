"""A CPU capture's Kineto trace alone (``chakra-profile --no-host-trace``) through the Kineto front
end (``converter/kineto/graph.py``, ``docs/overhead.md``'s CPU captures): a gloo collective's node
runs beside its slot of the host timeline, from where it started, so the traced graph's step is the
traced step (after its slot, a collective the host waited for ran twice, past the step's end); with
``convert-all --astra-sim`` every rank's calibration is used and the collectives are evened; and the
replay of the committed captures' Kineto traces alone lands within 10% of their untraced median.

On the committed CPU captures (``tests/data/traces/cpu_overhead``, ``cpu_gpt2_ddp2``: PROVENANCE.md
there) and on a small trace written here."""

from __future__ import annotations

import gzip
import json
import shutil
import statistics
from pathlib import Path
from typing import Any

import pytest

from chakra_convert_fast.converter import api
from chakra_convert_fast.converter.et.decode import read_et
from chakra_convert_fast.converter.kineto.events import read_events
from chakra_convert_fast.converter.kineto.graph import build
from chakra_convert_fast.converter.kineto.untrace import step_estimate
from chakra_convert_fast.converter.schema.chakra import NodeType

from .traces import REAL_TRACES_DIR

CPU = REAL_TRACES_DIR / "cpu_overhead"
KINETO_TRACES = [
    *(CPU / name / f"{name}_rank{rank}_device.json.gz" for name in ("gpt2_ddp", "bert_fsdp") for rank in (0, 1)),
    *(REAL_TRACES_DIR / "cpu_gpt2_ddp2" / f"rank{rank}_device.json.gz" for rank in (0, 1)),
]


def _event(name: str, ts: float, dur: float, cat: str = "cpu_op", tid: int = 1, **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": args}


def _blocked_step(tmp_path: Path) -> Path:
    """A DDP-like CPU step of 100 us: the all-reduce on gloo's worker thread (tid 2) from 20 to 95,
    the main thread blocked on it, recording nothing, until it ends; then the step's last op."""
    events = [
        _event("ProfilerStep#3", 0, 100, "user_annotation"),
        _event("aten::mm", 1, 17),
        _event("c10d::allreduce_", 18, 1),
        _event("gloo:all_reduce", 20, 75, "user_annotation", tid=2, **{"Input Dims": [[64]], "Input type": ["float"]}),
        _event("aten::add_", 96, 3),
    ]
    path = tmp_path / "blocked.json.gz"
    path.write_bytes(gzip.compress(json.dumps({"traceEvents": events}).encode()))
    return path


def test_a_collective_the_host_waited_for_runs_beside_its_slot(tmp_path: Path) -> None:
    """The slot of the host timeline lasts the collective (the host waited); the collective's node
    starts where the slot does, so the traced graph's step is the traced step, not the step and the
    collective again (it was 95 + 75 us: the node after its slot)."""
    events = read_events(_blocked_step(tmp_path))
    graph = build(events)
    by_id = {node.id: node for node in graph.nodes}
    (coll,) = [node for node in graph.nodes if node.comm is not None]
    (slot,) = [node for node in graph.nodes if node.cpu and node.name == "gloo:all_reduce"]
    assert coll.dur == 75 and slot.dur == 75 and coll.deps == slot.deps and coll.start == slot.start == 20
    assert by_id[coll.deps[0]].name == "[host gap]"  # after c10d::allreduce_, up to the collective's start
    assert step_estimate(graph)([], []) == 100


@pytest.mark.parametrize("path", KINETO_TRACES, ids=lambda p: f"{p.parent.name}/{p.name.split('.')[0]}")
def test_the_traced_graph_of_a_cpu_capture_is_its_traced_step(path: Path) -> None:
    """On the committed CPU captures: each rank's traced graph, estimated as ASTRA-sim replays it,
    takes the ProfilerStep's span (GPT-2 with DDP's rank 0: 0.8 ms more with the node after its
    slot, its one all-reduce ending near the step's end)."""
    events = read_events(path)
    graph = build(events)
    step = next(e for e in events.steps if e.name == f"ProfilerStep#{graph.step}")
    assert graph.gpu_ops == 0 and graph.comm_nodes > 0
    assert abs(step_estimate(graph)([], []) - step.dur) <= 2, (step_estimate(graph)([], []), step.dur)


def _kineto_alone(name: str, where: Path) -> Path:
    """A committed capture's Kineto traces and calibrations, without its host traces."""
    folder = where / name
    folder.mkdir(parents=True)
    for path in (CPU / name).iterdir():
        if path.name.endswith(("_device.json.gz", "_overhead.json")):
            shutil.copy(path, folder)
    return folder


def _untraced_median_ms(name: str) -> float:
    summary = json.loads((CPU / name / f"{name}_summary.json").read_text())
    return float(summary["step_time_s"]["untraced_median"]) * 1e3


@pytest.mark.parametrize("name", ["gpt2_ddp", pytest.param("bert_fsdp", marks=pytest.mark.slow)])
def test_kineto_alone_cpu_capture_is_calibrated_and_evened(name: str, tmp_path: Path) -> None:
    """``convert-all --astra-sim`` of the Kineto traces alone: each rank's calibration, and each
    collective the least traced duration of its ranks on both."""
    done = api.convert_all(_kineto_alone(name, tmp_path), tmp_path / "et", api.ConvertOptions(astra_sim=True), jobs=1)
    assert not done.failed and len(done.outcomes) == 2
    for outcome in done.outcomes:
        assert outcome.overhead is not None
        assert f"calibrated in the same run, {name}_rank{outcome.rank}_overhead.json" in outcome.overhead.line()
    assert done.waits is not None and done.waits.collectives > 0
    durations = []
    for rank in (0, 1):
        trace = read_et(tmp_path / "et" / f"{done.prefix}.{rank}.et")
        rows = sorted(
            (r for r in range(len(trace)) if trace.types[r] == NodeType.COMM_COLL_NODE), key=trace.ids.__getitem__
        )
        durations.append([trace.durations[r] for r in rows])
    assert durations[0] == durations[1]


@pytest.mark.parametrize("name", ["gpt2_ddp", "bert_fsdp"])
def test_kineto_alone_cpu_replay_is_the_untraced_step(simulator: Path, name: str, tmp_path: Path) -> None:
    """In the real ASTRA-sim, the Kineto traces alone of the committed captures (traced with the
    observer beside them: the calibration takes its time out too) replay within 10% of the
    untraced median of their run (``bench/results/overhead_replay_cpu.md`` has the captures made
    with ``--no-host-trace``)."""
    done = api.convert_all(_kineto_alone(name, tmp_path), tmp_path / "et", api.ConvertOptions(astra_sim=True), jobs=1)
    assert not done.failed
    replay = api.simulate(tmp_path / "et" / done.prefix, api.SimulateOptions(replay=True))
    untraced = _untraced_median_ms(name)
    assert abs(replay.step_ns / 1e6 - untraced) / untraced < 0.10, (replay.step_ns / 1e6, untraced)
    assert statistics.median(r.step_ns for r in replay.ranks) > 0

"""Kineto traces whose events have fields of the wrong type: one line naming the event and the
field, from ``link``, ``convert --host/--device`` and ``convert-all`` (a failed rank, not an
internal error), where the reference linker stops with a TypeError."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from .clirun import ERROR_PREFIX, assert_one_error, listing, run_cli
from .linkcases import edge_case_pair
from .traces import load_trace, reference_link

pytestmark = [pytest.mark.slow]

Mutation = Callable[[dict[str, Any]], int]  # changes the document, returns the event index it broke


def _first(doc: dict[str, Any], test: Callable[[dict[str, Any]], bool]) -> int:
    return next(i for i, e in enumerate(doc["traceEvents"]) if isinstance(e, dict) and test(e))


def set_field(category: str, key: str, value: Any) -> Mutation:
    def mutate(doc: dict[str, Any]) -> int:
        index = _first(doc, lambda e: e.get("cat") == category or e.get("ph") == category)
        doc["traceEvents"][index][key] = value
        return index

    return mutate


def set_arg(category: str, key: str, value: Any) -> Mutation:
    def mutate(doc: dict[str, Any]) -> int:
        index = _first(doc, lambda e: e.get("cat") == category)
        doc["traceEvents"][index]["args"][key] = value
        return index

    return mutate


def not_an_object(doc: dict[str, Any]) -> int:
    doc["traceEvents"][3] = 5
    return 3


#: case -> (mutation, text of the error line besides ``traceEvents[i]``)
CASES: dict[str, tuple[Mutation, str]] = {
    "ts a string (cpu op)": (set_field("cpu_op", "ts", "12.5"), "'ts' must be a number, got '12.5'"),
    "ts a string (metadata event)": (set_field("M", "ts", "x"), "'ts' must be a number"),
    "dur a string (kernel)": (set_field("kernel", "dur", "5"), "'dur' must be a number"),
    "ts beyond a float": (set_field("cpu_op", "ts", 10**400), "'ts' must be a number, got 1000"),
    "dur null (launch)": (set_field("cuda_runtime", "dur", None), "'dur' must be a number, got None"),
    "tid a list": (set_field("cpu_op", "tid", [1]), "'tid' must be a number or a string"),
    "name a number": (set_field("cpu_op", "name", 7), "'name' must be a string"),
    "cat a list": (set_field("kernel", "cat", ["kernel"]), "'cat' must be a string"),
    "args a list": (set_field("cuda_runtime", "args", [1, 2]), "'args' must be a JSON object"),
    "pid an object": (set_field("cpu_op", "pid", {"a": 1}), "'pid' must be a number or a string"),
    "record function id a list": (set_arg("cpu_op", "Record function id", [1]), "'Record function id' must be"),
    "correlation an object": (set_arg("cuda_runtime", "correlation", {"a": 1}), "'correlation' must be"),
    "external id not a number": (set_arg("kernel", "External id", "x"), "bad 'External id'"),
    "event not an object": (not_an_object, "is not a JSON object"),
}


@pytest.fixture
def pair(tmp_path: Path) -> tuple[Path, Path]:
    return edge_case_pair(tmp_path / "job", layers=6, gz=False)


def broken_device(device: Path, case: str) -> int:
    doc = json.loads(device.read_text())
    index = CASES[case][0](doc)
    device.write_text(json.dumps(doc))
    return index


@pytest.mark.parametrize("command", ["link", "convert"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_wrong_types_are_one_line_errors(case: str, command: str, pair: tuple[Path, Path], tmp_path: Path) -> None:
    host, device = pair
    index = broken_device(device, case)
    out = tmp_path / "out"
    out.mkdir()
    done = run_cli(command, "--host", host, "--device", device, out / "result")
    assert_one_error(done, str(device), f"traceEvents[{index}]", CASES[case][1])
    assert listing(out) == []


@pytest.mark.parametrize("case", ["ts a string (cpu op)", "args a list", "record function id a list"])
def test_convert_all_fails_the_rank_with_the_reason(case: str, tmp_path: Path) -> None:
    edge_case_pair(tmp_path / "job", layers=6, rank=0, world=2, gz=False)
    _, device = edge_case_pair(tmp_path / "job", layers=6, rank=1, world=2, gz=False)
    index = broken_device(device, case)
    done = run_cli("convert-all", tmp_path / "job", tmp_path / "out")
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    failed = [line for line in done.stderr.splitlines() if "FAILED" in line]
    assert len(failed) == 1 and f"traceEvents[{index}]" in failed[0] and CASES[case][1] in failed[0]
    assert "internal error" not in done.stderr
    assert done.stderr.splitlines()[-1] == ERROR_PREFIX + "1 of 2 ranks failed"
    assert listing(tmp_path / "out") == ["trace.0.et", "trace.comm_group.json"]


def test_trace_events_not_an_array(pair: tuple[Path, Path], tmp_path: Path) -> None:
    host, device = pair
    device.write_text(json.dumps({"schemaVersion": 1, "traceEvents": {"ph": "X"}}))
    done = run_cli("link", "--host", host, "--device", device, tmp_path / "m.json")
    assert_one_error(done, str(device), "expected '[' to open the array 'traceEvents'")


def test_missing_phase_is_accepted_as_the_reference_does(pair: tuple[Path, Path], tmp_path: Path) -> None:
    host, device = pair
    doc = json.loads(device.read_text())
    for event in doc["traceEvents"]:
        event.pop("ph", None)
    device.write_text(json.dumps(doc))
    done = run_cli("link", "--host", host, "--device", device, tmp_path / "m.json")
    assert done.returncode == 0, done.stderr
    assert load_trace(tmp_path / "m.json") == reference_link(host, device, tmp_path / "ref.json", tmp_path)

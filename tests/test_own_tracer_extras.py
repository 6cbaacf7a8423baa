"""Kineto's extras (``with_stack``, ``profile_memory``, ``record_shapes``, ``with_flops``) link exactly
as without them, and the FLOPs the profiler counts agree with ``--roofline``'s.

The user-style capture (tests/capture_own_tracer.py) has every extra on. The same Kineto trace with
each extra's events and fields taken out (python_function events and their ids for ``with_stack``,
the ``[memory]`` instant events for ``profile_memory``, the input shapes and types for
``record_shapes``, and each trace's header flag) gives one trace per combination: none, each alone,
all. Every one must link into the same merged document.

torch 2.13's chrome export leaves the FLOPs out of the Kineto trace even with ``with_flops`` (the
profiler counts them: its events' ``flops``); the capture saved them beside the trace
(``rank0_kineto_flops.json.gz``, by ``External id``)."""

from __future__ import annotations

import copy
import hashlib
from pathlib import Path
from typing import Any

import pytest

from chakra_convert_fast.converter import api

from .traces import REAL_TRACES_DIR, load_trace, read_et, write_trace

pytestmark = [pytest.mark.slow]  # each test links a real capture several times: 10-25 s a test on 2 cores

OWN = REAL_TRACES_DIR / "own_tracer_gpt2_ddp2"
HOST, DEVICE = OWN / "rank0_host.json.gz", OWN / "rank0_device.json.gz"
FLOPS = OWN / "rank0_kineto_flops.json.gz"
EXTRAS = ("with_stack", "profile_memory", "record_shapes", "with_flops")
_SHAPE_ARGS = ("Input Dims", "Input type", "Input Strides", "Concrete Inputs")


def _without(doc: dict[str, Any], extra: str) -> dict[str, Any]:
    """``doc`` as if captured without ``extra``: its events and fields gone, its flag 0."""
    doc[extra] = 0
    events = doc["traceEvents"]
    if extra == "with_stack":
        events[:] = [e for e in events if e.get("cat") != "python_function"]
        for e in events:
            for key in ("Python parent id", "Python id", "Python module id", "Call stack"):
                e.get("args", {}).pop(key, None)
    elif extra == "profile_memory":
        events[:] = [e for e in events if e.get("name") != "[memory]"]
    elif extra == "record_shapes":
        for e in events:
            for key in _SHAPE_ARGS:
                e.get("args", {}).pop(key, None)
    elif extra == "with_flops":
        for e in events:
            e.get("args", {}).pop("flops", None)
    return doc


@pytest.fixture(scope="module")
def linked_without_extras(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The merged document of the host trace with the Kineto trace stripped of every extra (its digest)."""
    folder = tmp_path_factory.mktemp("extras")
    doc = load_trace(DEVICE)
    for extra in EXTRAS:
        _without(doc, extra)
    device = write_trace(doc, folder / "none.json")
    api.link(HOST, device, folder / "none.merged.json")
    return hashlib.sha256((folder / "none.merged.json").read_bytes()).hexdigest()


def test_the_capture_has_every_extra() -> None:
    doc = load_trace(DEVICE)
    cats = {e.get("cat") for e in doc["traceEvents"]}
    assert "python_function" in cats  # with_stack
    assert any(e.get("name") == "[memory]" for e in doc["traceEvents"])  # profile_memory
    assert any("Input Dims" in e.get("args", {}) for e in doc["traceEvents"])  # record_shapes
    assert all(doc[extra] for extra in EXTRAS)


@pytest.mark.parametrize("kept", [(extra,) for extra in EXTRAS] + [EXTRAS], ids=[*EXTRAS, "all"])
def test_extras_link_exactly_as_without_them(kept: tuple[str, ...], linked_without_extras: str, tmp_path: Path) -> None:
    doc = load_trace(DEVICE)
    full = copy.deepcopy(doc)
    for extra in EXTRAS:
        if extra not in kept:
            _without(doc, extra)
    if kept != ("with_flops",):  # torch 2.13 writes no flops field: that trace is the stripped one
        assert doc != _without(copy.deepcopy(full), kept[0])
    device = write_trace(doc, tmp_path / "device.json")
    result = api.link(HOST, device, tmp_path / "merged.json")
    assert result.stats.linked == result.stats.host_ops > 2000 and result.steps.kept == (1,)
    assert hashlib.sha256((tmp_path / "merged.json").read_bytes()).hexdigest() == linked_without_extras


def _attr(node: Any, name: str) -> Any:
    for a in node.attr:
        if a.name == name:
            return getattr(a, a.WhichOneof("value"))
    return None


def test_kineto_flops_agree_with_the_roofline(tmp_path: Path) -> None:
    """Every op the profiler counted FLOPs for: the same FLOPs in the roofline's num_ops of that op
    and the ops under it (the roofline counts work at the innermost op that does it: ``aten::mul``
    by a Python scalar does its work in the ``aten::mul`` under it)."""
    api.convert_pair(HOST, DEVICE, tmp_path / "r.0.et", api.ConvertOptions(astra_sim=True, roofline=True))
    _, nodes = read_et(tmp_path / "r.0.et")
    num_ops = {_attr(n, "rf_id"): _attr(n, "num_ops") for n in nodes}
    host = load_trace(HOST)["nodes"]
    rf_of = {n["id"]: next(a["value"] for a in n["attrs"] if a["name"] == "rf_id") for n in host}
    children: dict[int, list[int]] = {}
    for n in host:
        if n["ctrl_deps"] != n["id"]:
            children.setdefault(n["ctrl_deps"], []).append(n["id"])
    host_of_rf = {rf: node_id for node_id, rf in rf_of.items()}

    def work_under(node_id: int) -> int:  # num_ops 1 marks a wrapper, a view or a copy: no FLOPs of its own
        total, stack = 0, [node_id]
        while stack:
            current = stack.pop()
            value = num_ops.get(rf_of[current]) or 0
            total += value if value > 1 else 0
            stack.extend(children.get(current, ()))
        return total

    kineto = {e["args"]["External id"]: e for e in load_trace(DEVICE)["traceEvents"] if e.get("cat") == "cpu_op"}
    counted = load_trace(FLOPS)["ops"]
    names = {op["name"] for op in counted}
    assert {"aten::addmm", "aten::mm", "aten::bmm", "aten::mul", "aten::add"} <= names
    compared = 0
    for op in counted:
        event = kineto[op["External id"]]
        assert event["name"] == op["name"]
        node_id = host_of_rf[event["args"]["Record function id"]]
        assert work_under(node_id) == op["flops"], (op, node_id)
        compared += 1
    assert compared == len(counted) > 100

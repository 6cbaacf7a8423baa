"""The linker's fast paths (msgspec runs for the host index, the Kineto events and the merged
nodes, written from their raw values) give the document the standard library's paths give, odd
values included (NaN, huge numbers, lone surrogates, the 1.0.1 layout)."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from chakra_convert_fast.converter import jsonstream
from chakra_convert_fast.converter.api import link
from chakra_convert_fast.converter.errors import ConverterError
from chakra_convert_fast.converter.link import hostindex, kineto
from tests.linkcases import edge_case_pair

from .traces import load_trace

FAST_DECODERS = [(hostindex, "_INDEXED_RUNS"), (hostindex, "_RAW_NODE_RUNS"), (kineto, "_EVENT_RUNS")]


def outcome(host: Path, device: Path, target: Path) -> tuple[str, Any]:
    try:
        link(host, device, target)
    except ConverterError as exc:
        return ("error", str(exc))
    # key order aside (a document's meaning), and NaN equal to itself
    return ("ok", json.dumps(json.loads(target.read_text()), sort_keys=True))


def both_ways(host: Path, device: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, Any]:
    with monkeypatch.context() as patch:
        patch.setattr(jsonstream, "BATCH_CHARS", 300)  # many runs, so a refused one leaves others fast
        fast = outcome(host, device, tmp_path / "fast.json")
    with monkeypatch.context() as patch:
        for module, name in FAST_DECODERS:
            patch.setattr(module, name, lambda _text: None)
        slow = outcome(host, device, tmp_path / "slow.json")
    assert fast == slow
    return fast


def rewrite(path: Path, change: Callable[[dict[str, Any]], object]) -> None:
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc, indent=1))


@pytest.mark.parametrize("shuffled", [False, True])
def test_plain_pairs(shuffled: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    host, device = edge_case_pair(tmp_path, layers=40, shuffled=shuffled, gz=False)
    kind, _ = both_ways(host, device, tmp_path, monkeypatch)
    assert kind == "ok"


def _odd_host(doc: dict[str, Any]) -> None:
    rng = random.Random(3)
    for node in rng.sample(doc["nodes"][4:], 12):
        node["ts_extra"] = rng.choice([float("nan"), float("inf"), 1e308 * 10, 2**70, -(2**63) - 1, "\ud800"])
        node["inputs"]["values"].append(rng.choice([float("nan"), "é中😀", [[], {}]]))


def _odd_events(doc: dict[str, Any]) -> None:
    rng = random.Random(4)
    kept = [e for e in doc["traceEvents"] if e.get("cat") in ("cpu_op", "kernel", "cuda_runtime")]
    for event in rng.sample(kept, 10):
        event["args"]["extra"] = rng.choice([float("nan"), 2**70, "\ud800"])
    for event in rng.sample(kept, 3):
        event["args"]["stream"] = float("nan")


def _old_layout(doc: dict[str, Any]) -> None:
    for node in doc["nodes"][10:14]:
        node["parent"] = node.pop("ctrl_deps")
        attrs = {a["name"]: a["value"] for a in node.pop("attrs")}
        node.update(rf_id=attrs["rf_id"], tid=attrs["tid"])


@pytest.mark.parametrize("case", ["odd host values", "odd event values", "1.0.1 nodes", "nan durations"])
def test_odd_values_give_the_same_document(case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    host, device = edge_case_pair(tmp_path, layers=40, gz=False)
    if case == "odd host values":
        rewrite(host, _odd_host)
    elif case == "odd event values":
        rewrite(device, _odd_events)
    elif case == "1.0.1 nodes":
        rewrite(host, _old_layout)
    else:
        rewrite(device, lambda doc: [e.update(dur=float("nan")) for e in doc["traceEvents"][20:24]])
    both_ways(host, device, tmp_path, monkeypatch)


def test_the_fast_paths_are_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Guard for the tests here: every fast decoder reads runs of these inputs."""
    host, device = edge_case_pair(tmp_path, layers=40, gz=False)
    calls: dict[str, int] = {}
    for module, name in FAST_DECODERS:
        original = getattr(module, name)

        def counted(text: str, original: Any = original, name: str = name) -> Any:
            found = original(text)
            calls[name] = calls.get(name, 0) + (found is not None)
            return found

        monkeypatch.setattr(module, name, counted)
    monkeypatch.setattr(jsonstream, "BATCH_CHARS", 300)
    link(host, device, tmp_path / "out.json")
    assert set(calls) == {"_INDEXED_RUNS", "_RAW_NODE_RUNS", "_EVENT_RUNS"} and all(calls.values()), calls
    assert load_trace(tmp_path / "out.json")["nodes"]

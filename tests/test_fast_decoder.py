"""The fast decoder (msgspec, runs of nodes) reads exactly what the standard library reads.

Every case converts the same file twice: with the fast path (runs kept tiny, so that every node
boundary is a run boundary somewhere) and with it turned off; the outcomes (output bytes, or the
error's type and message) must be the same. The table holds what msgspec and ``json`` could read
differently; the randomized tests throw odd values and odd layouts at both.
"""

from __future__ import annotations

import json
import random
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from chakra_convert_fast.converter import ConvertOptions, convert, jsonstream
from chakra_convert_fast.converter.convert import nodesource, reader
from chakra_convert_fast.converter.jsonstream import DecodedRun, JsonObjectStream

from .tracebuild import op, trace, two_threads

HOLE = "@@HOLE@@"
Outcome = tuple[str, Any]


def outcome(source: Path, target: Path) -> Outcome:
    try:
        convert(source, target, ConvertOptions(jobs=1))
    except Exception as exc:  # compared as type and message
        return ("error", f"{type(exc).__name__}: {exc}")
    return ("ok", target.read_bytes())


class FastCount:
    """Counts the nodes that went through the fast path (a plain row)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.rows = 0
        original = reader.FastRecords.row

        def counting(records: reader.FastRecords, node: nodesource.FastNode) -> Any:
            row = original(records, node)
            self.rows += row is not None
            return row

        monkeypatch.setattr(reader.FastRecords, "row", counting)


def both_ways(
    text: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run_chars: int = 64
) -> tuple[Outcome, Outcome, int]:
    """(fast outcome, standard library outcome, nodes read by the fast path)."""
    source = tmp_path / "t.json"
    source.write_text(text, encoding="utf-8")
    with monkeypatch.context() as patch:
        patch.setattr(jsonstream, "BATCH_CHARS", run_chars)
        counter = FastCount(patch)
        fast = outcome(source, tmp_path / "fast.et")
    with monkeypatch.context() as patch:
        patch.setattr(nodesource, "decode_nodes", lambda _text: None)
        slow = outcome(source, tmp_path / "slow.et")
    return fast, slow, counter.rows


def with_hole(node_changes: Callable[[dict[str, Any]], None], raw: str, indent: int | None) -> str:
    """A small trace whose node #3 was changed by ``node_changes`` (which may put ``HOLE`` where
    ``raw``, any JSON text, goes)."""
    nodes = two_threads() + [op(30 + i, "aten::x", 2) for i in range(4)]
    node_changes(nodes[3])
    return json.dumps(trace(nodes), indent=indent).replace(json.dumps(HOLE), raw)


def setter(*path: str) -> Callable[[dict[str, Any]], None]:
    def change(node: dict[str, Any]) -> None:
        target = node
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = HOLE

    return change


def attr(name: str) -> Callable[[dict[str, Any]], None]:
    def change(node: dict[str, Any]) -> None:
        for entry in node["attrs"]:
            if entry["name"] == name:
                entry["value"] = HOLE

    return change


def raw_node(node: dict[str, Any]) -> None:
    """The whole node is the hole (for duplicate keys and other text json.dumps cannot write)."""
    node.clear()
    node["id"] = HOLE


def deep(depth: int) -> str:
    return "[" * depth + "]" * depth


def node_text(body: str) -> str:
    """Node 10 written by hand; ``body`` holds the keys after id (json.dumps cannot repeat a key)."""
    base = op(10, "aten::mm", 2)
    parts = [f'"{k}": {json.dumps(v)}' for k, v in base.items() if k != "id"]
    return "10, " + ", ".join(parts) + (", " + body if body else "")


NUMBERS = [
    "NaN",
    "Infinity",
    "-Infinity",
    "1e400",
    "-1e400",
    "1e-400",
    "-0.0",
    "-0",
    "0.1",
    "5e-324",
    "1.7976931348623157e308",
    "123456789012345678901234567890.5e-10",
    "1E5",
    "2.5",
    "-3",
    str(2**63 - 1),
    str(2**63),
    str(2**64 - 1),
    str(2**64),
    str(-(2**63)),
    str(-(2**63) - 1),
    str(10**30),
    "9" * 4300,
    "9" * 4301,
    "-" + "9" * 4301,
    "true",
    "false",
    "null",
    '"7"',
    "[]",
    "{}",
]
STRINGS = [
    '"\\ud800"',
    '"\\udc00x"',
    '"\\ud83d\\ude00"',
    '"\\"\\\\\\/\\b\\f\\n\\r\\t"',
    '"é中😀"',
    '"\x7f"',
    '"a,b]}{"',
    '"}, {\\"id\\": 5"',
]
CASES: dict[str, tuple[Callable[[dict[str, Any]], None], list[str]]] = {
    "values": (setter("inputs", "values"), [*NUMBERS, *STRINGS, f"[{', '.join(NUMBERS)}]", '""']),
    "shapes": (setter("inputs", "shapes"), ["[[1, 2]]", "NaN", '"\\ud800"', "[" + "7" * 4301 + "]"]),
    "types": (setter("outputs", "types"), ['["Tensor(float)"]', "1e400", *STRINGS]),
    "exclusive_dur": (setter("exclusive_dur"), NUMBERS),
    "skipped key": (setter("ts"), [*NUMBERS, *STRINGS, deep(50), deep(400)]),
    "name": (setter("name"), [*STRINGS, "3", "null"]),
    "cat": (setter("cat"), ['"kernel"', '""', "5", "null", "[1]"]),
    "stream": (setter("stream"), ["7", "null", "1.5", str(2**63), "-1", '"s"']),
    "pg_name": (setter("pg_name"), ['"0"', "5", "null", '""', '"\\ud800"']),
    "inter_thread_dep": (setter("inter_thread_dep"), ["11", "0", "-1", "1.0", "null", str(2**64), "[1]"]),
    "ctrl_deps": (setter("ctrl_deps"), ["2", "-1", "null", '"2"', "[2]", str(2**64), "2.0"]),
    "inputs": (
        setter("inputs"),
        [
            "[]",
            "null",
            '{"values": []}',
            '{"values": [], "shapes": [], "types": [], "x": 1}',
            '{"values": [1], "values": [2], "shapes": [], "types": []}',
        ],
    ),
    "attrs": (
        setter("attrs"),
        [
            "null",
            "[]",
            "{}",
            '[{"name": "rf_id"}]',
            '[{"value": 1}]',
            "[1]",
            '[{"name": "tid", "value": 1}, {"name": "rf_id", "value": 2}]',
        ],
    ),
    "rf_id": (attr("rf_id"), ["1.0", str(2**63), str(-(2**63)), "true", '"1"', "null", "0"]),
    "seq_id": (attr("seq_id"), [str(-(2**63)), str(-(2**63) - 1), "-1", "1.5"]),
    "scope": (attr("scope"), ["5", "-1", "1.5", "null", str(2**63)]),
    "op_schema": (attr("op_schema"), ['"aten::mm(Tensor self) -> Tensor"', "3", "null", '"\\ud800"']),
    "node": (
        raw_node,
        [
            node_text('"name": "other"'),  # a key twice: the last one counts
            node_text('"inputs": {"values": [9], "shapes": [], "types": []}'),
            node_text('"na\\u006de": "escaped key"'),
            node_text('"\\u0069d": 99'),
            node_text('"attrs": [{"name": "name", "value": "from attrs"}]'),
            node_text('"attrs": [{"name": "cat", "value": "gpu"}]'),
            node_text('"attrs": [{"name": "id", "value": 5}]'),
            node_text('"ts": ' + deep(300)),
            '1 ,\n "name"\t:\r"spaced", "ctrl_deps": 2, "inputs": {"values": [], "shapes": [], "types": []},'
            ' "outputs": {"values": [], "shapes": [], "types": []}',
        ],
    ),
}


@pytest.mark.parametrize("indent", [None, 4])
@pytest.mark.parametrize("case", sorted(CASES))
def test_edge_cases_read_the_same(
    case: str, indent: int | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    change, raws = CASES[case]
    for raw in raws:
        text = with_hole(change, raw, indent)
        fast, slow, _ = both_ways(text, tmp_path, monkeypatch)
        assert fast == slow, f"{case} = {raw[:80]}"


def test_the_fast_path_reads_plain_nodes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Guard for the tests here: plain nodes really go through the fast path."""
    text = json.dumps(trace(two_threads() + [op(30 + i, "aten::x", 2) for i in range(40)]))
    fast, slow, rows = both_ways(text, tmp_path, monkeypatch)
    assert fast == slow and fast[0] == "ok"
    assert rows >= 40


def test_nesting_near_the_recursion_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The fast path refuses nesting the standard library might not decode, whatever the limit."""
    limit = sys.getrecursionlimit()
    for depth in [*range(limit - 120, limit + 20, 10), 5 * limit]:
        text = with_hole(setter("ts"), deep(depth), None)
        fast, slow, _ = both_ways(text, tmp_path, monkeypatch)
        assert fast == slow, depth


# -- randomized ----------------------------------------------------------------------------------
def random_number(rng: random.Random) -> str:
    return rng.choice(
        [
            lambda: str(rng.randint(-(2**70), 2**70)),
            lambda: str(rng.randint(-100, 20000)),
            lambda: repr(rng.uniform(-1e6, 1e6)),
            lambda: (
                f"{rng.randint(0, 10 ** rng.randint(1, 30))}.{rng.randint(0, 10 ** rng.randint(1, 30))}"
                f"e{rng.randint(-340, 320)}"
            ),
            lambda: rng.choice(["NaN", "Infinity", "-Infinity", "-0", "-0.0", "1E+2", "0e0", "1e400"]),
        ]
    )()


def random_string(rng: random.Random) -> str:
    pieces = [
        "a",
        "é",
        "😀",
        "\\n",
        '\\"',
        "\\\\",
        "\\u00e9",
        "\\ud83d\\ude00",
        ",",
        "]",
        "}",
        '{\\"id\\":',
        " ",
        "\\ud800",
    ]
    return '"' + "".join(rng.choice(pieces) for _ in range(rng.randint(0, 6))) + '"'


def random_value(rng: random.Random, depth: int = 0) -> str:
    kind = rng.random()
    if depth > 3 or kind < 0.4:
        return random_number(rng)
    if kind < 0.6:
        return random_string(rng)
    if kind < 0.65:
        return rng.choice(["true", "false", "null"])
    if kind < 0.85:
        return "[" + ", ".join(random_value(rng, depth + 1) for _ in range(rng.randint(0, 4))) + "]"
    keys = [random_string(rng) for _ in range(rng.randint(0, 3))]
    return "{" + ", ".join(f"{k}: {random_value(rng, depth + 1)}" for k in keys) + "}"


def random_node(rng: random.Random, node_id: int) -> dict[str, Any]:
    node = op(
        node_id,
        rng.choice(["aten::mm", "aten::add", "Optimizer.step#SGD.step", "ncclKernel_x"]),
        rng.choice([2, 3, node_id - 1]),
        tid=rng.choice([1, 2]),
    )
    if rng.random() < 0.3:
        node["cat"] = "kernel"
    for key in ("values", "shapes", "types"):
        if rng.random() < 0.5:
            node["inputs"][key] = HOLE
    for key in ("exclusive_dur", "ts", "stream", "inter_thread_dep", "pg_name"):
        if rng.random() < 0.2:
            node[key] = HOLE
    for entry in node["attrs"]:
        if rng.random() < 0.05:
            entry["value"] = HOLE
    return node


@pytest.mark.parametrize("seed", range(40))
def test_random_traces_read_the_same(seed: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(seed)
    nodes = two_threads() + [random_node(rng, 30 + i) for i in range(30)]
    text = json.dumps(trace(nodes), indent=rng.choice([None, 1, 4]))
    while HOLE in text:
        text = text.replace(json.dumps(HOLE), random_value(rng), 1)
    fast, slow, _ = both_ways(text, tmp_path, monkeypatch, run_chars=rng.choice([1, 200, 3000]))
    assert fast == slow


@pytest.mark.parametrize("seed", range(20))
def test_random_values_decode_like_json(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(200):
        raw = random_value(rng)
        text = nodesource.value_text(raw.encode())
        if text is not None:
            assert text == str(json.loads(raw)), raw
        nodes = nodesource.decode_nodes(
            f'[{{"id": {raw}, "name": {raw}, "ctrl_deps": {raw}, "inputs": {raw}, "outputs": {raw}, "cat": {raw}}}]'
        )
        if nodes is not None:
            value = json.loads(raw)
            assert [repr(getattr(nodes[0], k)) for k in ("id", "name", "ctrl_deps", "cat")] == [repr(value)] * 4


# -- the stream's runs ---------------------------------------------------------------------------
def test_runs_start_and_end_at_elements(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs are cut at ``}, {"id":``, which may lie inside an element: such a run is refused
    (the decoder sees an incomplete value) and those elements are decoded one by one."""
    monkeypatch.setattr(jsonstream, "BATCH_CHARS", 1)
    nodes = [
        {"id": 1, "x": [{"id": 2}, {"id": 3}]},
        {"id": 4},
        {"id": 5, "y": {"z": [{"id": 6}, {"id": 7}]}},
        {"id": 8},
        {"id": 9},
    ]
    doc = {"schema": "s", "nodes": nodes, "after": 1}
    path = tmp_path / "doc.json"
    path.write_text(json.dumps(doc))
    accepted: list[str] = []
    refused: list[str] = []

    def decode(text: str) -> list[Any] | None:
        try:
            values = list(json.loads(text))
        except ValueError:
            refused.append(text)
            return None
        accepted.append(text)
        return values

    out: list[Any] = []
    with JsonObjectStream(path, {"nodes"}, batch=decode) as stream:
        for key, value in stream.items():
            if key == "nodes":
                for item in value:
                    out.extend(item) if type(item) is DecodedRun else out.append(item)
    assert out == nodes
    assert '[{"id": 1, "x": [{"id": 2}]' in refused  # cut inside node 1, at '}, {"id": 3'
    assert accepted  # runs of whole nodes


def random_list_text(rng: random.Random, depth: int = 0) -> str:
    """Lists of integers and short strings, with random blank space (what ``value_text`` writes
    without decoding, and its near misses)."""
    items = []
    for _ in range(rng.randint(0, 5)):
        kind = rng.random()
        if kind < 0.4:
            items.append(str(rng.choice([0, -1, 7, -(2**63), 2**64, rng.randint(-(10**20), 10**20)])))
        elif kind < 0.7:
            items.append(json.dumps("".join(rng.choice("ab:0-_<>()é ,'\"\\\x7f") for _ in range(rng.randint(0, 5)))))
        elif kind < 0.75:
            items.append(rng.choice(["-0", "0.5", "true", "null", "1e5", "{}"]))
        elif depth < 3:
            items.append(random_list_text(rng, depth + 1))
    blank = lambda: rng.choice(["", "", " ", "\n    ", "\t"])  # noqa: E731
    return "[" + blank() + ("," + blank()).join(items) + blank() + "]"


@pytest.mark.parametrize("seed", range(10))
def test_lists_are_written_like_str(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(500):
        raw = random_list_text(rng)
        assert nodesource.value_text(raw.encode()) == str(json.loads(raw)), raw

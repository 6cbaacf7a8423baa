"""Reading the second half in a worker process changes nothing in the output or the errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chakra_convert_fast.converter import ConvertOptions, convert
from chakra_convert_fast.converter.convert import parallel
from chakra_convert_fast.converter.errors import TraceContentError
from chakra_convert_fast.fixtures.generate import generate_merged, make_config

from .tracebuild import op, trace, two_threads


@pytest.fixture(autouse=True)
def split_small_files(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(parallel, "MIN_SPLIT_BYTES", 0)


def both_ways(source: Path, tmp_path: Path) -> tuple[bytes, bytes]:
    convert(source, tmp_path / "split.et")
    convert(source, tmp_path / "single.et", ConvertOptions(use_second_core=False))
    return (tmp_path / "split.et").read_bytes(), (tmp_path / "single.et").read_bytes()


@pytest.mark.parametrize("order", ["ascending", "shuffled"])
def test_split_output_is_identical(order: str, tmp_path: Path) -> None:
    config = make_config("gpt2", layers=2, ranks=2, comm_mix="all")
    source = generate_merged(tmp_path / "t.json", config=config, order=order, indent=None, seed=2).path
    assert parallel.find_split(str(source), 0) is not None
    split, single = both_ways(source, tmp_path)
    assert split == single
    assert not list(tmp_path.glob(".chakra-tails-*"))


def test_metadata_after_the_nodes_comes_from_the_worker(tmp_path: Path) -> None:
    doc = trace(two_threads() * 1)
    finish = doc.pop("finish_ts")
    source = tmp_path / "t.json"
    source.write_text(json.dumps({**doc, "finish_ts": finish}))
    split, single = both_ways(source, tmp_path)
    assert split == single


def test_a_false_boundary_inside_a_node_is_detected(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``}, {"id":`` can only match structurally (quotes are escaped in strings), but it may
    be inside a node: then the first process never finds a node starting there and reads on."""
    nodes = two_threads()
    nodes[3]["inputs"]["values"] = [{"id": 98}, {"id": 99}]
    source = tmp_path / "t.json"
    source.write_text(json.dumps(trace(nodes)))
    fake = source.read_bytes().index(b'{"id": 99')
    monkeypatch.setattr(parallel, "find_split",
                        lambda path, min_bytes: parallel.SplitPoint(fake, fake))  # ASCII: bytes == chars
    split, single = both_ways(source, tmp_path)
    assert split == single


def test_errors_in_the_second_half_name_the_right_node(tmp_path: Path) -> None:
    nodes = two_threads() + [op(100 + i, "aten::x", 2) for i in range(40)]
    del nodes[-1]["inputs"]
    source = tmp_path / "t.json"
    source.write_text(json.dumps(trace(nodes)))
    assert parallel.find_split(str(source), 0).byte_offset > source.stat().st_size // 2
    with pytest.raises(TraceContentError, match=rf"node #{len(nodes) - 1} .*missing required field 'inputs'"):
        convert(source, tmp_path / "o.et")


def test_duplicate_ids_across_the_halves(tmp_path: Path) -> None:
    nodes = two_threads() + [op(100 + i, "aten::x", 2) for i in range(40)]
    nodes[-1]["id"] = 10
    source = tmp_path / "t.json"
    source.write_text(json.dumps(trace(nodes)))
    with pytest.raises(TraceContentError, match="duplicate node id 10"):
        convert(source, tmp_path / "o.et")
    assert not (tmp_path / "o.et").exists()


def test_no_split_for_gzip(tmp_path: Path) -> None:
    config = make_config("gpt2", layers=1, ranks=2)
    source = generate_merged(tmp_path / "t.json.gz", config=config, seed=1).path
    assert parallel.find_split(str(source), 0) is None

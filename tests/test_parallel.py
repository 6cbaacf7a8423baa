"""Reading a file in byte ranges, a process each (``--jobs N``), changes nothing in the output or
the errors, whether the split points are node boundaries or fall inside nodes."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from chakra_convert_fast.converter import ConvertOptions, convert
from chakra_convert_fast.converter.convert import feed, parallel, writer
from chakra_convert_fast.converter.errors import ConverterError, TraceContentError
from chakra_convert_fast.fixtures.generate import generate_merged, make_config

from .tracebuild import op, trace, two_threads
from .traces import ROOT

pytestmark = [pytest.mark.slow]

JOBS = (1, 2, 3, 5)


@pytest.fixture(autouse=True)
def split_small_files(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(parallel, "MIN_SPLIT_BYTES", 0)
    monkeypatch.setattr(parallel, "MIN_RANGE_BYTES", 1)
    monkeypatch.setattr(writer, "_ROWS_PER_WRITER", 7)  # writing split too


def outcome(source: Path, target: Path, jobs: int) -> tuple[str, object]:
    try:
        result = convert(source, target, ConvertOptions(jobs=jobs))
    except ConverterError as exc:
        return ("error", str(exc))
    return ("ok", (target.read_bytes(), result.nodes_read, result.nodes_written))


def every_way(source: Path, tmp_path: Path) -> tuple[str, object]:
    """The one outcome of converting ``source`` with every number of jobs."""
    outcomes = {jobs: outcome(source, tmp_path / f"out.{jobs}.et", jobs) for jobs in JOBS}
    assert len({repr(o) for o in outcomes.values()}) == 1, outcomes
    assert not list(tmp_path.glob(".chakra-tails-*"))
    return outcomes[1]


def many_nodes(count: int = 60) -> list[dict]:
    return two_threads() + [
        op(100 + i, "aten::x", 2, inter_thread_dep=20 if i % 7 == 0 else None) for i in range(count)
    ]


@pytest.mark.parametrize("order", ["ascending", "shuffled"])
@pytest.mark.parametrize("indent", [None, 4])
def test_output_is_identical_for_any_number_of_jobs(order: str, indent: int | None, tmp_path: Path) -> None:
    config = make_config("gpt2", layers=2, ranks=2, comm_mix="all")
    source = generate_merged(tmp_path / "t.json", config=config, order=order, indent=indent, seed=2).path
    assert len(parallel.find_splits(str(source), 5)) == 4
    kind, _ = every_way(source, tmp_path)
    assert kind == "ok"


def test_metadata_after_the_nodes_comes_from_the_last_range(tmp_path: Path) -> None:
    doc = trace(many_nodes())
    finish = doc.pop("finish_ts")
    source = tmp_path / "t.json"
    source.write_text(json.dumps({**doc, "finish_ts": finish}))
    assert every_way(source, tmp_path)[0] == "ok"


def test_false_boundaries_inside_nodes_are_detected(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``}, {"id":`` can only match structurally (quotes are escaped in strings), but it may be
    inside a node: then no reader finds a node starting there, and the one before reads on."""
    nodes = many_nodes()
    for k in (10, 30, 31, 50):
        nodes[k]["inputs"]["values"] = [{"id": 900 + k}, {"id": 950 + k}]
    source = tmp_path / "t.json"
    source.write_text(json.dumps(trace(nodes)))
    text = source.read_bytes()
    fakes = [text.index(b'{"id": %d' % (950 + k)) for k in (10, 30, 31, 50)]
    real = [text.index(b'{"id": %d, "name"' % (100 + k)) for k in (20, 40)]
    for splits in (fakes, sorted(fakes + real), sorted(fakes[1:3] + real[:1])):
        monkeypatch.setattr(parallel, "find_splits", lambda path, jobs, s=splits: s[: jobs - 1])
        assert every_way(source, tmp_path)[0] == "ok"


@pytest.mark.parametrize("broken", [5, 25, 45, 64])
def test_errors_in_any_range_name_the_right_node(broken: int, tmp_path: Path) -> None:
    nodes = many_nodes()
    del nodes[broken]["inputs"]
    source = tmp_path / "t.json"
    source.write_text(json.dumps(trace(nodes)))
    kind, message = every_way(source, tmp_path)
    assert kind == "error" and f"node #{broken} " in str(message) and "missing required field 'inputs'" in str(message)


@pytest.mark.parametrize("where", [0.3, 0.6, 0.9])
def test_invalid_json_in_any_range_is_reported_at_its_character(where: float, tmp_path: Path) -> None:
    """Character positions count from the file's start in every range, multibyte text included."""
    nodes = many_nodes()
    for node in nodes[::3]:
        node["name"] = "é中😀 " + node["name"]
    source = tmp_path / "t.json"
    text = json.dumps(trace(nodes), ensure_ascii=False)
    cut = text.index('"ctrl_deps"', int(len(text) * where))
    source.write_text(text[:cut] + "," + text[cut:], encoding="utf-8")
    kind, message = every_way(source, tmp_path)
    assert kind == "error" and f"invalid JSON at character {cut}:" in str(message)


@pytest.mark.parametrize("broken", [4, 30, 60])
def test_write_errors_in_any_slice_name_the_right_node(broken: int, tmp_path: Path) -> None:
    nodes = many_nodes()
    nodes[broken]["name"] = "bad \ud800 name"  # refused when its name field is encoded (written)
    source = tmp_path / "t.json"
    source.write_text(json.dumps(trace(nodes)))
    kind, message = every_way(source, tmp_path)
    assert kind == "error" and f"node #{broken} " in str(message) and "not valid Unicode" in str(message)


def test_duplicate_ids_across_ranges(tmp_path: Path) -> None:
    nodes = many_nodes()
    nodes[-1]["id"] = 10
    source = tmp_path / "t.json"
    source.write_text(json.dumps(trace(nodes)))
    kind, message = every_way(source, tmp_path)
    assert kind == "error" and "duplicate node id 10" in str(message)
    with pytest.raises(TraceContentError, match="duplicate node id 10"):
        convert(source, tmp_path / "o.et", ConvertOptions(jobs=3))
    assert not (tmp_path / "o.et").exists()


def test_stages_are_timed(tmp_path: Path) -> None:
    source = tmp_path / "t.json"
    source.write_text(json.dumps(trace(many_nodes())))
    result = convert(source, tmp_path / "o.et", ConvertOptions(jobs=3))
    assert result.processes == 3
    assert 0 < result.stages.sequential <= result.seconds
    assert 0 < result.sequential_fraction <= 1


def test_no_split_for_gzip_or_one_job(tmp_path: Path) -> None:
    config = make_config("gpt2", layers=1, ranks=2)
    source = generate_merged(tmp_path / "t.json.gz", config=config, seed=1).path
    assert parallel.find_splits(str(source), 4) == []
    plain = generate_merged(tmp_path / "t.json", config=config, seed=1).path
    assert parallel.find_splits(str(plain), 1) == []
    assert len(parallel.find_splits(str(plain), 4)) == 3


# -- gzip: this process decompresses, workers read chunks ------------------------------------------
@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(feed, "MIN_FEED_BYTES", 0)
    monkeypatch.setattr(feed, "CHUNK_BYTES", 2000)


def gzipped(doc_text: str, path: Path) -> Path:
    path.write_bytes(gzip.compress(doc_text.encode("utf-8")))
    return path


@pytest.mark.usefixtures("small_chunks")
@pytest.mark.parametrize("indent", [None, 4])
def test_gzip_fed_to_workers_is_identical(indent: int | None, tmp_path: Path) -> None:
    config = make_config("gpt2", layers=2, ranks=2, comm_mix="all")
    source = generate_merged(tmp_path / "t.json.gz", config=config, order="shuffled", indent=indent, seed=3).path
    assert feed.should_feed(str(source), 2)
    assert every_way(source, tmp_path)[0] == "ok"
    assert convert(source, tmp_path / "o.et", ConvertOptions(jobs=3)).processes == 4


@pytest.mark.usefixtures("small_chunks")
@pytest.mark.parametrize(
    "change",
    [
        "none",
        "false boundaries",
        "error",
        "invalid JSON",
        "metadata after",
        "empty array",
        "no array",
        "duplicate id",
        "duplicate key after",
    ],
)
def test_gzip_chunks_read_like_one_process(change: str, tmp_path: Path) -> None:
    nodes = many_nodes(120)
    for node in nodes[::4]:
        node["name"] = "é中😀 " + node["name"]
    doc = trace(nodes)
    if change == "false boundaries":
        for k in range(10, 120, 9):
            nodes[k]["inputs"]["values"] = [{"id": 9000 + k}, {"id": 9500 + k}]
    elif change == "error":
        del nodes[77]["inputs"]
    elif change == "metadata after":
        doc = {**{k: v for k, v in doc.items() if k != "finish_ts"}, "finish_ts": doc["finish_ts"]}
    elif change == "empty array":
        doc["nodes"] = []
    elif change == "no array":
        del doc["nodes"]
    elif change == "duplicate id":
        nodes[100]["id"] = 10
    text = json.dumps(doc, ensure_ascii=False)
    if change == "invalid JSON":
        cut = text.index('"ctrl_deps"', len(text) * 2 // 3)
        text = text[:cut] + "," + text[cut:]
    elif change == "duplicate key after":
        text = text[:-1] + ', "pid": 7}'
    every_way(gzipped(text, tmp_path / "t.json.gz"), tmp_path)


@pytest.mark.usefixtures("small_chunks")
@pytest.mark.parametrize("keep", [0.3, 0.7, 0.999])
def test_truncated_gzip_fails_where_one_process_does(keep: float, tmp_path: Path) -> None:
    packed = gzip.compress(json.dumps(trace(many_nodes(200))).encode())
    source = tmp_path / "t.json.gz"
    source.write_bytes(packed[: int(len(packed) * keep)])
    kind, message = every_way(source, tmp_path)
    assert kind == "error" and "gzip" in str(message)


_STOPPED_EARLY = """
import gzip, json, sys
from chakra_convert_fast.converter import ConvertOptions, convert
from chakra_convert_fast.converter.convert import feed
from chakra_convert_fast.converter.errors import ConverterError
from tests.tracebuild import op, trace, two_threads
feed.MIN_FEED_BYTES, feed.CHUNK_BYTES = 0, 2000
nodes = two_threads() + [op(100 + i, f"aten::mm{i}", 2) for i in range(120)]
nodes[-20]["id"] = nodes[10]["id"]
path, out = sys.argv[1] + "/t.json.gz", sys.argv[1] + "/o.et"
with open(path, "wb") as fh:
    fh.write(gzip.compress(json.dumps(trace(nodes)).encode()))
for _ in range(int(sys.argv[2])):
    try:
        convert(path, out, ConvertOptions(jobs=2))
    except ConverterError:
        pass
"""


def test_gzip_workers_stop_when_the_reader_stops_early(tmp_path: Path) -> None:
    """A duplicate id stops the reader while workers wait for chunks: closing them must end them,
    every time (a SIGTERM alone can land on a worker's other thread and leave its read blocked:
    that hung about one run in six)."""
    done = subprocess.run(
        [sys.executable, "-c", _STOPPED_EARLY, str(tmp_path), "30"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.json.gz"]

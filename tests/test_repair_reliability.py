"""``repair`` and cut-off traces (issue 40): a complete trace saved after a cut one is kept (the
salvage of the cut one was kept instead), a gzip file cut off is salvaged (it was refused), and a
cut Kineto trace is not sent to ``repair``, which cannot help it."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from chakra_convert_fast.converter.repair import repair

from .clirun import assert_one_error, listing, run_cli
from .traces import REAL_TRACES_DIR


def host_trace(nodes: int, pid: int = 1) -> dict[str, Any]:
    return {
        "schema": "1.0.1",
        "pid": pid,
        "time": "2026-01-01",
        "start_ts": 1,
        "nodes": [
            {
                "id": i,
                "name": f"aten::op{i}",
                "ctrl_deps": 1 if i > 1 else 0,
                "inputs": {"values": [[i, i + 1]], "shapes": [[2, 3]], "types": ["Tensor(float)"]},
                "attrs": [{"name": "rf_id", "type": "uint64", "value": i}],
            }
            for i in range(1, nodes + 1)
        ],
        "finish_ts": 9,
    }


def _cut_after(text: str, nodes: int, extra: str) -> str:
    """``text`` (one trace) cut after its first ``nodes`` nodes, then ``extra`` (the start of a node)."""
    return text[: text.index(f'{{"id": {nodes + 1},')] + extra


@pytest.mark.parametrize(
    ("case", "extra"),
    [
        ("between two nodes", ""),
        ("inside a node", '{"id": 6, "name": "aten::op6", "inputs": {"values": [[6, '),
        ("inside a string", '{"id": 6, "name": "aten::o'),
        ("inside an escape", '{"id": 6, "name": "a\\'),
    ],
)
@pytest.mark.parametrize("gz", [False, True])
def test_a_complete_trace_after_a_cut_one_is_kept(case: str, extra: str, gz: bool, tmp_path: Path) -> None:
    """A save cut after 5 nodes, then a complete save of 20: the 20 are kept, and the summary
    says a cut-off trace was dropped before them (it kept the 5 salvaged nodes and dropped the 20)."""
    cut = _cut_after(json.dumps(host_trace(20, pid=1)), 5, extra)
    complete = host_trace(20, pid=2)
    text = cut + "\n" + json.dumps(complete) + "\n"
    source = tmp_path / ("two.json.gz" if gz else "two.json")
    source.write_bytes(gzip.compress(text.encode()) if gz else text.encode())
    result = repair(source, tmp_path / "fixed.json")
    assert json.loads((tmp_path / "fixed.json").read_text()) == complete
    assert result.salvaged is None and result.cut_before is not None
    assert "kept the complete trace saved after a cut-off one" in result.describe()
    done = run_cli("repair", source, tmp_path / "cli.json")
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "cli.json").read_text()) == complete


def test_a_cut_trace_alone_is_still_salvaged(tmp_path: Path) -> None:
    """The last thing in the file a complete node, not a trace: the salvage, as before."""
    source = tmp_path / "cut.json"
    source.write_text(_cut_after(json.dumps(host_trace(20)), 5, ""))
    result = repair(source, tmp_path / "fixed.json")
    assert result.salvaged is not None and result.salvaged.nodes == 5
    assert [n["id"] for n in json.loads((tmp_path / "fixed.json").read_text())["nodes"]] == [1, 2, 3, 4, 5]


def test_a_cut_gzip_file_is_salvaged(tmp_path: Path) -> None:
    """A real host trace whose .json.gz was cut half way (a copy that stopped): the nodes its
    compressed half holds are kept (repair said "cannot read (corrupt or truncated gzip data?)")."""
    data = (REAL_TRACES_DIR / "cpu_gpt2_ddp2" / "rank0_host.json.gz").read_bytes()
    source = tmp_path / "cut.json.gz"
    source.write_bytes(data[: len(data) // 2])
    done = run_cli("repair", source, tmp_path / "fixed.json")
    assert done.returncode == 0, done.stderr
    assert "the gzip data was cut off too" in done.stderr
    fixed = json.loads((tmp_path / "fixed.json").read_text())
    assert len(fixed["nodes"]) > 100 and fixed["finish_ts"] is None
    # a whole object followed by a cut gzip trailer: the object, and the cut is said
    whole = gzip.compress(json.dumps(host_trace(3)).encode())
    (tmp_path / "trailer.json.gz").write_bytes(whole[:-4])
    result = repair(tmp_path / "trailer.json.gz", tmp_path / "t.json")
    assert json.loads((tmp_path / "t.json").read_text()) == host_trace(3) and result.gzip_cut


@pytest.mark.parametrize("gz", [False, True])
def test_a_cut_kineto_trace_is_not_sent_to_repair(gz: bool, tmp_path: Path) -> None:
    """`convert` of a Kineto trace cut half way says to export or copy it again (it pointed to
    repair, which keeps host-trace nodes and cannot salvage a Kineto trace); so does `repair` (it
    said it "holds no complete JSON object to keep")."""
    text = gzip.decompress((REAL_TRACES_DIR / "kineto_public" / "hta_a100_nccl_rank0of2.json.gz").read_bytes())
    cut = text[: len(text) // 2]
    source = tmp_path / ("cut.json.gz" if gz else "cut.json")
    source.write_bytes(gzip.compress(cut) if gz else cut)
    done = run_cli("convert", source, tmp_path / "out.et")
    line = assert_one_error(done, "truncated JSON", "export or copy it again")
    assert "repair" not in line
    done = run_cli("repair", source, tmp_path / "fixed.json")
    assert_one_error(done, "a Kineto trace cut off before its end: repair salvages host traces", "export or copy")
    assert listing(tmp_path) == [source.name]

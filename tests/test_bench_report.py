"""``python -m bench.report``: pytest-benchmark JSON in, Markdown table and PNG out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.report import load_rows, main, markdown

MB = 1024 * 1024


def _bench(name: str, nodes: int, ours_s: float, ref_s: float | None) -> dict[str, object]:
    info: dict[str, object] = {"nodes": nodes, "ranks": 2, "ours_s": ours_s, "ours_peak_rss": 50 * MB}
    if ref_s is not None:
        info.update(ref_s=ref_s, ref_peak_rss=500 * MB)
    return {"name": name, "extra_info": info}


@pytest.fixture
def saved(tmp_path: Path) -> Path:
    path = tmp_path / "0001_run.json"
    doc = {"benchmarks": [_bench("big", 1_000_000, 40.0, None), _bench("small", 10_000, 1.0, 4.0)]}
    path.write_text(json.dumps(doc))
    return path


def test_rows_sorted_with_ratios(saved: Path) -> None:
    rows = load_rows([saved])
    assert [r.nodes for r in rows] == [10_000, 1_000_000]
    assert rows[0].time_ratio == pytest.approx(0.25) and rows[0].mem_ratio == pytest.approx(0.1)
    assert rows[1].time_ratio is None
    table = markdown(rows)
    assert "| 2-rank GPT-2 | 10,000 | 1.00 | 4.00 | 0.25 | 50 | 500 | 0.100 | 10,000 |" in table
    assert "skipped" in table.splitlines()[-1]


def test_main_writes_table_and_png(saved: Path, tmp_path: Path) -> None:
    import matplotlib  # noqa: F401 - a missing dependency fails, never skips
    out = tmp_path / "out"
    assert main([str(saved), "--out", str(out)]) == 0
    assert (out / "benchmark.md").read_text().startswith("| trace |")
    assert (out / "benchmark.png").read_bytes()[:4] == b"\x89PNG"


def test_main_without_results_fails_cleanly(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty.json"
    empty.write_text('{"benchmarks": []}')
    assert main([str(empty), "--out", str(tmp_path)]) == 2
    assert "no benchmark rows" in capsys.readouterr().err

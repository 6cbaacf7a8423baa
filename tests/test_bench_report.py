"""``python -m bench.report``: pytest-benchmark JSON in, Markdown table and PNG out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.report import load_rows, main, markdown

MB = 1024 * 1024


def _bench(name: str, nodes: int, ours_s: float, ref_s: float | None) -> dict[str, object]:
    info: dict[str, object] = {
        "nodes": nodes,
        "ranks": 2,
        "ours_s": ours_s,
        "ours_peak_rss": 50 * MB,
        "ours_peak_pss": 40 * MB,
    }
    if ref_s is not None:
        info.update(ref_s=ref_s, ref_peak_rss=500 * MB, ref_peak_pss=400 * MB)
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
    assert rows[0].pss_ratio == pytest.approx(0.1) and rows[1].pss_ratio is None
    assert rows[1].time_ratio is None
    table = markdown(rows)
    assert "| 2-rank GPT-2 | 10,000 | 1.00 | 4.00 | 0.25 | 50 / 40 | 500 / 400 | 0.100 / 0.100 | 10,000 |" in table
    assert "skipped" in table.splitlines()[-1]


@pytest.mark.slow
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


def test_scaling_and_ray_tables(tmp_path: Path) -> None:
    scaling = [
        {
            "kind": "scaling",
            "packing": p,
            "nodes": 1000,
            "jobs": j,
            "ours_s": s,
            "ours_peak_rss": 10 * MB,
            "ours_peak_pss": 8 * MB,
            "processes": j,
            "sequential_fraction": 0.3,
        }
        for p, j, s in (("json", 1, 4.0), ("json", 2, 2.5))
    ]
    ray = [
        {
            "kind": "ray",
            "ranks": 16,
            "nodes_per_rank": 1000,
            "ray_nodes": 2,
            "local_s": 9.0,
            "ray_s": 10.0,
            "rank_seconds_mean": 1.5,
            "rank_seconds_max": 2.0,
        }
    ]
    path = tmp_path / "run.json"
    path.write_text(
        json.dumps(
            {
                "benchmarks": [{"name": "x", "extra_info": i} for i in scaling + ray]
                + [_bench("small", 10_000, 1.0, 4.0)]
            }
        )
    )
    assert [r.nodes for r in load_rows([path])] == [10_000]  # scaling and Ray rows are not conversions
    assert main([str(path), "--out", str(tmp_path), "--machines", "4", "--cores", "2"]) == 0
    table = (tmp_path / "benchmark.md").read_text()
    assert "| json | 1,000 | 2 | 2 | 2.50 | 1.60 | 30% | 10 / 8 |" in table
    assert "| 16 | 1,000 | 2 | 9.00 | 10.00 | 1.50 | 2.00 |" in table
    # 1,024 ranks on 4 x 2 cores: 128 waves of 1.5 s x 1,000 (1M nodes / 1,000 per rank)
    assert "128 wave(s) x 1,500 s a rank" in table

"""``--jobs N`` scaling: one trace (plain JSON, then gzipped) converted with each N of
``--jobs-list``, more than the machine's cores included; the summary line gives the share of the
run spent in the sequential stages (merging the processes' rows, the graph, writing)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench.conftest import REPO
from bench.measure import measure, ours_command, summary_figures


def test_jobs_scaling(
    benchmark: Any, trace_for: Any, scaling_nodes: int, tmp_path: Path, jobs: int, packing: str
) -> None:
    src, nodes = trace_for(scaling_nodes, 2, gz=packing == "gzip")
    runs = []
    benchmark.pedantic(
        lambda: runs.append(measure(ours_command(src, tmp_path / "out.et", "--jobs", str(jobs)), cwd=REPO)),
        rounds=1,
        iterations=1,
    )
    run = runs[-1]
    if run.returncode != 0:
        pytest.fail(f"--jobs {jobs} failed with exit code {run.returncode}:\n{run.stderr}")
    benchmark.extra_info.update(
        kind="scaling",
        nodes=nodes,
        jobs=jobs,
        packing=packing,
        ours_s=run.seconds,
        ours_peak_rss=run.peak_rss_bytes,
        ours_peak_pss=run.peak_pss_bytes,
        input_bytes=src.stat().st_size,
        **summary_figures(run.stderr),
    )

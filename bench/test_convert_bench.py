"""Time and peak memory of chakra-convert-fast and of the reference, side by side, per trace size.

Each converter runs in its own child process; pytest-benchmark records our run, and ``extra_info``
carries both sides' numbers, the ratios (ours / reference) and nodes per second, which
``python -m bench.report`` turns into the README's table and plot.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench.conftest import REPO
from bench.measure import Run, measure, ours_command, reference_command, reference_memory_problem, summary_figures


def _check(run: Run, who: str) -> None:
    if run.returncode != 0:
        pytest.fail(f"{who} failed with exit code {run.returncode}:\n{run.stderr}")


def test_convert(benchmark: Any, trace_for: Any, ref_max_nodes: int, tmp_path: Path, size: int, ranks: int) -> None:
    src, nodes = trace_for(size, ranks)
    runs: list[Run] = []

    def ours() -> None:
        runs.append(measure(ours_command(src, tmp_path / "ours.et"), cwd=REPO))

    benchmark.pedantic(ours, rounds=1, iterations=1)
    _check(runs[-1], "chakra-convert-fast")
    info: dict[str, Any] = {
        "nodes": nodes,
        "ranks": ranks,
        "input_bytes": src.stat().st_size,
        "ours_s": runs[-1].seconds,
        "ours_peak_rss": runs[-1].peak_rss_bytes,
        "ours_peak_pss": runs[-1].peak_pss_bytes,
        "ours_nodes_per_s": nodes / runs[-1].seconds,
        **summary_figures(runs[-1].stderr),
    }
    problem = reference_memory_problem(nodes) if nodes <= ref_max_nodes else None
    if problem is not None:
        info["ref_skipped"] = problem
        print(f"\n{src.name}: reference skipped: {problem}")
    elif nodes <= ref_max_nodes:
        ref = measure(reference_command(src, tmp_path / "ref.et"), cwd=REPO)
        _check(ref, "reference chakra_converter")
        info.update(
            ref_s=ref.seconds,
            ref_peak_rss=ref.peak_rss_bytes,
            ref_peak_pss=ref.peak_pss_bytes,
            ref_nodes_per_s=nodes / ref.seconds,
            time_ratio=runs[-1].seconds / ref.seconds,
            mem_ratio=runs[-1].peak_rss_bytes / ref.peak_rss_bytes,
            same_output=(tmp_path / "ours.et").read_bytes() == (tmp_path / "ref.et").read_bytes(),
        )
    benchmark.extra_info.update(info)
    if "same_output" in info:
        assert info["same_output"], f"{src.name}: our .et differs from chakra_converter's"

"""The CI gate: on one ~100k-node GPT-2 DDP trace, ours must take at most 0.15x the reference's time
and use at least 5x less peak memory. Ratios only, never absolute times (CI machines vary)."""

from __future__ import annotations

from pathlib import Path

from bench.conftest import REPO
from bench.measure import measure, ours_command, reference_command
from chakra_convert_fast.fixtures.generate import generate_merged, make_config

QUICK_NODES = 100_000
MIN_MEMORY_FACTOR = 5.0
MAX_TIME_RATIO = 0.15


def test_quick_ratio(tmp_path: Path) -> None:
    src = tmp_path / "quick.json"
    res = generate_merged(src, config=make_config("gpt2", layers=12, ranks=2), nodes=QUICK_NODES, indent=None)
    ours = measure(ours_command(src, tmp_path / "ours.et"), cwd=REPO, timeout=150)
    assert ours.returncode == 0, ours.stderr
    ref = measure(reference_command(src, tmp_path / "ref.et"), cwd=REPO, timeout=150)
    assert ref.returncode == 0, ref.stderr
    time_ratio, mem_factor = ours.seconds / ref.seconds, ref.peak_rss_bytes / ours.peak_rss_bytes
    print(f"\n{res.nodes} nodes: time ours/ref = {time_ratio:.3f}, peak RSS ref/ours = {mem_factor:.1f}x")
    assert time_ratio <= MAX_TIME_RATIO, f"ours/ref time = {time_ratio:.2f}, above {MAX_TIME_RATIO}"
    assert mem_factor >= MIN_MEMORY_FACTOR, f"peak memory only {mem_factor:.1f}x below the reference"

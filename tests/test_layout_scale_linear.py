"""``scale`` of a layout job grows linearly with N (issue 40, problem 13): the scaled layout file and
the group bookkeeping list each rank once a mesh dimension, never a data-parallel group per rank
(N / (TP x PP) members each: N^2 / (TP x PP) in all, 1.7 GB at 8,192 ranks before)."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

from chakra_convert_fast.converter.ranks import layoutscale
from chakra_convert_fast.converter.ranks.layoutscale import LayoutScaler

LAYOUTS = Path(__file__).parent / "data" / "layouts"


def test_layout_file_and_groups_grow_linearly_with_ranks() -> None:
    path = str(LAYOUTS / "tp2fsdp_np4" / "job.layout.json")
    layout = layoutscale.read_layout(path)
    sizes, peaks = {}, {}
    for ranks in (1024, 4096):
        tracemalloc.start()
        scaler = LayoutScaler(layout, path, 4, ranks)
        groups = scaler.groups()
        text = json.dumps(scaler.new_layout())
        peaks[ranks] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        sizes[ranks] = len(text)
        # every rank once in its TP group and once in its DP group (PP 1: no PP groups)
        assert sorted(len(m) for m in groups.values()) == [2] * (ranks // 2) + [ranks // 2] * 2
        assert sum(len(m) for m in groups.values()) == 2 * ranks
    # four times the ranks: four times the bytes (not sixteen), give or take the digits of the ids
    assert sizes[4096] < 4.6 * sizes[1024], sizes
    assert sizes[4096] < 150 * 4096, sizes
    assert peaks[4096] < 6 * peaks[1024], peaks


def test_group_ids_are_numbered_as_before() -> None:
    """TP groups first (by their lowest rank), then DP, then PP; the group file's order."""
    path = str(LAYOUTS / "tp2fsdp_np4" / "job.layout.json")
    scaler = LayoutScaler(layoutscale.read_layout(path), path, 4, 8)
    assert scaler.groups() == {
        "1": [0, 1],
        "2": [2, 3],
        "3": [4, 5],
        "4": [6, 7],
        "5": [0, 2, 4, 6],
        "6": [1, 3, 5, 7],
    }
    assert [scaler.group_id("dp", r) for r in range(8)] == ["5", "6"] * 4
    assert [scaler.group_id("pp", r) for r in range(8)] == [None] * 8
    layout = scaler.new_layout()
    assert layout["ranks"][3] == {"tp": {"pg_name": "2"}, "dp": {"pg_name": "6"}, "pp": {"pg_name": "one:3"}}

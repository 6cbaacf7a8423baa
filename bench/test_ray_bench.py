"""``convert-all --ray``: ``--ray-ranks`` generated ranks (host + Kineto pairs of ``--ray-nodes``
nodes each), converted by local processes and by a two-node Ray cluster started on this machine
(one CPU a node; ``fixtures.raycluster``); outputs must be byte-identical. Each rank's seconds give
the per-rank figures the README's estimate for many machines is made from."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from bench.conftest import REPO
from bench.measure import convert_all_command, measure, rank_seconds
from chakra_convert_fast.fixtures.raycluster import local_cluster


def test_ray_convert_all(benchmark: Any, pair_job: tuple[Path, int, int], tmp_path: Path) -> None:
    folder, ranks, nodes = pair_job
    local = measure(convert_all_command(folder, tmp_path / "local", "--jobs", "2"), cwd=REPO)
    assert local.returncode == 0, local.stderr
    with local_cluster(nodes=2, cpus_per_node=1) as address:
        runs = []
        benchmark.pedantic(
            lambda: runs.append(measure(convert_all_command(folder, tmp_path / "ray", "--ray", address), cwd=REPO)),
            rounds=1,
            iterations=1,
        )
    run = runs[-1]
    if run.returncode != 0:
        pytest.fail(f"convert-all --ray failed with exit code {run.returncode}:\n{run.stderr}")
    for name in sorted(os.listdir(tmp_path / "local")):
        assert (tmp_path / "ray" / name).read_bytes() == (tmp_path / "local" / name).read_bytes(), name
    per_rank = rank_seconds(run.stderr)
    assert len(per_rank) == ranks
    benchmark.extra_info.update(
        kind="ray",
        ranks=ranks,
        nodes_per_rank=nodes,
        local_s=local.seconds,
        ray_s=run.seconds,
        ray_nodes=2,
        rank_seconds_mean=sum(per_rank.values()) / ranks,
        rank_seconds_max=max(per_rank.values()),
    )

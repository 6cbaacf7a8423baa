"""``convert-all``: every rank of a directory, parallel, failures isolated, comm groups written."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from chakra_convert_fast.converter import api, cli
from chakra_convert_fast.converter.ranks import convert_all
from chakra_convert_fast.converter.ranks.discover import discover, rank_from_name
from tests.linkcases import edge_case_pair

from .clirun import run_cli


def make_job(directory: Path, ranks: int = 4) -> None:
    for rank in range(ranks):
        edge_case_pair(directory, layers=15, rank=rank, world=ranks)


def test_four_ranks_convert_with_comm_groups(tmp_path: Path, capsys) -> None:
    make_job(tmp_path / "job")
    code = cli.main(["convert-all", str(tmp_path / "job"), str(tmp_path / "out"), "--jobs", "2"])
    assert code == 0, capsys.readouterr().err
    names = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert names == ["trace.0.et", "trace.1.et", "trace.2.et", "trace.3.et", "trace.comm_group.json"]
    # the default group "0" spans every rank: ASTRA-sim needs no entry for it (and refuses id 0)
    assert json.loads((tmp_path / "out" / "trace.comm_group.json").read_text()) == {}
    assert "rank" in capsys.readouterr().err


def test_failing_rank_does_not_stop_the_others(tmp_path: Path, capsys) -> None:
    make_job(tmp_path / "job")
    (tmp_path / "job" / "rank2_host.json.gz").write_bytes(b"\x1f\x8b not really gzip")
    (tmp_path / "job" / "rank3_device.json.gz").unlink()
    code = cli.main(["convert-all", str(tmp_path / "job"), str(tmp_path / "out"), "-j", "2"])
    captured = capsys.readouterr()
    assert code == 2, captured.err
    assert sorted(p.name for p in (tmp_path / "out").glob("*.et")) == ["trace.0.et", "trace.1.et"]
    assert "FAILED" in captured.err and "no device (Kineto) trace" in captured.err


def test_rank_comes_from_distributed_info_before_the_name(tmp_path: Path) -> None:
    _, device = edge_case_pair(tmp_path, layers=3, rank=1, world=2)
    device.rename(tmp_path / "kineto_7.json.gz")
    found = discover(str(tmp_path))
    assert list(found.devices) == [1] and list(found.hosts) == [1]


@pytest.mark.parametrize(
    ("name", "rank"),
    [("rank3_host.json", 3), ("dlrm_eg_5.json", 5), ("kineto-rank-12.json.gz", 12), ("trace.json", None)],
)
def testrank_from_name(name: str, rank: int | None) -> None:
    assert rank_from_name(name) == rank


def test_comm_groups_from_kineto_subgroups(tmp_path: Path) -> None:
    """The every-op gloo capture lists the default group and two sub-groups: ASTRA-sim's file keeps
    the sub-groups under their own ids (> 0) and leaves the default one, every rank, out."""
    from chakra_convert_fast.converter import api

    from .traces import REAL_TRACES_DIR

    devices = [REAL_TRACES_DIR / "gloo_ops_np4" / f"rank{r}_device.json.gz" for r in range(4)]
    groups = api.write_comm_groups(devices, tmp_path / "groups.json")
    assert groups.groups == {"1": [0, 1], "2": [2, 3]} and groups.unusable == []
    assert json.loads((tmp_path / "groups.json").read_text()) == {"1": [0, 1], "2": [2, 3]}


def test_profiler_output_folder_converts(tmp_path: Path) -> None:
    """chakra-profile's folder holds its summary JSON next to the traces: not a trace, not a rank."""
    make_job(tmp_path / "job", ranks=2)
    (tmp_path / "job" / "gpt2_tiny_np2_summary.json").write_text(json.dumps({"nodes": 3, "schema": "x", "ranks": []}))
    assert cli.main(["convert-all", str(tmp_path / "job"), str(tmp_path / "out"), "-q"]) == 0
    assert sorted(p.name for p in (tmp_path / "out").glob("*.et")) == ["trace.0.et", "trace.1.et"]


@pytest.mark.parametrize(
    "damage",
    [
        lambda data: data[:10] + bytes(b ^ 0xFF for b in data[10:40]) + data[40:],  # zlib.error: invalid block
        lambda data: data[: len(data) // 2],  # EOFError: truncated
        lambda data: data[:-8] + b"\0" * 8,
    ],  # BadGzipFile: CRC check failed
    ids=["corrupt deflate data", "truncated", "bad checksum"],
)
def test_a_corrupt_gzip_rank_fails_alone(damage: Callable[[bytes], bytes], tmp_path: Path) -> None:
    make_job(tmp_path / "job", ranks=3)
    device = tmp_path / "job" / "rank1_device.json.gz"
    device.write_bytes(damage(device.read_bytes()))
    done = run_cli("convert-all", tmp_path / "job", tmp_path / "out", "--jobs", "2")
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    failed = [line for line in done.stderr.splitlines() if "FAILED" in line]
    assert len(failed) == 1 and "rank 1" in failed[0] and "rank1_device.json.gz" in failed[0], done.stderr
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["trace.0.et", "trace.2.et", "trace.comm_group.json"]


def test_a_worker_that_dies_is_a_failed_rank_not_a_hang(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    make_job(tmp_path / "job", ranks=2)

    def die(task: object) -> None:
        os.kill(os.getpid(), signal.SIGKILL)

    monkeypatch.setattr(convert_all, "_convert_rank", die)
    result = api.convert_all(tmp_path / "job", tmp_path / "out", jobs=2)
    assert [o.ok for o in result.outcomes] == [False, False]
    assert all("worker process died" in o.message for o in result.outcomes)

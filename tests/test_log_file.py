"""``--log-filename``: messages are appended, never over a user's file; a log that cannot be
written is one error line, never a traceback nor a hang."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from .clirun import ERROR_PREFIX, assert_one_error, listing, run_cli
from .linkcases import edge_case_pair
from .tracebuild import trace, two_threads

GOOD = json.dumps(trace(two_threads()))


@pytest.fixture
def merged(tmp_path: Path) -> Path:
    path = tmp_path / "in.json"
    path.write_text(GOOD)
    return path


@pytest.mark.slow
def test_appends_and_keeps_what_was_there(merged: Path, tmp_path: Path) -> None:
    log = tmp_path / "run.log"
    log.write_text("earlier line\n")
    for _ in range(2):
        assert run_cli(merged, tmp_path / "o.et", "--log-filename", log).returncode == 0
    lines = log.read_text().splitlines()
    assert lines[0] == "earlier line" and sum("wrote " in line for line in lines) == 2


@pytest.mark.slow
@pytest.mark.parametrize(
    ("log", "expected"),
    [
        (lambda tmp: tmp / "in.json", "the log file would overwrite"),
        (lambda tmp: tmp / "o.et", "the log file would overwrite"),
        (lambda tmp: tmp / "no" / "dir" / "run.log", "log directory"),
        (lambda tmp: tmp, "the log file is a directory"),
        (lambda tmp: tmp / "read-only.log", "the log file is read-only"),
        (lambda tmp: tmp / "fifo", "the log file is a FIFO that no process is reading"),
    ],
    ids=["the input", "the output", "a missing directory", "a directory", "a read-only file", "a FIFO nobody reads"],
)
def test_refused_log_paths(log: Callable[[Path], Path], expected: str, merged: Path, tmp_path: Path) -> None:
    (tmp_path / "o.et").write_bytes(b"previous output")
    (tmp_path / "read-only.log").write_text("keep")
    (tmp_path / "read-only.log").chmod(0o444)
    os.mkfifo(tmp_path / "fifo")
    before = {name: (tmp_path / name).read_bytes() for name in ("in.json", "o.et", "read-only.log")}
    done = run_cli(merged, tmp_path / "o.et", "--log-filename", log(tmp_path), timeout=60)
    assert_one_error(done, expected)
    assert {name: (tmp_path / name).read_bytes() for name in before} == before
    assert listing(tmp_path) == ["fifo", "in.json", "o.et", "read-only.log"]


def test_a_bad_input_never_touches_an_output_named_as_the_log(tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text(GOOD[:-20])
    (tmp_path / "o.et").write_bytes(b"previous output")
    done = run_cli(
        "--log-filename", tmp_path / "o.et", "PyTorch", "--input", tmp_path / "bad.json", "--output", tmp_path / "o.et"
    )
    assert_one_error(done, "the log file would overwrite")
    assert (tmp_path / "o.et").read_bytes() == b"previous output"


def test_a_log_that_cannot_be_written_is_one_warning(merged: Path, tmp_path: Path) -> None:
    """The log is a copy of the messages: failing to write it is said once, and the command exits
    by its work (the output was written)."""
    done = run_cli(merged, tmp_path / "o.et", "--log-filename", "/dev/full")
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and "Logging error" not in done.stderr
    assert not [line for line in done.stderr.splitlines() if line.startswith(ERROR_PREFIX)], done.stderr
    warnings = [line for line in done.stderr.splitlines() if "warning: " in line]
    assert warnings == [
        "chakra-convert-fast: warning: /dev/full: cannot write the log file: No space left on "
        "device; messages go to stderr only"
    ], done.stderr
    assert (tmp_path / "o.et").stat().st_size > 0


@pytest.mark.slow
def test_a_log_may_be_a_device(merged: Path, tmp_path: Path) -> None:
    done = run_cli(merged, tmp_path / "o.et", "--log-filename", "/dev/null")
    assert done.returncode == 0, done.stderr
    assert listing(tmp_path) == ["in.json", "o.et"]


# -- convert-all: its inputs and outputs are files of the command too ----------------------------
@pytest.mark.slow
@pytest.mark.parametrize(
    "log",
    [
        lambda job, out: job / "rank0_host.json",
        lambda job, out: job / "rank1_device.json",
        lambda job, out: out / "run.1.et",
        lambda job, out: out / "run.comm_group.json",
    ],
    ids=["a host trace", "a Kineto trace", "a rank's output", "the group file"],
)
def test_convert_all_refuses_a_log_that_is_one_of_its_files(log: Callable[[Path, Path], Path], tmp_path: Path) -> None:
    for rank in range(2):
        edge_case_pair(tmp_path / "job", layers=3, rank=rank, world=2, gz=False)
    (tmp_path / "out").mkdir()
    traces = {p.name: p.read_bytes() for p in (tmp_path / "job").iterdir()}
    done = run_cli(
        "convert-all",
        tmp_path / "job",
        tmp_path / "out",
        "--prefix",
        "run",
        "--log-filename",
        log(tmp_path / "job", tmp_path / "out"),
    )
    assert_one_error(done, "the log file would overwrite a trace or an output of convert-all")
    assert {p.name: p.read_bytes() for p in (tmp_path / "job").iterdir()} == traces
    assert listing(tmp_path / "out") == []


def test_convert_all_log_beside_its_outputs(tmp_path: Path) -> None:
    for rank in range(2):
        edge_case_pair(tmp_path / "job", layers=3, rank=rank, world=2, gz=False)
    (tmp_path / "out").mkdir()
    done = run_cli(
        "convert-all",
        tmp_path / "job",
        tmp_path / "out",
        "--prefix",
        "run",
        "--log-filename",
        tmp_path / "out" / "trace.0.et",
    )
    assert done.returncode == 0, done.stderr
    assert listing(tmp_path / "out") == ["run.0.et", "run.1.et", "run.comm_group.json", "trace.0.et"]
    assert "run.1.et" in (tmp_path / "out" / "trace.0.et").read_text()

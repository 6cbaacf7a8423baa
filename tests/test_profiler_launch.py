"""``chakra-profile``'s classes of the fourth hostile round (issue 40): its numbers in stated ranges
and ``--outdir`` checked before any model is built (problem 17), and SIGTERM to ``--nproc 2``
ending torchrun and both ranks, with no capture written after the command ended (problem 12)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from chakra_convert_fast.profiler import cli


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--nproc", "1000000"], "argument --nproc: must be at most 1,024, got 1,000,000"),
        (["--nproc", "٣"], "argument --nproc: must be a whole number from 1 to 1,024, got '٣'"),
        (["--lr", "nan"], "argument --lr: must be a number from 0 to 1000, got 'nan'"),
        (["--lr", "-1"], "argument --lr: must be a number from 0 to 1000"),
        (["--seed", str(10**23)], "argument --seed: must be at most 4,294,967,295"),
        (["--steps", "10000000"], "argument --steps: must be at most 1,000,000"),
        (["--hidden", "²"], "argument --hidden: must be a whole number from 1 to 1,000,000"),
    ],
)
def test_numbers_in_stated_ranges(extra: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.parse_args(["--model", "gpt2", *extra])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_outdir_that_cannot_hold_the_capture(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--outdir FILE`` printed a traceback after building the model: now a usage error first."""
    (tmp_path / "file").write_text("mine")
    for outdir, message in (
        (tmp_path / "file", "not a directory"),
        (tmp_path / "file" / "sub", f"{tmp_path / 'file'} is not a directory"),
    ):
        with pytest.raises(SystemExit) as exc:
            cli.parse_args(["--model", "gpt2", "--outdir", str(outdir)])
        assert exc.value.code == 2
        assert f"--outdir {outdir}: {message}" in capsys.readouterr().err
    assert (tmp_path / "file").read_text() == "mine"
    assert cli.parse_args(["--model", "gpt2", "--outdir", str(tmp_path / "new" / "deeper")]).outdir  # made later


def _tree(root: int) -> dict[int, str]:
    """Every process below ``root``: pid -> its command line."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parents[int(entry)] = int(stat.rsplit(")", 1)[-1].split()[1])
    found: dict[int, str] = {}
    frontier = [root]
    while frontier:
        parent = frontier.pop()
        for pid, ppid in parents.items():
            if ppid == parent and pid not in found:
                try:
                    found[pid] = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
                except OSError:
                    found[pid] = ""
                frontier.append(pid)
    return found


def _alive(pid: int) -> bool:
    try:
        return "zombie" not in Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False


@pytest.mark.slow
@pytest.mark.torch
def test_sigterm_ends_torchrun_and_every_rank(tmp_path: Path) -> None:
    outdir = tmp_path / "out"
    argv = ["--model", "gpt2", "--size", "tiny", "--seq-len", "16", "--batch-size", "1", "--steps", "30"]
    argv += ["--nproc", "2", "--threads", "1", "--outdir", str(outdir), "--name", "stopped"]
    code = "import sys; from chakra_convert_fast.profiler.cli import main; sys.exit(main())"
    process = subprocess.Popen(
        [sys.executable, "-c", code, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
    )
    everything: dict[int, str] = {}
    try:
        deadline = time.monotonic() + 120
        ranks: dict[int, str] = {}
        while time.monotonic() < deadline and len(ranks) < 2:
            tree = _tree(process.pid)
            ranks = {p: c for p, c in tree.items() if "profiler.train" in c and "torch.distributed.run" not in c}
            time.sleep(0.2)
        assert len(ranks) == 2, tree
        time.sleep(1.0)  # the ranks are importing or training
        everything = _tree(process.pid)
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=60)
    finally:
        for pid in {**everything, **_tree(process.pid)}:  # whatever the command left (it must leave nothing)
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 143, err
    assert err.decode().splitlines()[-1] == "chakra-profile: error: terminated by SIGTERM; no capture written"
    assert not [p for p in everything if _alive(p)], everything  # torchrun, both ranks, their children
    time.sleep(2.0)
    assert not outdir.exists() or not list(outdir.iterdir())  # nothing written after the command ended


@pytest.mark.slow
@pytest.mark.torch
@pytest.mark.parametrize("blocked", [False, True], ids=["as started", "started with the signals blocked"])
def test_a_signal_ends_one_rank_in_process_with_its_line(tmp_path: Path, blocked: bool) -> None:
    """``--nproc 1`` trains in this process: SIGINT while it traces ended it with a
    ``KeyboardInterrupt`` traceback and left the half-written host trace (and, started with the
    stop signals blocked, a mask it inherited, it ran to the end). Now: one line, 130, nothing."""
    outdir = tmp_path / "out"
    argv = ["--model", "gpt2", "--size", "tiny", "--seq-len", "16", "--batch-size", "1", "--steps", "400"]
    argv += ["--nproc", "1", "--threads", "1", "--outdir", str(outdir), "--name", "stopped", "--wait", "2"]
    code = "import sys; from chakra_convert_fast.profiler.cli import main; sys.exit(main())"
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT} if blocked else set())
    try:
        process = subprocess.Popen(
            [sys.executable, "-c", code, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
        )
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    try:
        deadline = time.monotonic() + 120
        while not (outdir / "stopped_rank0_host.json").exists():  # the observer is writing
            assert process.poll() is None and time.monotonic() < deadline, process.communicate()[1]
            time.sleep(0.05)
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 130, err
    assert err.decode().splitlines()[-1] == "chakra-profile: error: terminated by SIGINT; no capture written"
    assert "Traceback" not in err.decode()
    assert not outdir.exists() or not list(outdir.iterdir())

"""``generate``: every file chakra_generator writes, byte for byte, with its options."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from chakra_convert_fast.converter import api
from tests.clirun import as_nobody, assert_one_error, run_cli, shared_directory


def reference(directory: Path, *options: str) -> dict[str, bytes]:
    exe = shutil.which("chakra_generator")
    assert exe, "mlc-chakra (the test extra) provides chakra_generator"
    directory.mkdir()
    subprocess.run([exe, *options], cwd=directory, check=True, capture_output=True)
    return {p.name: p.read_bytes() for p in directory.iterdir()}


@pytest.mark.parametrize(
    "options",
    [
        ("--num_npus", "2"),
        ("--num_npus", "3", "--default_runtime", "0", "--default_tensor_size", "300000", "--default_comm_size", "-7"),
    ],
)
def test_byte_identical_to_chakra_generator(tmp_path: Path, options: tuple[str, ...]) -> None:
    expected = reference(tmp_path / "ref", *options)
    done = run_cli("generate", tmp_path / "ours", *options)
    assert done.returncode == 0, done.stderr
    ours = {p.name: p.read_bytes() for p in (tmp_path / "ours").iterdir()}
    assert len(expected) == len(api.GENERATED_BENCHMARKS) * int(options[1])
    assert ours.keys() == expected.keys()
    for name, data in expected.items():
        assert ours[name] == data, name


def test_dashed_options_and_default_directory(tmp_path: Path) -> None:
    done = run_cli("generate", "--num-npus", "1", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert len(list(tmp_path.glob("*.0.et"))) == len(api.GENERATED_BENCHMARKS)


@pytest.mark.slow
def test_bad_options(tmp_path: Path) -> None:
    for option, value, stated in (
        ("--default_runtime", "-1", "must be at least 0, got -1"),
        ("--num-npus", "65537", "must be at most 65,536"),  # 14 files each: a bound
        ("--num-npus", "0", "must be at least 1"),
        ("--num_npus", "\u0663", "must be a whole number from 1 to 65,536"),
        ("--default_comm_size", str(1 << 63), "must be at most 9,223,372,036,854,775,807"),
    ):
        done = run_cli("generate", tmp_path / "new", option, value)
        assert done.returncode == 2 and stated in done.stderr.splitlines()[-1], (option, value, done.stderr)
        assert "Traceback" not in done.stderr and not (tmp_path / "new").exists()
    (tmp_path / "file").write_text("x")
    assert_one_error(run_cli("generate", tmp_path / "file"), "not a directory")


@contextmanager
def small_tmpfs(tmp_path: Path, size: str) -> Iterator[Path]:
    """A file system of ``size`` bytes, for a real full disk (mounting needs root)."""
    mount = tmp_path / "small"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0777", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"a full disk needs a small tmpfs, and mounting one failed: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=False)


@pytest.mark.slow
@pytest.mark.parametrize("user", ["root", "nobody"])
def test_a_full_disk_leaves_every_old_file_and_no_new_one(tmp_path: Path, user: str) -> None:
    """Issue 29: on a full disk ``generate`` left 256 of 2,800 files. All or nothing now."""
    if user == "nobody" and os.geteuid() != 0:
        pytest.skip("the tests run unprivileged already (the root case is this one)")
    with shared_directory() as shared, small_tmpfs(shared, "256k") as disk:  # nobody may enter a shared one
        out = disk / "out"
        out.mkdir(mode=0o777)
        out.chmod(0o777)
        (out / "ALL_REDUCE.0.et").write_bytes(b"old")
        (out / "ALL_REDUCE.0.et").chmod(0o666)
        done = run_cli("generate", out, "--num-npus", "200", preexec_fn=as_nobody() if user == "nobody" else None)
        line = assert_one_error(done, ": cannot write: No space left on device")
        assert len(line) < 300, line
        assert os.listdir(out) == ["ALL_REDUCE.0.et"] and (out / "ALL_REDUCE.0.et").read_bytes() == b"old"
        done = run_cli("generate", disk / "fresh", "--num-npus", "200")
        assert_one_error(done, "No space left on device")
        assert sorted(os.listdir(disk)) == ["out"]  # the folder it made is gone again

"""``generate``: every file chakra_generator writes, byte for byte, with its options."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from chakra_convert_fast.converter import api
from tests.clirun import assert_one_error, run_cli


def reference(directory: Path, *options: str) -> dict[str, bytes]:
    exe = shutil.which("chakra_generator")
    assert exe, "mlc-chakra (the test extra) provides chakra_generator"
    directory.mkdir()
    subprocess.run([exe, *options], cwd=directory, check=True, capture_output=True)
    return {p.name: p.read_bytes() for p in directory.iterdir()}


@pytest.mark.parametrize("options", [
    ("--num_npus", "2"),
    ("--num_npus", "3", "--default_runtime", "0", "--default_tensor_size", "300000",
     "--default_comm_size", "-7"),
])
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


def test_bad_options(tmp_path: Path) -> None:
    assert_one_error(run_cli("generate", tmp_path, "--default_runtime", "-1"), "default_runtime")
    (tmp_path / "file").write_text("x")
    assert_one_error(run_cli("generate", tmp_path / "file"), "not a directory")

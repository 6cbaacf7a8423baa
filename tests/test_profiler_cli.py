"""The launcher: argument checks, the torchrun command line, and the Dockerfile's commands."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # the project supports 3.10, whose stdlib has no tomllib
    tomllib = pytest.importorskip("tomli")

from chakra_convert_fast.fixtures import reference
from chakra_convert_fast.profiler import cli

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--model", "gpt2", "--nproc", "2"], ["--model", "gpt2"]),
        (["--nproc=4", "--model", "bert"], ["--model", "bert"]),
        (["--model", "gpt2"], ["--model", "gpt2"]),
    ],
)
def test_nproc_is_not_passed_to_the_ranks(argv: list[str], expected: list[str]) -> None:
    assert cli.without_nproc(argv) == expected


def test_launch_command_runs_profiler_train_under_torchrun() -> None:
    cmd = cli.launch_command(["--model", "gpt2", "--nproc", "2", "--steps", "3"], 2)
    assert cmd[:5] == [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
    assert cmd[5:] == ["-m", "chakra_convert_fast.profiler.train", "--model", "gpt2", "--steps", "3"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--model", "gpt2", "--steps", "3"], "shorter than the trace window"),
        (["--model", "gpt2", "--npr", "2"], "unrecognized arguments"),
        (["--model", "bert", "--size", "gpt2"], "does not apply to model 'bert'"),
        (["--model", "gpt2", "--backend", "nccl", "--device", "cpu"], "needs --device cuda"),
        (["--model", "gpt2", "--active", "0"], "must be at least 1"),
        (["--model", "gpt2", "--nproc", "2", "--pp", "2", "--precision", "bf16"], "not supported with --pp"),
        (["--model", "gpt2", "--no-host-trace", "--convert", "--roofline"], "converts the Kineto trace alone"),
        (["--model", "gpt2", "--precision", "fp16"], "invalid choice"),
    ],
)
def test_bad_arguments_fail_before_any_rank_starts(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.parse_args(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_untraced_runs_may_be_short() -> None:
    args = cli.parse_args(["--model", "gpt2", "--steps", "1", "--no-enable-tracing"])
    assert args.steps == 1 and not args.enable_tracing


@pytest.mark.parametrize(
    ("argv", "env", "threads"),
    [([], None, 1), ([], "3", 3), (["--threads", "2"], "3", 2), ([], "junk", 1)],
)
def test_one_thread_per_rank_unless_told(
    argv: list[str], env: str | None, threads: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    if env is None:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    else:
        monkeypatch.setenv("OMP_NUM_THREADS", env)
    assert cli.threads_for(cli.parse_args(["--model", "gpt2", *argv])) == threads


def test_a_missing_reference_converter_is_reported_before_training(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(reference, "AVAILABLE", False)
    assert cli.main(["--model", "gpt2", "--convert", "--converter", "reference"]) == 2
    assert "mlc-chakra" in capsys.readouterr().err


def test_the_launcher_does_not_import_torch() -> None:
    code = "import sys, chakra_convert_fast.profiler.cli; print('torch' in sys.modules, 'transformers' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.split() == ["False", "False"]


# The Dockerfile cannot be built here (no Docker engine): check what it relies on instead.


def dockerfile() -> str:
    return (ROOT / "Dockerfile").read_text(encoding="utf-8")


def pyproject() -> dict:
    with (ROOT / "pyproject.toml").open("rb") as f:
        return tomllib.load(f)


def test_docker_base_image_keeps_the_pinned_torch() -> None:
    base = re.search(r"^ARG BASE_IMAGE=(\S+)$", dockerfile(), re.M)
    assert base, "the Dockerfile names its base image in ARG BASE_IMAGE"
    match = re.fullmatch(r"pytorch/pytorch:(\d+\.\d+\.\d+)-cuda[\d.]+-cudnn\d+-runtime", base.group(1))
    assert match, f"not a pytorch/pytorch CUDA runtime image: {base.group(1)}"
    assert f"torch=={match.group(1)}" in pyproject()["project"]["optional-dependencies"]["profiler"]


def test_docker_installs_the_profiler_extra_and_runs_declared_commands() -> None:
    text = dockerfile().rsplit("\nFROM ", 1)[1]  # the last stage: the profiler's image, the default target
    assert 'pip install ".[profiler]"' in text
    cmd = re.search(r"^CMD \[\"([^\"]+)\"", text, re.M)
    runs = re.findall(r"^RUN (.+)$", text, re.M)
    run_steps = [step.split()[0] for line in runs for step in line.split("&&")]
    commands = {cmd.group(1) if cmd else "", *run_steps} - {"pip"}
    assert commands == {"chakra-profile"}
    assert pyproject()["project"]["scripts"]["chakra-profile"] == "chakra_convert_fast.profiler.cli:main"


def test_docker_usage_line_is_a_valid_command() -> None:
    usage = re.search(r"^#\s+(chakra-profile .+)$", dockerfile(), re.M)
    assert usage, "the Dockerfile shows the job's command"
    args = cli.parse_args(usage.group(1).split()[1:])
    assert (args.model, args.nproc, args.convert) == ("gpt2", 4, True)


def test_docker_context_keeps_the_packages() -> None:
    ignored = {line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()}
    assert {".git", "outputs"} <= ignored
    assert not {"profiler", "converter", "fixtures", "pyproject.toml"} & ignored


def test_installed_console_script_answers_help() -> None:
    exe = shutil.which("chakra-profile")
    assert exe is not None, "chakra-profile is not on PATH: install the project (pip install -e .[profiler])"
    out = subprocess.run([exe, "--help"], capture_output=True, text=True, check=True)
    assert "--model" in out.stdout and "--nproc" in out.stdout


def test_every_shape_knob_has_an_option() -> None:
    from chakra_convert_fast.profiler.models import Shape

    args = cli.parse_args(["--model", "gpt2"])
    assert all(getattr(args, knob) is None for knob in Shape.knobs())


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--model", "gpt2", "--roofline"], "--roofline needs --convert"),
        (["--model", "gpt2", "--convert", "--target", "accelerator"], "--target accelerator needs --roofline"),
    ],
)
def test_roofline_options_need_the_conversion(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(argv) == 2
    assert message in capsys.readouterr().err


def test_roofline_options_reach_the_ranks() -> None:
    args = cli.parse_args(["--model", "gpt2", "--convert", "--roofline", "--target", "accelerator", "--compact"])
    assert (args.roofline, args.target, args.compact) == (True, "accelerator", True)

"""One grammar: every subcommand takes its output the same way, the same options, and reports alike."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from chakra_convert_fast.converter import cli

from .linkcases import cyclic_pair, edge_case_pair
from .traces import REAL_TRACES_DIR, oracle_bytes

pytestmark = [pytest.mark.slow]

MERGED = REAL_TRACES_DIR / "cpu_gpt2_ddp2" / "rank0_merged_by_chakra_trace_link.json.gz"


def run_cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "chakra_convert_fast.converter", *map(str, args)],
        capture_output=True,
        text=True,
        check=False,
    )


def test_convert_takes_a_merged_trace_like_the_short_form(tmp_path: Path) -> None:
    done = run_cli("convert", MERGED, tmp_path / "o.et")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "o.et").read_bytes() == oracle_bytes(MERGED, tmp_path)
    assert done.stdout == "" and "wrote " in done.stderr


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        (["convert", "--host", "h.json", "o.et"], "--host and --device go together"),
        (["convert", "--device", "d.json", "o.et"], "--host and --device go together"),
        (["convert", "--host", "h.json", "--device", "d.json", "a.json", "o.et"], "OUTPUT with --host and --device"),
        (["convert", "in.json"], "give INPUT OUTPUT"),
        (["convert", "in.json", "o.et", "--keep-merged", "m.json"], "--keep-merged needs --host and --device"),
        (["link", "--host", "h.json", "--device", "d.json"], "give the merged output once"),
        (["convert-all", "dir", "out", "--jobs", "0"], "must be at least 1"),
        (["convert-all", "dir", "out", "--jobs", "-3"], "must be at least 1"),
    ],
)
def test_usage_errors_exit_2_with_the_usage(argv: list[str], problem: str, tmp_path: Path) -> None:
    done = run_cli(*argv)
    assert done.returncode == 2
    assert "usage:" in done.stderr and problem in done.stderr


def test_pair_conversion_reports_like_the_merged_one(tmp_path: Path) -> None:
    host, device = edge_case_pair(tmp_path / "in", layers=10)
    log = tmp_path / "pair.log"
    done = run_cli(
        "convert",
        "--host",
        host,
        "--device",
        device,
        tmp_path / "o.et",
        "--simulate",
        "--allow-missing-parents",
        "--log-filename",
        log,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert lines[0].startswith("linked ") and lines[1].startswith(f"wrote {tmp_path / 'o.et'}: ")
    assert lines[2].startswith("simulated execution: ")
    assert lines[3].startswith("note: ASTRA-sim would refuse this output (") and len(lines) == 4
    assert log.read_text().count("INFO") == 4


def test_pair_break_cycles_lists_removed_edges(tmp_path: Path) -> None:
    host, device = cyclic_pair(tmp_path / "in")
    failed = run_cli("convert", "--host", host, "--device", device, tmp_path / "o.et")
    assert failed.returncode == 1 and "dependency cycle" in failed.stderr
    assert not (tmp_path / "o.et").exists()
    done = run_cli("convert", "--host", host, "--device", device, tmp_path / "o.et", "--break-cycles")
    assert done.returncode == 0, done.stderr
    assert "removed dependency 5 'aten::p' -> 4 'aten::c' (inter-thread)" in done.stderr
    assert "--break-cycles removed 1 dependency edge(s)" in done.stderr


def test_quiet_and_log_level_apply_to_every_subcommand(tmp_path: Path) -> None:
    host, device = edge_case_pair(tmp_path / "in", layers=5)
    runs: dict[str, list[str | Path]] = {
        "link": ["link", "--host", host, "--device", device, tmp_path / "m.json"],
        "convert": ["convert", "--host", host, "--device", device, tmp_path / "o.et"],
        "convert-all": ["convert-all", tmp_path / "in", tmp_path / "out"],
        "repair": ["repair", host, tmp_path / "fixed.json"],
    }
    for name, argv in runs.items():
        loud = run_cli(*argv)
        assert loud.returncode == 0 and loud.stdout == "" and loud.stderr, name
        for quiet in (["-q"], ["--log-level", "warning"], ["--log-level", "ERROR"]):
            done = run_cli(*argv, *quiet)
            assert done.returncode == 0 and done.stdout == "" and done.stderr == "", (name, quiet)


def test_warnings_go_to_stderr_and_stop_at_log_level_error(tmp_path: Path) -> None:
    host, device = edge_case_pair(tmp_path / "in", layers=30, gz=False)
    text = device.read_text().replace('"cudaLaunchKernel"', '"somethingElse"', 3)
    device.write_text(text)
    done = run_cli("link", "--host", host, "--device", device, tmp_path / "m.json", "-q")
    assert done.returncode == 0 and done.stdout == ""
    assert "chakra-convert-fast: warning: " in done.stderr and "device kernels have no launching" in done.stderr
    done = run_cli("link", "--host", host, "--device", device, tmp_path / "m2.json", "--log-level", "ERROR")
    assert done.returncode == 0 and done.stderr == ""


def test_outputs_are_positional_everywhere(tmp_path: Path) -> None:
    """``-o`` meant a file for ``link`` and a directory for ``convert-all``; now neither has it."""
    host, device = edge_case_pair(tmp_path / "in", layers=5)
    assert run_cli("link", "--host", host, "--device", device, "-o", tmp_path / "m.json").returncode == 2
    assert run_cli("convert-all", tmp_path / "in", "-o", tmp_path / "out").returncode == 2
    reference_form = run_cli(
        "link",
        "--chakra-host-trace",
        host,
        "--chakra-device-trace",
        device,
        "--output-file",
        tmp_path / "m.json",
        "--log-level",
        "INFO",
    )
    assert reference_form.returncode == 0, reference_form.stderr
    assert run_cli("link", "--host", host, "--device", device, tmp_path / "m2.json").returncode == 0
    assert (tmp_path / "m.json").read_bytes() == (tmp_path / "m2.json").read_bytes()


@pytest.mark.parametrize("command", cli.COMMANDS)
def test_every_subcommand_help_has_an_example(command: str) -> None:
    done = run_cli(command, "--help")
    assert done.returncode == 0
    assert "examples:" in done.stdout and f"{cli.PROG} " in done.stdout.split("examples:")[1]


def test_the_command_list_is_the_parser_s() -> None:
    """``chakra-convert-fast IN OUT`` means ``convert IN OUT`` unless IN names a command."""
    parser = cli.build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert tuple(commands.choices) == cli.COMMANDS

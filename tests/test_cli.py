"""The command line on good input: both command forms, gzip, summary, quiet, cycle breaking."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from chakra.schema.protobuf import et_def_pb2 as pb

from chakra_convert_fast.converter import convert

from .tracebuild import cyclic_nodes, trace
from .traces import REAL_TRACES_DIR, oracle_bytes, read_et

MERGED = REAL_TRACES_DIR / "cpu_gpt2_ddp2" / "rank0_merged_by_chakra_trace_link.json.gz"


def run_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "chakra_convert_fast.converter", *args],
        capture_output=True,
        text=True,
        check=False,
        cwd=cwd,
    )


def test_short_form_writes_reference_bytes_and_a_summary(tmp_path: Path) -> None:
    done = run_cli(str(MERGED), str(tmp_path / "out.et"))
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out.et").read_bytes() == oracle_bytes(MERGED, tmp_path)
    assert "2,675 nodes (1 dangling removed, 0 comm nodes" in done.stderr
    assert "nodes/s" in done.stderr


def test_reference_form_is_accepted_as_is(tmp_path: Path) -> None:
    log = tmp_path / "debug.log"
    done = run_cli("--log-filename", str(log), "PyTorch", "--input", str(MERGED), "--output", str(tmp_path / "o.et"))
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "o.et").read_bytes() == oracle_bytes(MERGED, tmp_path)
    assert "2,675 nodes" in log.read_text()


def test_quiet_prints_nothing(tmp_path: Path) -> None:
    done = run_cli("-q", str(MERGED), str(tmp_path / "o.et"))
    assert done.returncode == 0 and done.stderr == "" and done.stdout == ""


def test_help_explains_both_forms() -> None:
    done = run_cli("--help")
    assert done.returncode == 0
    assert "byte-identical" in done.stdout and "PyTorch --input" in done.stdout
    assert all(command in done.stdout for command in ("convert", "link", "convert-all", "repair"))
    done = run_cli("convert", "--help")
    assert done.returncode == 0 and "--break-cycles" in done.stdout and "examples:" in done.stdout


def test_break_cycles_writes_an_acyclic_trace_and_lists_removed_edges(tmp_path: Path) -> None:
    source = tmp_path / "cyclic.json"
    source.write_text(json.dumps(trace(cyclic_nodes())))
    done = run_cli("--break-cycles", str(source), str(tmp_path / "o.et"))
    assert done.returncode == 0, done.stderr
    assert "removed 1 dependency edge(s)" in done.stderr
    assert "(inter-thread)" in done.stderr
    _, nodes = read_et(tmp_path / "o.et")
    deps = {n.id: list(n.data_deps) for n in nodes}
    assert (20 in deps[10]) != (11 in deps[20])  # one inter-thread edge went, the other stayed
    assert 10 in deps[11]  # program order is kept


def test_api_result_counts(tmp_path: Path) -> None:
    result = convert(
        REAL_TRACES_DIR / "resnet_ddp_synthetic_kineto" / "rank0_merged_by_chakra_trace_link.json.gz", tmp_path / "o.et"
    )
    _, nodes = read_et(tmp_path / "o.et")
    assert result.nodes_written == len(nodes) == 16_779
    assert result.comm_nodes == sum(n.type == pb.COMM_COLL_NODE for n in nodes) == 21
    assert result.data_deps == sum(len(n.data_deps) for n in nodes)
    assert result.nodes_read == 16_780 and result.dangling_removed == 1


def test_every_command_declares_its_outputs() -> None:
    """``main`` reads what a command writes from the command's own declaration (``Outputs``), never
    from its name: the options it declares exist on its parser."""
    import argparse
    import importlib
    import inspect

    from chakra_convert_fast.converter.cli.common import Outputs

    cli_main = importlib.import_module("chakra_convert_fast.converter.cli.main")  # the package re-exports main()

    parser = cli_main.build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert set(subparsers.choices) == set(cli_main.COMMANDS)
    for name, sub in subparsers.choices.items():
        outputs = sub.get_default("outputs")
        assert isinstance(outputs, Outputs), name
        dests = {action.dest for action in sub._actions}
        assert set(outputs.files) <= dests, (name, set(outputs.files) - dests)
    source = inspect.getsource(cli_main)
    assert "args.command ==" not in source and "args.command in" not in source

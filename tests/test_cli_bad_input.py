"""Every kind of bad input, through the command line: exit 1, one line naming the file and the
problem, and no output file (an existing one is left untouched)."""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from chakra_convert_fast.converter import api
from chakra_convert_fast.converter.cli.numbers import quantity, whole
from chakra_convert_fast.converter.errors import ConverterError, OptionError

from .clirun import CLI, ERROR_PREFIX, assert_one_error, run_cli
from .linkcases import edge_case_pair
from .tracebuild import cyclic_nodes, op, trace, two_threads
from .traces import REAL_TRACES_DIR

pytestmark = [pytest.mark.slow]

GOOD = trace(two_threads())


def _json(doc: object) -> Callable[[Path], object]:
    return lambda p: p.write_text(json.dumps(doc))


def _text(text: str) -> Callable[[Path], object]:
    return lambda p: p.write_text(text)


def _without(key: str) -> dict:
    nodes = two_threads()
    del nodes[3][key]
    return trace(nodes)


def _duplicate_id() -> dict:
    nodes = two_threads()
    nodes.append(op(10, "aten::dup", 2))
    return trace(nodes)


def _missing_parent() -> dict:
    return trace([*two_threads(), op(30, "aten::orphan", 999)])


def _missing_dependency() -> dict:
    nodes = two_threads()
    nodes[3]["inter_thread_dep"] = 777
    return trace(nodes)


CASES: dict[str, tuple[Callable[[Path], object] | None, str]] = {
    "missing file": (None, "no such file"),
    "empty file": (_text(""), "file is empty"),
    "truncated JSON": (lambda p: p.write_text(json.dumps(GOOD)[:-40]), "truncated JSON"),
    "concatenated objects": (_text(json.dumps(GOOD) + "\n" + json.dumps(GOOD)), "several concatenated JSON"),
    "binary garbage": (lambda p: p.write_bytes(bytes(range(256)) * 8), "not UTF-8"),
    "corrupt gzip": (lambda p: p.write_bytes(gzip.compress(json.dumps(GOOD).encode())[:-30]), "gzip"),
    "not an object": (_text("[1, 2, 3]"), "expected a JSON object"),
    "unsupported schema": (_json(trace(two_threads(), schema="9.9.9")), "supported: 1.0.2-chakra.0.0.4"),
    "no nodes": (_json({"schema": "1.1.1-chakra.0.0.4"}), "missing"),
    "node without ctrl_deps": (_json(_without("ctrl_deps")), "missing required field 'ctrl_deps'"),
    "node without inputs": (_json(_without("inputs")), "missing required field 'inputs'"),
    "node without attrs": (_json(_without("attrs")), "lacks the attribute 'rf_id'"),
    "duplicate node ids": (_json(_duplicate_id()), "duplicate node id 10"),
    "ctrl_deps to a missing node": (_json(_missing_parent()), "ctrl_deps points at no node"),
    "dependency on a missing node": (_json(_missing_dependency()), "depends on node 777, which is not in the trace"),
    "cycle": (_json(trace(cyclic_nodes())), "dependency cycle"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input(case: str, tmp_path: Path) -> None:
    make, expected = CASES[case]
    source = tmp_path / ("input.json.gz" if "gzip" in case else "input.json")
    if make is not None:
        make(source)
    output = tmp_path / "out.et"
    done = run_cli(str(source), str(output))
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert str(source) in lines[0] and expected in lines[0], lines[0]
    assert "Traceback" not in done.stderr
    assert not output.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in [source] if p.exists())


def test_existing_output_is_left_untouched_on_failure(tmp_path: Path) -> None:
    source = tmp_path / "bad.json"
    source.write_text(json.dumps(GOOD)[:-10])
    output = tmp_path / "out.et"
    output.write_bytes(b"previous result")
    assert run_cli(str(source), str(output)).returncode == 1
    assert output.read_bytes() == b"previous result"


def test_cycle_error_lists_every_cycle(tmp_path: Path) -> None:
    nodes = cyclic_nodes()
    # a second, independent cycle on two more threads
    nodes += [
        op(4, "[pytorch|profiler|execution_trace|thread]", 1, tid=3),
        op(5, "[pytorch|profiler|execution_trace|thread]", 1, tid=4),
        op(40, "aten::a", 4, tid=3, inter_thread_dep=50),
        op(41, "aten::b", 4, tid=3),
        op(50, "aten::c", 5, tid=4, inter_thread_dep=41),
    ]
    source = tmp_path / "cycles.json"
    source.write_text(json.dumps(trace(nodes)))
    done = run_cli(str(source), str(tmp_path / "out.et"))
    assert done.returncode == 1
    assert "2 dependency cycle(s)" in done.stderr
    assert "10 'aten::mm'" in done.stderr and "40 'aten::a'" in done.stderr
    assert "--break-cycles" in done.stderr


def test_output_never_replaces_the_input(tmp_path: Path) -> None:
    source = tmp_path / "trace.json"
    source.write_text(json.dumps(GOOD))
    done = run_cli(str(source), str(source))
    assert done.returncode == 1 and "would overwrite the input" in done.stderr
    assert json.loads(source.read_text()) == GOOD


def test_usage_error_exits_2(tmp_path: Path) -> None:
    done = run_cli(str(tmp_path / "only-one-argument.json"))
    assert done.returncode == 2
    assert "usage:" in done.stderr


# -- the same bad input, whichever command reads it ------------------------------------------------
GPT2 = REAL_TRACES_DIR / "cpu_gpt2_ddp2"


def _deep_json(doc: dict) -> str:
    """json.dumps recurses: the nested value (1,000 levels) is put in by hand."""
    return json.dumps(doc).replace('"@deep@"', "[" * 1000 + "1" + "]" * 1000)


@pytest.mark.parametrize("command", ["convert", "link", "pair"])
def test_deeply_nested_json_is_one_line(command: str, tmp_path: Path) -> None:
    host, device = edge_case_pair(tmp_path / "in", layers=3, gz=False)
    doc = json.loads(host.read_text()) if command != "convert" else trace(two_threads())
    doc["nodes"][-1]["attrs"].append({"name": "deep", "type": "string", "value": "@deep@"})
    source = tmp_path / "in" / ("merged.json" if command == "convert" else host.name)
    source.write_text(_deep_json(doc))
    out = tmp_path / "out"
    out.mkdir()
    args = (
        [str(source), str(out / "o.et")]
        if command == "convert"
        else [
            "link" if command == "link" else "convert",
            "--host",
            str(source),
            "--device",
            str(device),
            str(out / "o"),
        ]
    )
    done = run_cli(*args)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and str(source) in lines[0] and "nested too deeply" in lines[0], lines
    assert list(out.iterdir()) == []


@pytest.mark.parametrize("command", ["link", "convert"])
def test_rank0_host_with_rank1_device_is_refused_by_link_and_convert(command: str, tmp_path: Path) -> None:
    """The pair links into a graph with cycles: both commands refuse it, for the same reason."""
    done = run_cli(
        command,
        "--host",
        str(GPT2 / "rank0_host.json.gz"),
        "--device",
        str(GPT2 / "rank1_device.json.gz"),
        str(tmp_path / "out"),
    )
    assert done.returncode == 1 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "another rank or run" in done.stderr and "--allow-mismatch" in done.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", ["link", "convert"])
@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (lambda node: node.pop("name"), "missing required field 'name'"),
        (lambda node: node.update(name=7), "name must be a string, got 7"),
        (lambda node: node.update(attrs=5), "malformed 'attrs'"),
        (lambda node: node.update(ctrl_deps=[1, 2]), "ctrl_deps must be a node id, got [1, 2]"),
        (lambda node: node.update(id=2**64), "id must be a non-negative integer"),
    ],
    ids=["no name", "name not a string", "attrs not a list", "ctrl_deps a list", "id beyond uint64"],
)
def test_a_malformed_host_node_is_refused_by_link_and_convert(
    command: str, change: Callable[[dict], object], problem: str, tmp_path: Path
) -> None:
    host, device = edge_case_pair(tmp_path / "in", layers=3, gz=False)
    doc = json.loads(host.read_text())
    change(doc["nodes"][5])
    host.write_text(json.dumps(doc))
    done = run_cli(command, "--host", str(host), "--device", str(device), str(tmp_path / "out"))
    assert done.returncode == 1 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert str(host) in done.stderr and "node #5" in done.stderr and problem in done.stderr
    assert not (tmp_path / "out").exists()


# -- round two: side inputs, closed streams, names, the API ------------------------------------------
@pytest.fixture
def et_file(tmp_path: Path) -> Path:
    (tmp_path / "in.json").write_text(json.dumps(GOOD))
    done = run_cli("convert", tmp_path / "in.json", tmp_path / "t.0.et")
    assert done.returncode == 0, done.stderr
    return tmp_path / "t.0.et"


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (_fifo, "--comm-groups: is a FIFO, not a regular file"),
        (lambda path: Path("/dev/zero"), "--comm-groups: is a character device, not a regular file"),
        (lambda path: path.parent, "--comm-groups: is a directory"),
        (lambda path: path, "--comm-groups: no such file"),
    ],
    ids=["FIFO without a writer", "/dev/zero", "a directory", "missing"],
)
def test_comm_groups_is_an_input_like_any_other(make: Callable[[Path], Path], expected: str, et_file: Path) -> None:
    """A FIFO with no writer used to block forever, /dev/zero to be read until memory ran out."""
    groups = make(et_file.parent / "groups.json")
    assert_one_error(run_cli("check", et_file, "--comm-groups", groups, timeout=30), expected)


def test_a_huge_comm_groups_file_is_refused_unread(et_file: Path) -> None:
    huge = et_file.parent / "huge.json"
    with open(huge, "wb") as fh:
        fh.truncate(65 << 20)  # sparse: no disk used
    assert_one_error(run_cli("check", et_file, "--comm-groups", huge), "--comm-groups: 68,157,440 bytes")


def _close_stderr() -> None:
    os.close(2)


def test_a_command_with_stderr_closed_works(et_file: Path) -> None:
    """``2>&-``: every command used to exit 1 without doing anything."""
    out = et_file.parent / "again.et"
    done = run_cli("convert", et_file.parent / "in.json", out, preexec_fn=_close_stderr)
    assert done.returncode == 0 and out.read_bytes() == et_file.read_bytes()
    failed = run_cli("convert", et_file.parent / "missing.json", out, preexec_fn=_close_stderr)
    assert failed.returncode == 1 and failed.stderr == ""


def test_a_name_that_is_not_utf8_is_shown_escaped(tmp_path: Path) -> None:
    """With ``--log-filename``, such a name turned a success into exit 1 (UnicodeEncodeError)."""
    source = os.fsencode(tmp_path) + b"/in\xff.json"
    with open(source, "w") as fh:
        fh.write(json.dumps(GOOD))
    name = os.fsdecode(source)
    output = os.fsdecode(os.fsencode(tmp_path) + b"/o\xff.et")
    done = run_cli("--log-filename", tmp_path / "log", "convert", name, output)
    assert done.returncode == 0, done.stderr
    assert "o\\xff.et" in (tmp_path / "log").read_text() and "o\\xff.et" in done.stderr
    line = assert_one_error(run_cli("convert", name, f"{tmp_path}/o.et/"), "names a directory")
    failed = run_cli("convert", os.fsdecode(os.fsencode(tmp_path) + b"/gone\xff.json"), tmp_path / "o2.et")
    assert "gone\\xff.json: no such file" in assert_one_error(failed), line


def test_a_newline_in_a_name_keeps_the_error_on_one_line(tmp_path: Path) -> None:
    line = assert_one_error(run_cli("convert", tmp_path / "two\nlines.json", tmp_path / "o.et"), "no such file")
    assert "two\\nlines.json" in line


def test_a_full_stdout_is_one_error(et_file: Path) -> None:
    with open("/dev/full", "w") as full:
        process = subprocess.run(
            [*CLI, "check", str(et_file), "--json"], stdout=full, stderr=subprocess.PIPE, text=True, timeout=60
        )
    assert "Traceback" not in process.stderr and "Exception ignored" not in process.stderr, process.stderr
    assert process.returncode == 1
    assert ERROR_PREFIX + "cannot write to standard output: No space left on device" in process.stderr.splitlines()


def test_a_relative_output_after_the_working_directory_is_gone(tmp_path: Path) -> None:
    (tmp_path / "in.json").write_text(json.dumps(GOOD))
    (tmp_path / "gone").mkdir()
    done = run_cli(
        "convert", tmp_path / "in.json", "o.et", cwd=tmp_path / "gone", preexec_fn=lambda: os.rmdir(os.getcwd())
    )
    assert_one_error(done, "o.et: cannot resolve the path", "give an absolute path")
    assert sorted(os.listdir(tmp_path)) == ["in.json"]


def test_convert_usage_shows_one_input_and_one_output() -> None:
    done = run_cli("convert")
    assert done.returncode == 2
    usage = done.stderr.split("error:")[0]
    assert "OUTPUT ..." not in usage and "[[INPUT]" not in usage, usage
    assert "INPUT OUTPUT" in usage and "--host HOST --device DEVICE OUTPUT" in usage


def test_an_unreachable_ray_address_from_the_environment_fails_in_seconds(tmp_path: Path) -> None:
    """``--ray`` without an address follows ray.init(): RAY_ADDRESS first; it gets the same
    connection check as an explicit address (it used to wait ~10 minutes printing Ray's logs)."""
    edge_case_pair(tmp_path / "job", layers=3, rank=0, world=1)
    with socket.socket() as unused:  # a port nothing listens on
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    started = time.monotonic()
    done = run_cli(
        "convert-all",
        tmp_path / "job",
        tmp_path / "out",
        "--ray",
        timeout=120,
        env={**os.environ, "RAY_ADDRESS": f"127.0.0.1:{port}"},
    )
    assert_one_error(done, f"cannot connect to the Ray cluster at 127.0.0.1:{port} (RAY_ADDRESS)")
    assert time.monotonic() - started < 60
    assert not (tmp_path / "out").exists()


# -- the Python API: arguments checked at the entry points ----------------------------------------------
# the API as an untyped caller sees it: the calls below are wrong on purpose
loose_api: Any = api


@pytest.mark.parametrize(
    ("call", "error", "text"),
    [
        (lambda p: loose_api.convert(1, p / "o.et"), TypeError, "input_path must be a path"),
        (lambda p: loose_api.convert(p / "in.json", p / "o.et", options="fast"), TypeError, "options must be"),
        (lambda p: loose_api.convert(p / "in.json", p / "o.et", progress=3), TypeError, "progress must be callable"),
        (lambda p: loose_api.convert(b"in.json", p / "o.et"), TypeError, "input_path must be a path"),
        (lambda p: loose_api.ConvertOptions(jobs=0), OptionError, "`jobs` 0: must be from 1 to 4,096"),
        (lambda p: loose_api.ConvertOptions(simulate="yes"), TypeError, "simulate must be a bool"),
        (lambda p: loose_api.ConvertOptions(rank=True), TypeError, "rank must be an int"),
        (lambda p: loose_api.convert_all(p, p / "out", jobs=0), OptionError, "`jobs` 0: must be from 1 to 4,096"),
        (lambda p: loose_api.convert_all(p, p / "out", prefix=7), TypeError, "prefix must be a str or None"),
        (lambda p: loose_api.convert_pair(p / "h", p / "d", p / "o", rank="0"), TypeError, "rank must be an int"),
        (
            lambda p: loose_api.link(p / "h", p / "d", None, allow_mismatch=1),
            TypeError,
            "allow_mismatch must be a bool",
        ),
        (lambda p: loose_api.repair(None, p / "o"), TypeError, "input_path must be a path"),
        (lambda p: loose_api.check([]), ValueError, "no file given"),
        (lambda p: loose_api.check(5), TypeError, "paths must be a path or a list of paths"),
        (lambda p: loose_api.check([p / "t.0.et", 5]), TypeError, r"paths\[1\] must be a path"),
        (lambda p: loose_api.write_comm_groups(p / "d", p / "o"), OSError, "no such file"),
    ],
)
def test_the_api_checks_its_arguments(
    call: Callable[[Path], object], error: type[Exception], text: str, et_file: Path
) -> None:
    """Wrong types used to end in AttributeErrors deep inside; jobs=0 was accepted."""
    expected = ConverterError if error is OSError else error
    with pytest.raises(expected, match=text):
        call(et_file.parent)


def test_check_takes_one_path_as_a_list_of_one(et_file: Path) -> None:
    """A single path used to be iterated letter by letter."""
    assert [f.path for f in api.check(et_file).files] == [str(et_file)]
    assert [f.path for f in api.check(str(et_file)).files] == [str(et_file)]


# -- round three (issue 29): outside simulate's own code --------------------------------------------
ASTRA_DATA = Path(__file__).parent / "data" / "astra_sim"
_REPLAY = f"""
import re, sys
config = next(a.split("=", 1)[1] for a in sys.argv if a.startswith("--logging-configuration="))
target = re.search(r'filename = "(.*)"', open(config).read()).group(1)
open(target, "w").write(open({str(ASTRA_DATA / "tiny.events.log")!r}).read())
"""


def _replaying_simulator(tmp_path: Path) -> Path:
    """A stand-in for ASTRA-sim that writes a real run's log of the two-rank job ``tiny``."""
    home = tmp_path / "fake-astra-sim"
    (home / "bin").mkdir(parents=True)
    for name in ("AstraSim_Analytical_Congestion_Unaware", "AstraSim_Analytical_Congestion_Aware"):
        script = home / "bin" / name
        script.write_text(f"#!{sys.executable}\n{_REPLAY}")
        script.chmod(0o755)
    return home


def _tiny_job(tmp_path: Path) -> Path:
    for rank in (0, 1):
        (tmp_path / f"job.{rank}.et").write_bytes((ASTRA_DATA / f"tiny.{rank}.et").read_bytes())
    return tmp_path / "job"


def test_a_full_stdout_names_standard_output_whoever_prints(tmp_path: Path) -> None:
    """Issue 29: ``simulate > /dev/full`` said only "No space left on device" (its table is printed
    with ``print``): every write to the process's stdout now names it."""
    job, simulator = _tiny_job(tmp_path), _replaying_simulator(tmp_path)
    for extra in ([], ["--json"]):
        with open("/dev/full", "w") as full:
            process = subprocess.run(
                [*CLI, "simulate", str(job), "--astra-sim-bin", str(simulator), *extra],
                stdout=full,
                stderr=subprocess.PIPE,
                text=True,
                timeout=120,
            )
        assert process.returncode == 1, process.stderr
        assert process.stderr.splitlines() == [
            ERROR_PREFIX + "cannot write to standard output: No space left on device"
        ], process.stderr


@pytest.mark.parametrize("key", ["\u00b2", "\u0663", str(10**23), " 1"])
def test_group_ids_are_ascii_decimal_in_astra_sims_range(key: str, tmp_path: Path) -> None:
    """Issue 29: group id "²" was ``internal error: ValueError`` in simulate; "٣" and 10^23 passed
    its check (ASTRA-sim then aborted). One check, in the group file's reader, for every command
    (scale's table: tests/test_scale.py)."""
    job = _tiny_job(tmp_path)
    Path(f"{job}.comm_group.json").write_text(json.dumps({key: [0, 1]}))
    done = run_cli("simulate", job, "--astra-sim-bin", _replaying_simulator(tmp_path))
    assert_one_error(
        done,
        f"job.comm_group.json: group id {key!r}: ASTRA-sim needs whole numbers > 0, in ASCII "
        "decimal digits, at most 2,147,483,647",
    )


def test_a_newline_in_a_name_is_escaped_in_the_whole_message(tmp_path: Path) -> None:
    """Issue 29: the subject was escaped, the body (another path quoted in it) was not: two lines."""
    source = tmp_path / "two\nlines.json"
    source.write_text(json.dumps(GOOD))
    line = assert_one_error(run_cli("convert", source, source), "would overwrite the input")
    assert line.count("two\\nlines.json") == 2, line
    line = assert_one_error(run_cli("--log-filename", source, "convert", source, tmp_path / "o.et"))
    assert line.count("two\\nlines.json") == 2, line


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("7", 7),
        (" 12 ", 12),
        ("+3", 3),
        ("0", "must be at least 1, got 0"),
        ("101", "must be at most 100, got 101"),
        ("\u0663", "must be a whole number from 1 to 100, got '\u0663'"),
        ("1_0", "must be a whole number"),
        ("1e2", "must be a whole number"),
        ("1" * 5000, "must be a whole number from 1 to 100, got '111"),
    ],
)
def test_whole_numbers_in_a_stated_range(text: str, expected: int | str) -> None:
    parse = whole(1, 100)
    if isinstance(expected, int):
        assert parse(text) == expected
    else:
        with pytest.raises(argparse.ArgumentTypeError, match=re.escape(expected)):
            parse(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1", 1.0),
        ("2.5e3", 2500.0),
        (".5", 0.5),
        ("1e-300", "must be a number from 0.001 to 1e+06 GB/s"),
        ("nan", "must be a number from"),
        ("inf", "must be a number from"),
        ("-1", "must be a number from"),
        ("1e400", "must be a number from"),
        ("\u0663", "must be a number from"),
        ("0x10", "must be a number from"),
    ],
)
def test_quantities_are_finite_and_in_a_stated_range(text: str, expected: float | str) -> None:
    parse = quantity(1e-3, 1e6, "GB/s")
    if isinstance(expected, float):
        assert parse(text) == expected
    else:
        with pytest.raises(argparse.ArgumentTypeError, match=re.escape(expected)):
            parse(text)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["scale", "in", "out", "--ranks", "1048577"], "must be at most 1,048,576"),
        (["convert-all", "in", "out", "--jobs", "4097"], "must be at most 4,096"),
        (["convert", "--host", "h.json", "--device", "d.json", "o.et", "--rank", "-1"], "must be at least 0"),
        (["visualize", "in.et", "o.dot", "--around", "\u0663"], "must be a whole number from 0 to"),
    ],
)
def test_numbers_outside_their_range_are_usage_errors(args: list[str], expected: str, tmp_path: Path) -> None:
    done = run_cli(*args, cwd=tmp_path)
    assert done.returncode == 2 and expected in done.stderr.splitlines()[-1], done.stderr
    assert "Traceback" not in done.stderr and os.listdir(tmp_path) == []

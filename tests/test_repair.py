"""``repair``: keep the last complete object of a concatenated host trace, and say what was dropped."""

from __future__ import annotations

import gzip
import json
import random
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from chakra_convert_fast.converter import cli
from chakra_convert_fast.converter.errors import TraceFormatError
from chakra_convert_fast.converter.repair import repair

from .clirun import assert_one_error, listing, run_cli
from .traces import REAL_TRACES_DIR

pytestmark = [pytest.mark.slow]

REAL_HOST = REAL_TRACES_DIR / "cpu_gpt2_ddp2" / "rank0_host.json.gz"

DOC = {
    "schema": "1.1.1-chakra.0.0.4",
    "pid": 1,
    "nodes": [{"id": 1, "name": 'a "}{" \\ b', "x": [{"y": {}}]}],
}
SECOND = {**DOC, "pid": 2}


def test_keeps_last_complete_object_and_reports_drops(tmp_path: Path) -> None:
    text = json.dumps(DOC) + "\n" + json.dumps(SECOND) + '\n{"schema": "x", "nodes": [{"id": "}'
    src = tmp_path / "cat.json.gz"
    with gzip.open(src, "wt") as f:
        f.write(text)
    result = repair(src, tmp_path / "fixed.json")
    assert json.loads((tmp_path / "fixed.json").read_text()) == SECOND
    assert len(result.dropped) == 1 and result.trailing_bytes > 0
    assert "dropped 1 earlier" in result.describe()


def test_large_strings_across_chunks(tmp_path: Path) -> None:
    big = {**DOC, "pad": '\\"{' * 700_000}
    src = tmp_path / "big.json"
    src.write_text(json.dumps(DOC) + json.dumps(big))
    repair(src, tmp_path / "out.json.gz")
    with gzip.open(tmp_path / "out.json.gz", "rt") as f:
        assert json.load(f) == big


@pytest.mark.parametrize("text", ["", '{"a": [1, 2', "garbage"])
def test_nothing_complete_is_an_error_and_writes_nothing(tmp_path: Path, text: str) -> None:
    src = tmp_path / "bad.json"
    src.write_text(text)
    with pytest.raises(TraceFormatError):
        repair(src, tmp_path / "out.json")
    assert not (tmp_path / "out.json").exists()


def test_link_refuses_concatenated_host_and_points_to_repair(tmp_path: Path, capsys) -> None:
    from tests.linkcases import edge_case_pair

    host, device = edge_case_pair(tmp_path, layers=10, gz=False)
    host.write_text(host.read_text() + host.read_text())
    code = cli.main(["link", "--host", str(host), "--device", str(device), str(tmp_path / "m.json")])
    err = capsys.readouterr().err
    assert code != 0 and "repair" in err and err.count("\n") == 1
    assert cli.main(["repair", str(host), str(tmp_path / "fixed.json")]) == 0
    fixed = tmp_path / "fixed.json"
    assert cli.main(["link", "--host", str(fixed), "--device", str(device), str(tmp_path / "m.json")]) == 0


def test_repair_never_overwrites_its_input(tmp_path) -> None:
    import pytest

    from chakra_convert_fast.converter.api import repair
    from chakra_convert_fast.converter.errors import ConverterError

    source = tmp_path / "host.json"
    source.write_text('{"a": 1}{"a": 2}')
    with pytest.raises(ConverterError, match="would overwrite the input"):
        repair(source, source)
    assert source.read_text() == '{"a": 1}{"a": 2}'


# -- no input makes repair hang: one linear pass ---------------------------------------------------
CHUNK = 1 << 20  # repair reads this much at a time


def test_a_real_host_trace_written_twice_gzipped(tmp_path: Path) -> None:
    """Written twice, the second copy torn; blank space in front puts the first chunk's end in
    the middle of a long string (what made the old pattern backtrack for ever)."""
    with gzip.open(REAL_HOST, "rb") as fh:
        once = fh.read()
    long_string = re.search(rb'"[^"\\]{60,}"', once)
    assert long_string is not None and long_string.start() + 30 < CHUNK
    padding = b" " * (CHUNK - long_string.start() - 30)
    source = tmp_path / "twice.json.gz"
    source.write_bytes(gzip.compress(padding + once + b"\n" + once + b"\n" + once[: len(once) // 3]))
    done = run_cli("repair", source, tmp_path / "fixed.json", timeout=60)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "fixed.json").read_bytes() == once
    assert "dropped" in done.stderr


def _string_cut_at_the_chunk_end(length: int, unit: str) -> bytes:
    """Two documents; in the second, a string of ``length`` characters crosses a chunk boundary."""
    first = json.dumps(DOC)
    prefix = first + '{"schema": "1.1.1-chakra.0.0.4", "pad": "'
    fill = CHUNK + 10 - len(prefix)  # the long string starts 10 bytes before the boundary
    text = prefix + "x" * fill + '", "s": "' + unit * (length // len(unit)) + '", "nodes": []}'
    return text.encode()


@pytest.mark.parametrize("length", [31, 100, 5_000, 3 * CHUNK])
@pytest.mark.parametrize("unit", ["a", '\\"', "\\\\", "é{}"], ids=["plain", "escaped quotes", "backslashes", "braces"])
def test_long_strings_across_chunk_boundaries(length: int, unit: str, tmp_path: Path) -> None:
    data = _string_cut_at_the_chunk_end(length, unit)
    source = tmp_path / "cut.json"
    source.write_bytes(data)
    done = run_cli("repair", source, tmp_path / "fixed.json", timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "fixed.json").read_bytes()) == json.loads(data[len(json.dumps(DOC)) :])


def _utf16(path: Path) -> None:
    path.write_bytes((json.dumps(DOC) * 2).encode("utf-16"))


def _random(path: Path) -> None:
    path.write_bytes(random.Random(5).randbytes(3 * CHUNK))


def _unterminated(path: Path) -> None:
    path.write_bytes(b'{"a": "' + b'\\"x' * CHUNK)


def _binary_inside_an_object(path: Path) -> None:
    path.write_bytes(b'{"a": \x00\x01\x02}')


@pytest.mark.parametrize(
    "make",
    [_utf16, _random, _unterminated, _binary_inside_an_object],
    ids=["UTF-16", "random bytes", "an unterminated string", "binary inside braces"],
)
def test_no_json_object_is_one_line(make: Callable[[Path], None], tmp_path: Path) -> None:
    source = tmp_path / "bad.json"
    make(source)
    done = run_cli("repair", source, tmp_path / "out.json", timeout=60)
    assert_one_error(done, str(source), "holds no complete JSON object")
    assert listing(tmp_path) == ["bad.json"]


@pytest.mark.parametrize(
    "text",
    [b'{"nodes": ["caf\xe9"]}', b'{"nodes": [1, 2,]}', b'{"nodes": 5}', b'{"schema": "x"}', b"{}", b'{"a": tru}'],
    ids=["not UTF-8", "not JSON", "nodes not an array", "no nodes", "empty", "a broken literal"],
)
def test_objects_that_are_not_traces_are_not_kept(text: bytes, tmp_path: Path) -> None:
    source = tmp_path / "bad.json"
    source.write_bytes(json.dumps(DOC).encode() + text)
    done = run_cli("repair", source, tmp_path / "out.json")
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "out.json").read_text()) == DOC
    assert "skipped 1 object(s) that are not JSON traces" in done.stderr
    source.write_bytes(text)
    assert_one_error(run_cli("repair", source, tmp_path / "out2.json"), "holds no complete JSON object")
    assert listing(tmp_path) == ["bad.json", "out.json"]

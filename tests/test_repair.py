"""``repair``: keep the last complete object of a concatenated host trace, and say what was dropped."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from converter import cli_link
from converter.errors import TraceFormatError
from converter.repair import repair

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
    from tests.pairgen import generate_pair

    host, device = generate_pair(tmp_path, layers=10, gz=False)
    host.write_text(host.read_text() + host.read_text())
    code = cli_link.main(
        ["link", "--host", str(host), "--device", str(device), "-o", str(tmp_path / "m.json")]
    )
    err = capsys.readouterr().err
    assert code != 0 and "repair" in err and err.count("\n") == 1
    assert cli_link.main(["repair", str(host), str(tmp_path / "fixed.json")]) == 0
    fixed = tmp_path / "fixed.json"
    assert (
        cli_link.main(["link", "--host", str(fixed), "--device", str(device), "-o", str(tmp_path / "m.json")])
        == 0
    )


def test_repair_never_overwrites_its_input(tmp_path) -> None:
    import pytest

    from converter.api_link import repair
    from converter.errors import ConverterError

    source = tmp_path / "host.json"
    source.write_text('{"a": 1}{"a": 2}')
    with pytest.raises(ConverterError, match="would overwrite the input"):
        repair(source, source)
    assert source.read_text() == '{"a": 1}{"a": 2}'

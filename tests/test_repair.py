"""``repair``: keep the last complete object of a concatenated host trace, and say what was dropped."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from chakra_convert_fast.converter import cli
from chakra_convert_fast.converter.errors import TraceFormatError
from chakra_convert_fast.converter.repair import repair

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
    code = cli.main(
        ["link", "--host", str(host), "--device", str(device), str(tmp_path / "m.json")]
    )
    err = capsys.readouterr().err
    assert code != 0 and "repair" in err and err.count("\n") == 1
    assert cli.main(["repair", str(host), str(tmp_path / "fixed.json")]) == 0
    fixed = tmp_path / "fixed.json"
    assert (
        cli.main(["link", "--host", str(fixed), "--device", str(device), str(tmp_path / "m.json")])
        == 0
    )


def test_repair_never_overwrites_its_input(tmp_path) -> None:
    import pytest

    from chakra_convert_fast.converter.api import repair
    from chakra_convert_fast.converter.errors import ConverterError

    source = tmp_path / "host.json"
    source.write_text('{"a": 1}{"a": 2}')
    with pytest.raises(ConverterError, match="would overwrite the input"):
        repair(source, source)
    assert source.read_text() == '{"a": 1}{"a": 2}'

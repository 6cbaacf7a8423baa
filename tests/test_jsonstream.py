"""The streaming reader decodes exactly what json.load does, wherever the chunks are cut."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import pytest

from chakra_convert_fast.converter import ConvertOptions, convert, jsonstream
from chakra_convert_fast.converter.convert import parallel
from chakra_convert_fast.converter.errors import TraceFormatError
from chakra_convert_fast.converter.jsonstream import JsonObjectStream

from .tracebuild import op, trace, two_threads

DOCUMENTS = {
    "metadata after nodes": '{"schema": "s", "nodes": [{"id": 1}, {"id": 2}], "finish_ts": 12345}',
    "non-finite and huge numbers": '{"nodes": [[NaN, Infinity, -Infinity, 18446744073709551616, -9223372036854775809,'
    " 1.5e400, 1e-400, -0.0, 0.1, 1E5]]}",
    "strings and escapes": '{"nodes": ["a\\"b", "\\u00e9\\ud83d\\ude00", "tab\\t", "]}{,"], "k": "v"}',
    "nested and empty": '{"a": {}, "nodes": [[], {}, [[[]]], {"x": [1, {"y": null}]}], "b": [true, false]}',
    "whitespace everywhere": ' \n{ "nodes" : [ 1 , 2 ,\r\n 3 ] , "z" : 7 } \n ',
    "no nodes array elements": '{"nodes": []}',
    "number at the very end": '{"nodes": [], "pid": 1234567890123}',
}


def stream_all(path: Path) -> dict:
    out = {}
    with JsonObjectStream(path, {"nodes"}) as stream:
        for key, value in stream.items():
            out[key] = list(value) if key == "nodes" else value
    return out


def same(a: object, b: object) -> bool:
    """Equality that treats NaN as equal to itself and tells -0.0 from 0.0."""
    return repr(a) == repr(b) and (not isinstance(a, float) or math.isnan(a) or a == b)


@pytest.mark.parametrize("chunk", [1, 2, 3, 7, 64, 1 << 20])
@pytest.mark.parametrize("name", sorted(DOCUMENTS))
def test_matches_json_load_for_any_chunking(
    name: str, chunk: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jsonstream, "_CHUNK_BYTES", chunk)
    path = tmp_path / "doc.json"
    path.write_text(DOCUMENTS[name], encoding="utf-8")
    assert repr(stream_all(path)) == repr(json.loads(DOCUMENTS[name]))


def test_gzip_and_multibyte_characters_across_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jsonstream, "_CHUNK_BYTES", 5)
    doc = {"nodes": [{"name": "é中😀" * 50, "id": i} for i in range(20)], "schema": "s"}
    path = tmp_path / "doc.json.gz"
    path.write_bytes(gzip.compress(json.dumps(doc, ensure_ascii=False).encode()))
    assert stream_all(path) == doc


def test_unconsumed_stream_arrays_are_skipped(tmp_path: Path) -> None:
    path = tmp_path / "doc.json"
    path.write_text('{"nodes": [1, 2, 3], "after": true}')
    with JsonObjectStream(path, {"nodes"}) as stream:
        keys = [key for key, _ in stream.items()]
    assert keys == ["nodes", "after"]


def test_progress_counts_bytes(tmp_path: Path) -> None:
    path = tmp_path / "doc.json"
    path.write_text(json.dumps({"nodes": list(range(1000))}))
    with JsonObjectStream(path, {"nodes"}) as stream:
        for _, value in stream.items():
            list(value)
        assert stream.bytes_read == stream.total_bytes == path.stat().st_size


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('{"nodes": [1, 2', "truncated JSON"),
        ('{"nodes": [1,, 2]}', "invalid JSON at character"),
        ('{"a": 1} {"a": 2}', "several concatenated JSON documents"),
        ('{"a": 1, "a": 2}', "duplicate top-level key"),
        ('{"a" 1}', "expected ':'"),
        ("", "file is empty"),
    ],
)
def test_errors_name_the_problem(text: str, problem: str, tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(TraceFormatError, match=problem) as caught:
        stream_all(path)
    assert str(caught.value).startswith(str(path))


# -- errors: found where they are, reported where they are -------------------------------------------
def test_an_error_far_from_the_buffer_end_reads_no_further(tmp_path: Path) -> None:
    """A syntax error near the start of a large file is reported from the first chunk: the reader
    refills only while a value runs into the end of what it holds."""
    filler = ", ".join(json.dumps({"id": i, "pad": "x" * 100}) for i in range(60_000))  # ~7 MB
    text = '{"nodes": [{"id": 0, "bad": tru}, ' + filler + "]}"
    path = tmp_path / "t.json"
    path.write_text(text)
    stream = JsonObjectStream(path, {"nodes"})
    try:
        with pytest.raises(TraceFormatError, match=f"invalid JSON at character {text.index('tru')}: Expecting value"):
            for _, value in stream.items():
                list(value)
        assert stream.bytes_read <= 2 * jsonstream._CHUNK_BYTES
    finally:
        stream.close()


@pytest.mark.parametrize("cut", ["tru", "-Infinit", "1e+", '"\\u12', "nul", "[1, 2"])
def test_a_value_cut_by_the_buffer_end_is_still_read(cut: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The other side: a value the buffer's end cuts in the middle of a token is completed."""
    monkeypatch.setattr(jsonstream, "_CHUNK_BYTES", 64)
    monkeypatch.setattr(jsonstream, "_LOOKAHEAD", 0)
    rest = {"tru": "e", "-Infinit": "y", "1e+": "5", '"\\u12': '34"', "nul": "l", "[1, 2": "]"}[cut]
    for pad in range(40, 80):  # the cut falls at every offset around the 64-character chunk
        text = '{"p": "' + "x" * pad + '", "nodes": [' + cut + rest + "]}"
        path = tmp_path / "t.json"
        path.write_text(text)
        assert stream_all(path) == json.loads(text)


def test_positions_after_a_split_are_the_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(parallel, "MIN_SPLIT_BYTES", 0)
    monkeypatch.setattr(parallel, "MIN_RANGE_BYTES", 1)
    nodes = two_threads() + [op(100 + i, f"aten::é{i}", 2) for i in range(60)]  # characters != bytes
    nodes[-3]["exclusive_dur"] = "@@@"
    text = json.dumps(trace(nodes)).replace('"@@@"', "tru")
    path = tmp_path / "t.json"
    path.write_text(text)
    splits = parallel.find_splits(str(path), 2)
    assert len(splits) == 1 and splits[0] < len(text[: text.index("tru")].encode())  # a worker meets the error
    with pytest.raises(TraceFormatError, match=f"invalid JSON at character {text.index('tru')}:"):
        convert(path, tmp_path / "o.et", ConvertOptions(jobs=2))
    assert list(tmp_path.iterdir()) == [path]


@pytest.mark.parametrize("opener", ["[", '{"a": '])
def test_nesting_too_deep_is_an_error(opener: str, tmp_path: Path) -> None:
    closer = "]" if opener == "[" else "}"
    path = tmp_path / "deep.json"
    path.write_text('{"nodes": [{"id": 1, "v": ' + opener * 5000 + "1" + closer * 5000 + "}]}")
    with pytest.raises(TraceFormatError, match="nested too deeply"):
        stream_all(path)

"""``jsonize``: chakra_jsonizer's bytes (``--chakra-format``), and protobuf's JSON mapping in one
document or one object a line, on real and random nodes; bad ``.et`` input is one error line."""

from __future__ import annotations

import gzip
import itertools
import json
import random
import shutil
import subprocess
from pathlib import Path

import pytest
from chakra.schema.protobuf import et_def_pb2 as pb
from google.protobuf.json_format import MessageToDict, MessageToJson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chakra_convert_fast.converter import api
from chakra_convert_fast.converter.errors import ConverterError
from chakra_convert_fast.converter.et.records import decode_global_metadata, decode_node
from chakra_convert_fast.converter.et.wire import delimited_message
from chakra_convert_fast.converter.tools.jsonize import Printer
from tests.clirun import assert_one_error, listing, run_cli
from tests.traces import read_et

DATA = Path(__file__).parent / "data" / "traces"
U64, I64, U32, I32 = (0, 2**64 - 1), (-(2**63), 2**63 - 1), (0, 2**32 - 1), (-(2**31), 2**31 - 1)


@pytest.fixture(scope="module")
def real_et(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A GPT-2 DDP rank converted by this package (the converter's output is byte-identical to chakra_converter's)."""
    out = tmp_path_factory.mktemp("et") / "gpt2.0.et"
    api.convert(DATA / "cpu_gpt2_ddp2" / "rank0_merged_by_chakra_trace_link.json.gz", out)
    return out


def test_chakra_format_is_chakra_jsonizers_bytes(real_et: Path, tmp_path: Path) -> None:
    exe = shutil.which("chakra_jsonizer")
    assert exe, "mlc-chakra (the test extra) provides chakra_jsonizer"
    subprocess.run(
        [exe, "--input_filename", str(real_et), "--output_filename", str(tmp_path / "ref.json")],
        check=True,
        capture_output=True,
    )
    done = run_cli("jsonize", real_et, tmp_path / "ours.json", "--chakra-format")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "ours.json").read_bytes() == (tmp_path / "ref.json").read_bytes()
    # chakra_jsonizer's own option names are accepted as they are
    done = run_cli(
        "jsonize", "--input_filename", real_et, "--output_filename", tmp_path / "ours2.json", "--chakra-format"
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "ours2.json").read_bytes() == (tmp_path / "ref.json").read_bytes()


def test_generated_microbenchmarks_every_attribute_kind(tmp_path: Path) -> None:
    """chakra_generator's all-types node holds every AttributeProto value kind."""
    api.generate(tmp_path, api.GenerateOptions(num_npus=1))
    for trace in sorted(tmp_path.glob("*.et")):
        meta, nodes = read_et(trace)
        api.jsonize(trace, tmp_path / "out.json", "chakra")
        expected = MessageToJson(meta) + "".join(MessageToJson(n) for n in nodes)
        assert (tmp_path / "out.json").read_text() == expected, trace.name


def test_document_and_lines_are_protobufs_json_mapping(real_et: Path, tmp_path: Path) -> None:
    meta, nodes = read_et(real_et)
    expected_nodes = [MessageToDict(n) for n in nodes]
    api.jsonize(real_et, tmp_path / "doc.json")
    document = json.loads((tmp_path / "doc.json").read_text())
    assert document == {"globalMetadata": MessageToDict(meta), "nodes": expected_nodes}
    result = api.jsonize(real_et, tmp_path / "lines.jsonl", "lines")
    lines = (tmp_path / "lines.jsonl").read_text().splitlines()
    assert result.nodes == len(nodes) == len(lines) - 1
    assert [json.loads(line) for line in lines] == [MessageToDict(meta), *expected_nodes]
    # each line is exactly json.dumps of MessageToDict
    assert lines[1:4] == [json.dumps(d) for d in expected_nodes[:3]]


def test_an_empty_trace_is_an_empty_nodes_array(tmp_path: Path) -> None:
    src = tmp_path / "empty.et"
    src.write_bytes(delimited_message(pb.GlobalMetadata(version="1.0.0").SerializeToString()))
    api.jsonize(src, tmp_path / "doc.json")
    assert json.loads((tmp_path / "doc.json").read_text()) == {"globalMetadata": {"version": "1.0.0"}, "nodes": []}


# -- random nodes: our decoding and printing against protobuf's parse and MessageToJson -------------
_TEXT = st.text(max_size=12)
_FLOATS = st.floats(allow_nan=True, allow_infinity=True)
_SCALARS = {
    "double": _FLOATS,
    "float": st.floats(width=32, allow_nan=True),
    "int32": st.integers(*I32),
    "int64": st.integers(*I64),
    "uint32": st.integers(*U32),
    "uint64": st.integers(*U64),
    "sint32": st.integers(*I32),
    "sint64": st.integers(*I64),
    "fixed32": st.integers(*U32),
    "fixed64": st.integers(*U64),
    "sfixed32": st.integers(*I32),
    "sfixed64": st.integers(*I64),
    "bool": st.booleans(),
    "string": _TEXT,
    "bytes": st.binary(max_size=8),
}


@st.composite
def attributes(draw: st.DrawFn) -> pb.AttributeProto:
    attr = pb.AttributeProto(name=draw(_TEXT), doc_string=draw(st.sampled_from(["", "doc"])))
    kind = draw(st.sampled_from([None, *_SCALARS]))
    if kind is None:
        return attr
    if draw(st.booleans()):
        setattr(attr, f"{kind}_val", draw(_SCALARS[kind]))
    else:
        getattr(attr, f"{kind}_list").values.extend(draw(st.lists(_SCALARS[kind], max_size=3)))
        getattr(attr, f"{kind}_list").SetInParent()
    return attr


@st.composite
def nodes(draw: st.DrawFn) -> pb.Node:
    node = pb.Node(
        id=draw(st.integers(*U64)),
        name=draw(_TEXT),
        type=draw(st.sampled_from([0, 1, 4, 7, 99])),
        ctrl_deps=draw(st.lists(st.integers(*U64), max_size=3)),
        data_deps=draw(st.lists(st.integers(*U64), max_size=3)),
        start_time_micros=draw(st.integers(*U64)),
        duration_micros=draw(st.integers(*U64)),
    )
    for io_name in ("inputs", "outputs"):
        if draw(st.booleans()):
            io = getattr(node, io_name)
            io.SetInParent()
            io.values, io.shapes, io.types = draw(_TEXT), draw(_TEXT), draw(_TEXT)
    node.attr.extend(draw(st.lists(attributes(), max_size=4)))
    return node


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nodes())
def test_random_nodes_print_as_protobuf_does(node: pb.Node) -> None:
    data = node.SerializeToString()
    decoded = decode_node(data)
    assert decoded.id == node.id and decoded.name == node.name and decoded.type == node.type
    assert decoded.ctrl_deps == list(node.ctrl_deps) and decoded.data_deps == list(node.data_deps)
    assert len(decoded.attr) == len(node.attr)
    assert Printer(indent=True).node(decoded) == MessageToJson(node)
    assert Printer(indent=False).node(decoded) == json.dumps(MessageToDict(node))


@settings(max_examples=50, deadline=None)
@given(st.lists(attributes(), max_size=4), _TEXT)
def test_random_global_metadata(attrs: list[pb.AttributeProto], version: str) -> None:
    meta = pb.GlobalMetadata(version=version, attr=attrs)
    assert Printer(indent=True).metadata(decode_global_metadata(meta.SerializeToString())) == MessageToJson(meta)


def test_unpacked_and_repeated_fields_merge_as_protobuf_does() -> None:
    """Repeated fields unpacked, a message field met twice, a oneof switched: as ParseFromString."""
    one = pb.Node(id=5, data_deps=[1], inputs=pb.IOInfo(values="a"))
    one.attr.add(name="x", int64_list=pb.Int64List(values=[1]))
    two = pb.Node(id=6, inputs=pb.IOInfo(shapes="s"))
    unpacked_dep = bytes([0x28, 7])  # data_deps, wire type varint
    data = one.SerializeToString() + two.SerializeToString() + unpacked_dep
    parsed = pb.Node.FromString(data)
    assert Printer(indent=True).node(decode_node(data)) == MessageToJson(parsed)
    attr = pb.AttributeProto(name="y", int64_list=pb.Int64List(values=[1])).SerializeToString()
    more = pb.AttributeProto(int64_list=pb.Int64List(values=[2, 3])).SerializeToString()
    switched = pb.AttributeProto(bool_val=True).SerializeToString()
    for raw in (attr + more, attr + switched, switched + attr):
        expected = MessageToJson(pb.AttributeProto.FromString(raw))
        node = pb.Node(attr=[pb.AttributeProto.FromString(raw)])
        ours = Printer(indent=True).node(decode_node(b"\x52" + bytes([len(raw)]) + raw))
        assert ours == MessageToJson(node), expected


def test_float_values_print_shortest() -> None:
    attr = pb.AttributeProto(name="f", float_val=0.1)
    node = pb.Node(attr=[attr])
    text = Printer(indent=True).node(decode_node(node.SerializeToString()))
    assert text == MessageToJson(node) and '"floatVal": 0.1' in text  # not 0.10000000149011612


# -- bad input: one line naming the record, no output ------------------------------------------------
def _bad(tmp_path: Path, name: str, data: bytes, *expected: str) -> None:
    src = tmp_path / name
    src.write_bytes(data)
    out = tmp_path / "out" / "x.json"
    out.parent.mkdir(exist_ok=True)
    done = run_cli("jsonize", src, out)
    assert_one_error(done, str(src), *expected)
    assert listing(out.parent) == []


def test_truncated_trace(real_et: Path, tmp_path: Path) -> None:
    data = real_et.read_bytes()
    _bad(tmp_path, "cut.et", data[: len(data) // 2], "truncated", "record ")


def test_random_bytes(tmp_path: Path) -> None:
    rng = random.Random(19)
    _bad(tmp_path, "random.et", bytes(rng.randrange(256) for _ in range(5000)), "not a Chakra .et file")


def test_oversized_length_prefix(real_et: Path, tmp_path: Path) -> None:
    data = real_et.read_bytes()
    meta_end = 1 + data[0] if data[0] < 0x80 else 2 + (data[0] & 0x7F | data[1] << 7)
    _bad(tmp_path, "huge.et", data[:meta_end] + b"\xff\xff\xff\xff\x0f" + b"\x00" * 10, "record 1", "4,294,967,295")


def test_a_node_that_does_not_decode(real_et: Path, tmp_path: Path) -> None:
    meta = delimited_message(pb.GlobalMetadata(version="1").SerializeToString())
    good = delimited_message(pb.Node(id=1, name="a").SerializeToString())
    bad = delimited_message(b"\x12\x05ab")  # a name that runs past the end of its record
    _bad(tmp_path, "badnode.et", meta + good + bad, "record 2 at byte", "is not a Node")


@pytest.mark.slow
def test_missing_input_and_usage(tmp_path: Path) -> None:
    assert_one_error(run_cli("jsonize", tmp_path / "none.et", tmp_path / "o.json"), "no such file")
    done = run_cli("jsonize", tmp_path / "none.et")
    assert done.returncode == 2 and "give the input" in done.stderr


# -- a large file in worker processes: the same bytes ------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("layout", ["document", "lines", "chakra"])
def test_parts_in_workers_print_the_same_bytes(
    real_et: Path, tmp_path: Path, layout: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chakra_convert_fast.converter.tools import jsonize as module

    api.jsonize(real_et, tmp_path / "one.json", layout, jobs=1)
    monkeypatch.setattr(module, "MIN_PART_BYTES", real_et.stat().st_size // 8)
    parts = module.split_records(str(real_et), 3)
    assert len(parts) == 3 and parts[0].first == 1 and parts[-1].end == real_et.stat().st_size
    assert all(a.end == b.start for a, b in itertools.pairwise(parts))
    api.jsonize(real_et, tmp_path / "three.json", layout, jobs=3)
    assert (tmp_path / "three.json").read_bytes() == (tmp_path / "one.json").read_bytes()


def test_a_bad_record_in_a_later_part_is_named(real_et: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from chakra_convert_fast.converter.tools import jsonize as module

    data = bytearray(real_et.read_bytes())
    size = len(data)
    monkeypatch.setattr(module, "MIN_PART_BYTES", size // 4)
    parts = module.split_records(str(real_et), 2)
    assert len(parts) == 2
    bad_at = parts[1].start + 1 + (data[parts[1].start + 1] >= 0x80)  # just after the record's length
    data[bad_at] = 0x12  # a name field ...
    data[bad_at + 1] = 0x7F  # ... longer than what is left of the record
    (tmp_path / "bad.et").write_bytes(bytes(data))
    with pytest.raises(ConverterError, match=f"record {parts[1].first} at byte {parts[1].start}"):
        api.jsonize(tmp_path / "bad.et", tmp_path / "out.json", jobs=2)
    assert not (tmp_path / "out.json").exists()


@pytest.mark.slow
def test_output_locations(real_et: Path, tmp_path: Path) -> None:
    """A full disk, the input as output, a directory: one line each, nothing changed."""
    before = real_et.read_bytes()
    assert_one_error(run_cli("jsonize", real_et, "/dev/full", "-j", "1"), "/dev/full")
    assert_one_error(run_cli("jsonize", real_et, real_et), str(real_et))
    assert real_et.read_bytes() == before
    assert_one_error(run_cli("jsonize", real_et, tmp_path), "is a directory")
    done = run_cli("jsonize", real_et, "/dev/null", "--lines")
    assert done.returncode == 0, done.stderr


def test_a_gzipped_trace_reads_as_the_plain_one(real_et: Path, tmp_path: Path) -> None:
    """chakra_jsonizer opens gzipped traces too (protolib's openFileRd)."""
    packed = tmp_path / "t.et.gz"
    packed.write_bytes(gzip.compress(real_et.read_bytes()))
    api.jsonize(real_et, tmp_path / "plain.json", "chakra")
    api.jsonize(packed, tmp_path / "packed.json", "chakra")
    assert (tmp_path / "packed.json").read_bytes() == (tmp_path / "plain.json").read_bytes()


@pytest.mark.slow
def test_the_log_file_cannot_be_the_output(tmp_path: Path) -> None:
    api.generate(tmp_path, api.GenerateOptions(num_npus=1))
    src = tmp_path / "ALL_REDUCE.0.et"
    forms: list[list[str | Path]] = [
        ["jsonize", src, tmp_path / "o.json"],
        ["jsonize", "--input_filename", src, "--output_filename", tmp_path / "o.json"],
    ]
    for form in forms:
        assert_one_error(run_cli("--log-filename", tmp_path / "o.json", *form), "the log file would overwrite")
        assert not (tmp_path / "o.json").exists()

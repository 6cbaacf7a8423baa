"""``generate``: the microbenchmark traces of ``chakra_generator`` (mlc-chakra 1.0.0), byte for byte.

For each of 14 microbenchmarks, one ``<name>.<npu>.et`` per NPU: a GlobalMetadata record
(version "1.0.0") and one or two nodes. Node ids count up across the whole run, in the
reference's order (benchmark by benchmark, NPU by NPU), as its global counter does, so the files
are the reference's own bytes; they are written in ``output_dir`` (the reference writes in the
current directory). Encoded with ``et.encode``/``et.wire``; the tests compare every file with
``chakra_generator``'s.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any

from .._types import Progress
from ..errors import OptionError
from ..et import encode, wire
from ..io.output import OutputTarget, check_output, output_directory
from ..io.outputset import OutputSet
from ..schema.chakra import GLOBAL_METADATA_FIELDS, CollectiveCommType, NodeType

#: The microbenchmarks, in the order the reference writes them.
BENCHMARKS = (
    "one_metadata_node_all_types",
    "one_remote_mem_load_node",
    "one_remote_mem_store_node",
    "one_comp_node",
    "two_comp_nodes_independent",
    "two_comp_nodes_dependent",
    "ALL_REDUCE",
    "ALL_TO_ALL",
    "ALL_GATHER",
    "REDUCE_SCATTER",
    "BROADCAST",
    "BARRIER",
    "one_comm_send_node",
    "one_comm_recv_node",
)
#: The most NPUs ``generate`` writes traces for (14 files each: 917,504 files at most).
MAX_NPUS = 1 << 16
UINT64_MAX = (1 << 64) - 1
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
_METADATA = wire.delimited_message(wire.length_delimited(wire.key(GLOBAL_METADATA_FIELDS["version"]), b"1.0.0"))


@dataclass(frozen=True, slots=True)
class GenerateOptions:
    """``chakra_generator``'s options, with its defaults."""

    num_npus: int = 64
    default_runtime: int = 5
    default_tensor_size: int = 1024
    default_comm_size: int = 65536


@dataclass(frozen=True, slots=True)
class GenerateResult:
    output_dir: str
    files: list[str] = field(default_factory=list)


@dataclass(slots=True)
class _Node:
    name: str
    type: int
    attrs: list[bytes]
    duration: int = 0
    data_deps: Sequence[int] = ()


def _attr(name: str, kind: str | None = None, value: Any = None, doc: str = "") -> bytes:
    return wire.attribute_message(name, kind, value, doc)


def _all_types() -> list[bytes]:
    """The attributes of ``one_metadata_node_all_types``: every value kind, scalar and list."""
    big, small = 9876543210, 1234567890
    return [
        _attr("double", "double_val", 1.2345, "double"),
        _attr("double_list", "double_list", [1.2345, 2.3456]),
        _attr("float", "float_val", 1.2345, "float"),
        _attr("float_list", "float_list", [1.2345, 2.3456]),
        _attr("int32", "int32_val", 12345, "int32"),
        _attr("int32_list", "int32_list", [12345, 23456]),
        _attr("int64", "int64_val", big, "int64"),
        _attr("int64_list", "int64_list", [big, small]),
        _attr("uint32", "uint32_val", 12345, "uint32"),
        _attr("uint32_list", "uint32_list", [12345, 23456]),
        _attr("uint64", "uint64_val", big, "uint64"),
        _attr("uint64_list", "uint64_list", [big, small]),
        _attr("sint32", "sint32_val", -12345, "sint32"),
        _attr("sint32_list", "sint32_list", [12345, -23456]),
        _attr("sint64", "sint64_val", -big, "sint64"),
        _attr("sint64_list", "sint64_list", [big, -small]),
        _attr("fixed32", "fixed32_val", 12345),
        _attr("fixed32_list", "fixed32_list", [12345, 23456]),
        _attr("fixed64", "fixed64_val", big),
        _attr("fixed64_list", "fixed64_list", [big, small]),
        _attr("sfixed32", "sfixed32_val", -12345),
        _attr("sfixed32_list", "sfixed32_list", [12345, -23456]),
        _attr("sfixed64", "sfixed64_val", -big),
        _attr("sfixed64_list", "sfixed64_list", [big, -small]),
        _attr("bool", "bool_val", True, "bool"),
        _attr("bool_list", "bool_list", [i % 2 == 0 for i in range(10)]),
        _attr("string", "string_val", "12345", "string"),
        _attr("string_list", "string_list", [str(12345 + i) for i in range(10)]),
        _attr("bytes", "bytes_val", b"12345"),
        _attr("bytes_list", "bytes_list", [str(12345 + i).encode() for i in range(10)]),
    ]


_GPU = _attr("is_cpu_op", "bool_val", False)


def _nodes(benchmark: str, options: GenerateOptions) -> list[_Node]:
    """The nodes of one file of ``benchmark`` (ids and dependencies are filled in by the caller)."""
    tensor = [_GPU, _attr("tensor_size", "uint64_val", options.default_tensor_size)]
    comp = _Node("COMP_NODE", NodeType.COMP_NODE, [_GPU], options.default_runtime)
    if benchmark == "one_metadata_node_all_types":
        return [_Node("METADATA_NODE", NodeType.METADATA_NODE, _all_types())]
    if benchmark == "one_remote_mem_load_node":
        return [_Node("MEM_LOAD_NODE", NodeType.MEM_LOAD_NODE, tensor)]
    if benchmark == "one_remote_mem_store_node":
        return [_Node("MEM_STORE_NODE", NodeType.MEM_STORE_NODE, tensor)]
    if benchmark == "one_comp_node":
        return [comp]
    if benchmark in ("two_comp_nodes_independent", "two_comp_nodes_dependent"):
        return [comp, _Node(comp.name, comp.type, comp.attrs, comp.duration)]
    if benchmark == "one_comm_send_node":
        return [_Node("COMM_SEND_NODE", NodeType.COMM_SEND_NODE, tensor)]
    if benchmark == "one_comm_recv_node":
        return [_Node("COMM_RECV_NODE", NodeType.COMM_RECV_NODE, tensor)]
    comm_size = 0 if benchmark == "BARRIER" else options.default_comm_size
    attrs = [
        _GPU,
        _attr("comm_type", "int64_val", CollectiveCommType[benchmark].value),
        _attr("comm_size", "int64_val", comm_size),
    ]
    return [_Node(benchmark, NodeType.COMM_COLL_NODE, attrs)]


def traces(options: GenerateOptions) -> Iterator[tuple[str, bytes]]:
    """(file name, bytes) of every trace, in the reference's order."""
    next_id = 0
    for benchmark in BENCHMARKS:
        for npu in range(options.num_npus):
            records = [_METADATA]
            nodes = _nodes(benchmark, options)
            for position, node in enumerate(nodes):
                deps = [next_id - 1] if benchmark == "two_comp_nodes_dependent" and position == 1 else []
                message = (
                    encode.head(next_id, encode.name_field(node.name, "name"), node.type, [], deps)
                    + encode.duration(node.duration)
                    + b"".join(wire.attribute(a, b"") for a in node.attrs)
                )
                records.append(wire.delimited_message(message))
                next_id += 1
            yield f"{benchmark}.{npu}.et", b"".join(records)


def generate(
    output_dir: str, options: GenerateOptions | None = None, progress: Progress | None = None
) -> GenerateResult:
    """Write every microbenchmark trace of ``chakra_generator`` in ``output_dir`` (created if
    missing, and removed again if the command fails), all or nothing (``io.OutputSet``: a failure,
    a full disk or a signal leaves every old file as it was and no new one)."""
    options = options or GenerateOptions()
    check_options(options)
    created = output_directory(output_dir)
    try:
        return _write_all(output_dir, options, progress)
    except BaseException:
        if created:
            with suppress(OSError):  # only if empty: nothing of the user's is ever removed
                os.rmdir(output_dir)
        raise


def check_options(options: GenerateOptions) -> None:
    """Refuse options no trace can hold (``OptionError`` naming the option), and more NPUs
    than ``MAX_NPUS``."""
    if not 1 <= options.num_npus <= MAX_NPUS:
        raise OptionError(
            f"`num_npus` {options.num_npus}: must be from 1 to {MAX_NPUS:,} ({len(BENCHMARKS)} files per NPU)"
        )
    for name, value in (
        ("default_runtime", options.default_runtime),
        ("default_tensor_size", options.default_tensor_size),
    ):
        if not 0 <= value <= UINT64_MAX:  # uint64 fields: the reference fails on a negative value too
            raise OptionError(f"`{name}` must be from 0 to {UINT64_MAX:,}, got {value}")
    if not INT64_MIN <= options.default_comm_size <= INT64_MAX:
        raise OptionError(f"`default_comm_size` is out of the int64 range: {options.default_comm_size}")


def _write_all(output_dir: str, options: GenerateOptions, progress: Progress | None) -> GenerateResult:
    names = [f"{benchmark}.{npu}.et" for benchmark in BENCHMARKS for npu in range(options.num_npus)]
    targets = _targets(output_dir, names)  # every output checked before any work
    result = GenerateResult(output_dir)
    with OutputSet(shown=os.path.join(output_dir, "*.et")) as files:
        for target, (_, data) in zip(targets, traces(options), strict=True):
            files.write(target, data)
            result.files.append(target.path)
            if progress is not None:
                progress("write", len(result.files), len(targets))
        files.commit()
    return result


def _targets(output_dir: str, names: Sequence[str]) -> list[OutputTarget]:
    """The output of each name: an existing file is checked on its own (a directory, a FIFO or a
    read-only file there is refused), a new one in the folder ``output_directory`` checked."""
    real_folder = os.path.realpath(output_dir)
    existing = set(os.listdir(output_dir))
    return [
        check_output(os.path.join(output_dir, name))
        if name in existing
        else OutputTarget(os.path.join(output_dir, name), os.path.join(real_folder, name), False)
        for name in names
    ]

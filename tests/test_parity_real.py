"""Differential tests on real traces: our .et bytes equal chakra_converter's, in any node order."""

from __future__ import annotations

from pathlib import Path

import pytest

from chakra_convert_fast.converter import convert
from chakra_convert_fast.converter.jsonstream import JsonObjectStream
from chakra_convert_fast.converter.schema.host import SUPPORTED_SCHEMAS

from .traces import REAL_TRACES_DIR, load_trace, oracle_bytes, reorder, write_trace

pytestmark = [pytest.mark.slow]

#: Every real trace (tests/data/traces, copied from ../shared/traces) whose schema the reference
#: supports (the old 1.0.1 ones and the Kineto device traces are not Chakra host traces it can read).
REAL_TRACES = [
    "host/chakra_1.0.2_host_2rank.json.gz",
    "host/resnet_1gpu_et.json.gz",
    "host/resnet_et.json.gz",
    "host/resnet_et_linked.json.gz",
    "cpu_gpt2_ddp2/rank0_host.json.gz",
    "cpu_gpt2_ddp2/rank1_host.json.gz",
    "cpu_gpt2_ddp2/rank0_merged_by_chakra_trace_link.json.gz",
    "resnet_ddp_synthetic_kineto/rank0_merged_by_chakra_trace_link.json.gz",
    *(f"gloo_ops_np4/rank{rank}_host.json.gz" for rank in range(4)),
    *(f"gloo_groups_np4/rank{rank}_host.json.gz" for rank in range(4)),
    "own_tracer_gpt2_ddp2/rank0_host.json.gz",
    # FSDP2 on gloo: chakra-profile with --profile-memory, and a user's own script (their PROVENANCE)
    *(f"cpu_gpt2_fsdp2_memory/gpt2_fsdp2_rank{rank}_host.json.gz" for rank in range(2)),
    *(f"own_fsdp2_np2/rank{rank}_host.json.gz" for rank in range(2)),
    *(f"own_fsdp2_np4/rank{rank}_host.json.gz" for rank in range(4)),
    # an NVIDIA H200, torch 2.11, NCCL (tests/data/traces/gpu_h200/PROVENANCE.md)
    *(f"gpu_h200/{n}/{n}_rank0_host.json.gz" for n in ("gpt2_base_bf16_b32", "gpt2_base_bf16_b8")),
    *(f"gpu_h200/{n}/{n}_rank0_host.json.gz" for n in ("bert_base_bf16_b32", "bert_base_bf16_b8")),
    # an NVIDIA H100, the same software (gpu_h100/PROVENANCE.md); a pipeline job with memory events,
    # the CPU overhead captures and a user's own DDP, TP, 2-D and HSDP scripts (their PROVENANCE.md)
    "gpu_h100/gpt2_base_bf16_b8/gpt2_base_bf16_b8_rank0_host.json.gz",
    *(f"cpu_gpt2_dp2pp2_memory/gpt2_dp2pp2_rank{rank}_host.json.gz" for rank in (0, 2)),
    *(f"cpu_overhead/{n}/{n}_rank0_host.json.gz" for n in ("gpt2_ddp", "bert_fsdp")),
    *(f"own_layouts/{job}/rank0_host.json.gz" for job in ("ddp_np2", "tp_np2", "tp_np4", "2d_np4", "hsdp_np4")),
]
#: the other ranks, batches and GPUs of captures listed above (the same tracer, model and settings;
#: on the GPUs, memory events on too): converted as they are; reordered only in the one listed
SAME_KIND = [
    *(
        f"gpu_h100/{n}/{n}_rank0_host.json.gz"
        for n in ("gpt2_base_bf16_b32", "bert_base_bf16_b32", "bert_base_bf16_b8")
    ),
    *(
        f"gpu_memory/{gpu}/mem_{m}_base_bf16_b8/mem_{m}_base_bf16_b8_rank0_host.json.gz"
        for gpu in ("h100", "h200")
        for m in ("gpt2", "bert")
    ),
    *(f"cpu_gpt2_dp2pp2_memory/gpt2_dp2pp2_rank{rank}_host.json.gz" for rank in (1, 3)),
    *(f"cpu_overhead/{n}/{n}_rank1_host.json.gz" for n in ("gpt2_ddp", "bert_fsdp")),
    *(f"own_layouts/{job}/rank1_host.json.gz" for job in ("ddp_np2", "tp_np2")),
    *(f"own_layouts/{job}/rank{rank}_host.json.gz" for job in ("tp_np4", "2d_np4", "hsdp_np4") for rank in (1, 2, 3)),
]


def _is_supported_host_trace(path: Path) -> bool:
    """Whether the file has ``nodes`` and a ``schema`` the reference supports (a Chakra host or
    merged trace it reads), from its top-level keys: read up to the big array only (``json.load``
    of every trace here took 20 s); a Kineto trace (``traceEvents``) is none."""
    schema: object = None
    nodes = False
    with JsonObjectStream(path, stream_keys={"nodes", "traceEvents"}) as stream:
        for key, value in stream.items():
            if key == "traceEvents":
                return False
            if key == "schema":
                schema = value
            elif key == "nodes":
                nodes = True
                if schema is not None:  # the observer writes it first; else read on past the nodes
                    break
    return nodes and schema in SUPPORTED_SCHEMAS


def test_the_list_covers_every_supported_real_trace() -> None:
    found = {
        str(path.relative_to(REAL_TRACES_DIR))
        for path in REAL_TRACES_DIR.rglob("*.json.gz")
        if _is_supported_host_trace(path)
    }
    assert found == set(REAL_TRACES) | set(SAME_KIND)


@pytest.mark.parametrize("name", REAL_TRACES + SAME_KIND)
def test_real_trace_as_is(name: str, tmp_path: Path) -> None:
    source = REAL_TRACES_DIR / name
    result = convert(source, tmp_path / "ours.et")
    assert (tmp_path / "ours.et").read_bytes() == oracle_bytes(source, tmp_path)
    assert result.nodes_written > 0


#: Each trace of REAL_TRACES reordered one way, reversed and shuffled in turn down the list, so that
#: both orders meet every kind (CPU and GPU, host and merged, DDP, FSDP, TP, PP, gloo groups). Both
#: orders of every trace, twice the reference's runs (~45 s more on 2 cores), are bench's:
#: ``pytest bench/test_long_sweeps.py``.
ORDERS = ("reversed", "shuffled")
REORDERED = [(name, ORDERS[index % 2]) for index, name in enumerate(REAL_TRACES)]


def assert_reordered_parity(name: str, order: str, tmp_path: Path) -> None:
    """Trace ``name`` with its nodes in ``order``: our bytes are the reference's for that file."""
    source = write_trace(reorder(load_trace(REAL_TRACES_DIR / name), order), tmp_path / f"{order}.json")
    convert(source, tmp_path / "ours.et")
    assert (tmp_path / "ours.et").read_bytes() == oracle_bytes(source, tmp_path)


@pytest.mark.parametrize(("name", "order"), REORDERED, ids=[f"{name}-{order}" for name, order in REORDERED])
def test_real_trace_reordered(name: str, order: str, tmp_path: Path) -> None:
    assert_reordered_parity(name, order, tmp_path)


def test_plain_and_gzipped_input_give_the_same_bytes(tmp_path: Path) -> None:
    source = REAL_TRACES_DIR / REAL_TRACES[0]
    plain = write_trace(load_trace(source), tmp_path / "plain.json")
    convert(source, tmp_path / "a.et")
    convert(plain, tmp_path / "b.et")
    assert (tmp_path / "a.et").read_bytes() == (tmp_path / "b.et").read_bytes()


@pytest.mark.parametrize("spread", [1_000_003, 1 << 40])
def test_real_trace_with_sparse_ids(spread: int, tmp_path: Path) -> None:
    """Ids far apart (the id index is then a dict, not an array over their span): same bytes."""
    trace = load_trace(REAL_TRACES_DIR / "cpu_gpt2_ddp2/rank0_host.json.gz")

    def renumber(node_id: int) -> int:
        return node_id * spread + 7

    for node in trace["nodes"]:
        node["id"] = renumber(node["id"])
        node["ctrl_deps"] = renumber(node["ctrl_deps"])
        if node.get("inter_thread_dep", -1) not in (-1, None):
            node["inter_thread_dep"] = renumber(node["inter_thread_dep"])
    source = write_trace(trace, tmp_path / "sparse.json")
    result = convert(source, tmp_path / "ours.et")
    assert (tmp_path / "ours.et").read_bytes() == oracle_bytes(source, tmp_path)
    assert result.nodes_written > 1000

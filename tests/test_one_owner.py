"""Rules written once: each has one home, and the modules that used to hold a copy name that one."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from chakra_convert_fast.converter import workers
from chakra_convert_fast.converter.convert import collectives, groups, parallel
from chakra_convert_fast.converter.job import discover as job_discover
from chakra_convert_fast.converter.job import files, layout, metadata
from chakra_convert_fast.converter.link import steps
from chakra_convert_fast.converter.ranks import commgroups, discover, jobsize, layoutscale
from chakra_convert_fast.converter.schema import comm_kernels, distributed
from chakra_convert_fast.converter.schema import kineto as schema_kineto

ROOT = Path(__file__).resolve().parent.parent / "converter"


@pytest.mark.parametrize(
    ("name", "number"),
    [
        ("ProfilerStep#0", 0),
        ("ProfilerStep#12", 12),
        ("ProfilerStep#", None),
        ("ProfilerStep#-1", None),
        ("ProfilerStep#1.5", None),
        ("ProfilerStep#²", None),  # a digit, not a decimal one: int() refuses it (the linker's copy failed)
        ("ProfilerStep#12 ", None),
        ("profilerstep#3", None),
        ("aten::mm", None),
    ],
)
def test_step_number(name: str, number: int | None) -> None:
    assert schema_kineto.step_number(name) == number


@pytest.mark.parametrize(
    ("name", "nccl"),
    [
        ("ncclKernel_AllReduce_RING_LL_Sum_float", True),
        ("ncclDevKernel_AllGather_RING_LL", True),
        ("rcclKernel_AllReduce", True),
        ("void ncclKernel_SendRecv(...)", True),
        ("ampere_sgemm_128x64_tn", False),
        ("deep_ep::internode::dispatch", False),
    ],
)
def test_is_nccl_kernel(name: str, nccl: bool) -> None:
    assert comm_kernels.is_nccl_kernel(name) is nccl


def test_default_jobs_is_the_cpus_this_process_may_use() -> None:
    assert workers.default_jobs() >= 1


@pytest.mark.parametrize(
    "name", ["step_number", "is_nccl_kernel", "default_jobs", "job_rank_files", "job_metadata", "parse_marker"]
)
def test_each_rule_is_defined_once(name: str) -> None:
    homes = [
        str(path.relative_to(ROOT))
        for path in ROOT.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.FunctionDef) and node.name == name
    ]
    assert len(homes) == 1, homes


#: Copies still there: (literal, module) -> why.
KNOWN_COPIES = {
    ("ProfilerStep#", "memory/host.py"): "the host-trace memory reader's own prefix test, to fold in",
    ("ProfilerStep#", "memory/astra.py"): "the same test in ASTRA-sim's memory fields, to fold in",
}


@pytest.mark.parametrize("literal", ["ProfilerStep#", "[pytorch|profiler|execution_", "## chakra:group "])
def test_each_name_a_trace_uses_is_written_once(literal: str) -> None:
    """A trace's name as code matches it (a message's f-string may say it, as text)."""
    homes: list[str] = []
    for path in ROOT.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        in_messages = {id(part) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for part in node.values}
        found = [
            n for n in ast.walk(tree) if isinstance(n, ast.Constant) and n.value == literal and id(n) not in in_messages
        ]
        homes.extend(
            str(path.relative_to(ROOT)) for _ in found if (literal, str(path.relative_to(ROOT))) not in KNOWN_COPIES
        )
    assert len(homes) == 1, homes


def test_the_old_homes_name_the_one_rule() -> None:
    assert steps.STEP_PREFIX is schema_kineto.STEP_PREFIX
    assert discover.job_rank_files is files.job_rank_files and discover.first_gap is files.first_gap
    assert jobsize.job_metadata is metadata.job_metadata and jobsize.et_job is metadata.et_job
    assert commgroups.group_ranks is metadata.group_ranks
    assert collectives.HOST_COLLECTIVES is distributed.HOST_COLLECTIVES
    assert groups.parse_marker is distributed.parse_marker and groups.marker_name is distributed.marker_name
    assert not hasattr(parallel, "default_jobs")
    assert layoutscale.find is layout.find and layoutscale.read_layout is layout.read_layout
    assert discover.discover is job_discover.discover and discover.distributed_info is job_discover.distributed_info

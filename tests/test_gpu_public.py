"""Real GPU (NCCL) host + device pairs from public repositories (issue 18).

Their Kineto traces (PyTorch 2.0/2.1) have no ``Record function id``: the pairs are linked by
each thread's op order and names (``converter/link/byorder.py``). The oracles here are computed
from the raw traces independently of the linker: a kernel's launcher is the innermost Kineto CPU op
around its runtime call, found by a plain scan.
"""

from __future__ import annotations

import gzip
import json
import shutil
import tarfile
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from bench import astrasim
from chakra_convert_fast.converter import ConvertOptions, api
from chakra_convert_fast.converter.convert import nodes
from chakra_convert_fast.converter.convert.collectives import host_collective
from chakra_convert_fast.converter.errors import TraceContentError
from chakra_convert_fast.converter.et.decode import read_et
from chakra_convert_fast.converter.ranks.discover import discover
from chakra_convert_fast.converter.schema.chakra import CollectiveCommType, NodeType

from .linkcases import edge_case_pair
from .test_astra_sim import assert_simulates
from .traces import REAL_TRACES_DIR

GPU = REAL_TRACES_DIR / "gpu_public"
HTA_HOST, HTA_DEVICE = GPU / "hta_simple_add_et.json.gz", GPU / "hta_simple_add_kineto.json.gz"
DLRM_COLLECTIVES = Counter({"ALL_TO_ALL": 5, "ALL_REDUCE": 3})
DLRM_BYTES = {"ALL_TO_ALL": 64_448, "ALL_REDUCE": 2_485_252}  # rank 0, from the host ops' tensors


def _load(path: Path) -> Any:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as fh:
        return json.load(fh)


@pytest.fixture(scope="module")
def dlrm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The 8 DLRM ranks laid out as convert-all finds them: ``dlrm_eg_{R}.json`` beside
    ``worker{R}_step_12.*.pt.trace.json`` in one directory."""
    root = tmp_path_factory.mktemp("dlrm")
    for tar in (REAL_TRACES_DIR / "old_schema" / "dlrm_pytorch_et.tar.gz", GPU / "dlrm_kineto.tar.gz"):
        with tarfile.open(tar) as archive:
            archive.extractall(root / "x", filter="data")
    pairs = root / "pairs"
    pairs.mkdir()
    for path in (root / "x").rglob("*.json"):
        shutil.copy(path, pairs / path.name)
    return pairs


def _device(dlrm: Path, rank: int) -> Path:
    return next(dlrm.glob(f"worker{rank}_step_12.*.pt.trace.json"))


def _innermost_launchers(kineto: Any) -> dict[Any, str]:
    """Kernel correlation -> name of the innermost CPU op around its runtime call (a plain scan);
    kernels whose runtime call is not in the trace (cut by the profiling window) are left out."""
    events = kineto["traceEvents"]
    cpu = [e for e in events if e.get("cat") in ("cpu_op", "user_annotation") and "ProfilerStep" not in e["name"]]
    runtime = {e["args"]["correlation"]: e for e in events if e.get("cat") == "cuda_runtime"}
    found = {}
    for kernel in (e for e in events if e.get("cat") in ("kernel", "gpu_memcpy")):
        call = runtime.get(kernel["args"]["correlation"])
        if call is None:
            continue
        around = [
            e
            for e in cpu
            if e["tid"] == call["tid"] and e["ts"] <= call["ts"] and call["ts"] + call["dur"] <= e["ts"] + e["dur"]
        ]
        found[kernel["args"]["correlation"]] = max(around, key=lambda e: (e["ts"], -e["dur"]))["name"]
    return found


def _check_merged(merged: Any, kineto: Any) -> Counter[str]:
    """Every kernel under the op that launched it, with the kernel's own times; every ctrl_deps a
    node; host ops carry their Kineto op's times. Returns the launchers' names of NCCL kernels."""
    by_id = {n["id"]: n for n in merged["nodes"]}
    for node in merged["nodes"]:
        parent = node.get("ctrl_deps")
        assert parent == node["id"] or parent in by_id, node["name"]
    launchers = _innermost_launchers(kineto)
    kernels = {
        (e["name"], e["ts"]): e
        for e in kineto["traceEvents"]
        if e.get("cat") in ("kernel", "gpu_memcpy") and e["args"]["correlation"] in launchers
    }
    nccl: Counter[str] = Counter()
    gpu_nodes = [n for n in merged["nodes"] if n.get("cat")]
    assert len(gpu_nodes) == len(kernels)
    for node in gpu_nodes:
        kernel = kernels[(node["name"], node["ts"])]
        assert node["inclusive_dur"] == kernel["dur"]
        launcher = by_id[node["ctrl_deps"]]
        assert launcher["name"] == launchers[kernel["args"]["correlation"]]
        if "nccl" in node["name"]:
            nccl[launcher["name"]] += 1
    cpu = {(e["name"], e["ts"]) for e in kineto["traceEvents"] if e.get("cat") in ("cpu_op", "user_annotation")}
    timed = [n for n in merged["nodes"] if "ts" in n and not n.get("cat")]
    assert timed and all((n["name"], n["ts"]) in cpu for n in timed)
    return nccl


def test_hta_pair_links_by_op_order(tmp_path: Path) -> None:
    out = tmp_path / "merged.json"
    result = api.link(HTA_HOST, HTA_DEVICE, out)
    assert result.stats.by_order
    assert (result.stats.host_ops, result.stats.linked, result.stats.gpu_ops, result.stats.gpu_linked) == (36, 36, 4, 4)
    assert any("no 'Record function id'" in w for w in result.warnings)
    assert _check_merged(_load(out), _load(HTA_DEVICE)) == Counter()


@pytest.mark.parametrize(("rank", "kernels"), list(enumerate([261, 262, 262, 267, 267, 261, 262, 262])))
def test_dlrm_rank_links_every_kernel_to_its_launcher(rank: int, kernels: int, dlrm: Path, tmp_path: Path) -> None:
    """Ranks 1 and 3 hold 64 kernels launched before the profiling window (no runtime call): they
    are counted as without a launcher, and left out of the oracle too."""
    out = tmp_path / "merged.json"
    result = api.link(dlrm / f"dlrm_eg_{rank}.json", _device(dlrm, rank), out, rank=rank)
    assert (result.stats.host_ops, result.stats.linked) == (1672, 1672)
    assert result.stats.gpu_linked == kernels
    assert result.stats.gpu_without_launcher == (64 if rank in (1, 3) else 0)
    nccl = _check_merged(_load(out), _device_json(dlrm, rank))
    assert nccl == Counter({"nccl:all_to_all": 5, "nccl:all_reduce": 3})


def _device_json(dlrm: Path, rank: int) -> Any:
    return _load(_device(dlrm, rank))


def test_a_kineto_trace_of_another_rank_or_program_is_refused(dlrm: Path) -> None:
    """Linking by order matches names, so the process id is what tells another rank apart."""
    for host in (HTA_HOST, dlrm / "dlrm_eg_1.json"):
        with pytest.raises(TraceContentError, match="another rank or run"):
            api.link(host, _device(dlrm, 0), None)


def _collectives(path: Path) -> tuple[Counter[str], dict[str, int]]:
    report = api.check([path])
    assert report.ok, [p.line() for p in report.problems]
    kinds: Counter[str] = Counter(c.kind for c in report.files[0].collectives)
    sizes: dict[str, int] = {}
    for c in report.files[0].collectives:
        sizes[c.kind] = sizes.get(c.kind, 0) + c.size
    return kinds, sizes


def test_dlrm_pair_converts_its_nccl_kernels(dlrm: Path, tmp_path: Path) -> None:
    out = tmp_path / "trace.0.et"
    api.convert_pair(dlrm / "dlrm_eg_0.json", _device(dlrm, 0), out, ConvertOptions(astra_sim=True))
    assert _collectives(out) == (DLRM_COLLECTIVES, DLRM_BYTES)


def test_dlrm_host_only_gets_one_comm_node_per_collective(dlrm: Path, tmp_path: Path) -> None:
    out = tmp_path / "host.0.et"
    result = api.convert(dlrm / "dlrm_eg_0.json", out, ConvertOptions(astra_sim=True))
    assert result.astra_changes is not None and result.astra_changes.host_collectives == 8
    assert _collectives(out) == (DLRM_COLLECTIVES, DLRM_BYTES)
    names = {read_et(out).names[row] for row in read_et(out).comm}
    assert names == {"c10d::alltoall_base_", "c10d::allreduce_"}
    default = tmp_path / "default.0.et"
    assert api.convert(dlrm / "dlrm_eg_0.json", default).comm_nodes == 0
    report = api.check([default])
    assert [p.message for p in report.problems if "no communication node" in p.message]
    assert report.ok  # a warning: ASTRA-sim runs it


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)", "ALL_REDUCE"),
        ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", "ALL_REDUCE"),
        ("ncclKernel_AllGather_RING_LL_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)", "ALL_GATHER"),
        ("ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", "ALL_GATHER"),
        ("ncclKernel_ReduceScatter_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)", "REDUCE_SCATTER"),
        ("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", "REDUCE_SCATTER"),
        ("ncclKernel_Broadcast_RING_LL_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)", "BROADCAST"),
        ("ncclDevKernel_Broadcast_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", "BROADCAST"),
        ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)", "ALL_TO_ALL"),
        ("ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)", "ALL_TO_ALL"),
    ],
)
def test_every_nccl_kernel_naming(name: str, expected: str) -> None:
    assert nodes.collective_comm_type(name) == CollectiveCommType[expected]
    kind = nodes.op_kind(name, "kernel")
    send_recv = "SendRecv" in name
    assert nodes.chakra_type(name, "kernel", kind) == (None if send_recv else NodeType.COMM_COLL_NODE)
    if send_recv:  # typed by the op that launched it
        assert nodes.send_recv_type("nccl:all_to_all", "nccl:all_to_all") == NodeType.COMM_COLL_NODE
        assert nodes.send_recv_type("nccl:send", "record_param_comms") == NodeType.COMM_SEND_NODE
        assert nodes.send_recv_type("nccl:recv", "record_param_comms") == NodeType.COMM_RECV_NODE


def test_an_unknown_nccl_kernel_warns_and_stays_a_compute_node(dlrm: Path, tmp_path: Path) -> None:
    merged = tmp_path / "merged.json"
    api.link(dlrm / "dlrm_eg_0.json", _device(dlrm, 0), merged)
    document = _load(merged)
    renamed = 0
    for node in document["nodes"]:
        if node.get("cat") and node["name"].startswith("ncclKernel_AllReduce"):
            node["name"] = "ncclDevKernel_Generic_4(ncclDevComm*, unsigned long, ncclWork*)"
            renamed += 1
    assert renamed == 3
    merged.write_text(json.dumps(document))
    out = tmp_path / "out.et"
    result = api.convert(merged, out)
    assert result.warnings == [
        "NCCL kernel 'ncclDevKernel_Generic_4(ncclDevComm*, unsigned long, ncclWork*)' "
        "(3 nodes) names no known collective (allreduce, alltoall, allgather, "
        "reducescatter, broadcast, sendrecv): kept as a compute node"
    ]
    assert result.comm_nodes == 5  # the all-to-alls


def test_convert_all_finds_the_dlrm_layout(dlrm: Path) -> None:
    found = discover(str(dlrm))
    assert found.ranks() == list(range(8))
    assert all(len(found.hosts[r]) == 1 and len(found.devices[r]) == 1 for r in range(8))
    assert all(Path(found.hosts[r][0]).name == f"dlrm_eg_{r}.json" for r in range(8))


def test_dlrm_8_ranks_simulate(dlrm: Path, simulator: Path, tmp_path: Path) -> None:
    out = tmp_path / "et"
    result = api.convert_all(dlrm, out, ConvertOptions(astra_sim=True), jobs=2)
    assert result.failed == 0
    assert result.prefix == "dlrm_eg"  # the capture's name (dlrm_eg_<R>.json)
    files = [out / f"dlrm_eg.{r}.et" for r in range(8)]
    report = api.check(files, out / "dlrm_eg.comm_group.json")
    assert report.ok and not report.problems, [p.line() for p in report.problems]
    assert all(Counter(c.kind for c in f.collectives) == DLRM_COLLECTIVES for f in report.files)
    assert_simulates(out / "dlrm_eg", 8, out / "dlrm_eg.comm_group.json", tmp_path / "sim")


def test_dlrm_8_host_only_ranks_simulate(dlrm: Path, simulator: Path, tmp_path: Path) -> None:
    for rank in range(8):
        api.convert(dlrm / f"dlrm_eg_{rank}.json", tmp_path / f"host.{rank}.et", ConvertOptions(astra_sim=True))
    report = api.check([tmp_path / f"host.{r}.et" for r in range(8)])
    assert report.ok and not report.problems, [p.line() for p in report.problems]
    run = astrasim.simulate(tmp_path / "host", 8, workdir=tmp_path / "sim")
    assert run.returncode == 0 and run.all_finished, run.output[-2000:]
    assert all(r.comm_done == {"collective": 8} and r.comm_cycles > 0 for r in run.ranks)


@pytest.mark.parametrize(
    ("trace", "expected"),
    [
        ("chakra_1.0.2_host_2rank.json.gz", Counter({"ALL_GATHER": 10})),
        ("resnet_1gpu_et.json.gz", Counter({"ALL_REDUCE": 15, "BROADCAST": 6})),
    ],
)
def test_nccl_host_traces_simulate_their_collectives(trace: str, expected: Counter[str], tmp_path: Path) -> None:
    """Host traces of NCCL jobs without their Kineto trace: one communication node per collective,
    the ``c10d::`` op (not its ``record_param_comms`` nor its ``nccl:*`` child)."""
    out = tmp_path / "trace.0.et"
    api.convert(REAL_TRACES_DIR / "host" / trace, out, ConvertOptions(astra_sim=True))
    report = api.check([out])
    assert report.ok, [p.line() for p in report.problems]
    assert Counter(c.kind for c in report.files[0].collectives) == expected
    et = read_et(out)
    assert {et.names[row] for row in et.comm} <= {"c10d::allgather_", "c10d::allreduce_", "c10d::broadcast_"}


@pytest.mark.parametrize(
    ("host", "device"),
    [
        ("cpu_gpt2_ddp2/rank0_host.json.gz", "cpu_gpt2_ddp2/rank0_device.json.gz"),
        ("cpu_gpt2_ddp2/rank1_host.json.gz", "cpu_gpt2_ddp2/rank1_device.json.gz"),
        ("host/resnet_et.json.gz", "resnet_ddp_synthetic_kineto/rank0_device_synthetic.json.gz"),
    ],
)
def test_linking_by_order_gives_the_record_function_id_document(host: str, device: str, tmp_path: Path) -> None:
    """The by-order rule against the reference's rule on pairs that have record-function ids: with
    the ids taken out of the Kineto trace, the same merged document, byte for byte (GPT-2: gloo's
    worker ops found on their own threads; ResNet: 2,388 kernels under the same launchers)."""
    kineto = _load(REAL_TRACES_DIR / device)
    for event in kineto["traceEvents"]:
        (event.get("args") or {}).pop("Record function id", None)
    stripped = tmp_path / "device.json"
    stripped.write_text(json.dumps(kineto))
    synthetic = "synthetic" in device  # generated to match a host trace of another process
    host_path = REAL_TRACES_DIR / host
    by_id = api.link(host_path, REAL_TRACES_DIR / device, tmp_path / "by_id.json", allow_mismatch=synthetic)
    by_order = api.link(host_path, stripped, tmp_path / "by_order.json", allow_mismatch=synthetic)
    assert by_order.stats.by_order and not by_id.stats.by_order
    assert by_order.stats.linked >= by_id.stats.linked - 1
    assert (tmp_path / "by_order.json").read_bytes() == (tmp_path / "by_id.json").read_bytes()


def _two_group_job(folder: Path, ranks: int = 4) -> None:
    """A host-only NCCL job of ``ranks`` ranks with a default group and two sub-groups (ranks
    0-1: "1", 2-3: "2"), made from the real 1.0.2 host trace by editing values only, in the layout
    PyTorch writes them: the groups in ``## process_group:init ##``'s input, and each
    collective's group as a ``pg_name`` attribute of its ``record_param_comms`` (PyTorch 2.4+).
    Its 10 all-gathers: the first 5 in the default group, the last 5 in the rank's sub-group."""
    base = _load(REAL_TRACES_DIR / "host" / "chakra_1.0.2_host_2rank.json.gz")
    folder.mkdir()
    for rank in range(ranks):
        doc = json.loads(json.dumps(base))
        doc["pid"] = 1000 + rank
        sub = "1" if rank < 2 else "2"
        collective = 0
        for node in doc["nodes"]:
            if "process_group:init" in node["name"]:
                groups = [
                    {"pg_name": "0", "ranks": [], "group_size": ranks, "group_count": 3},
                    {"pg_name": "1", "ranks": [0, 1], "group_size": 2, "group_count": 3},
                    {"pg_name": "2", "ranks": [2, 3], "group_size": 2, "group_count": 3},
                ]
                node["inputs"]["values"] = [json.dumps(groups)]
            if node["name"] == "record_param_comms" and "all_gather" in node["inputs"]["values"]:
                group = "0" if collective < 5 else sub
                node["attrs"].append({"name": "pg_name", "type": "string", "value": group})
                collective += 1
        assert collective == 10
        (folder / f"rank{rank}_host.json").write_text(json.dumps(doc))


def test_host_only_job_with_sub_groups(tmp_path: Path) -> None:
    _two_group_job(tmp_path / "job")
    out = tmp_path / "et"
    result = api.convert_all(tmp_path / "job", out, ConvertOptions(astra_sim=True), jobs=2)
    assert result.failed == 0
    assert json.loads((out / "trace.comm_group.json").read_text()) == {"1": [0, 1], "2": [2, 3]}
    report = api.check([out / f"trace.{r}.et" for r in range(4)], out / "trace.comm_group.json")
    assert report.ok and not report.problems, [p.line() for p in report.problems]
    for rank, file in enumerate(report.files):
        groups = [c.group for c in file.collectives]
        assert groups == ["0"] * 5 + ["1" if rank < 2 else "2"] * 5
    default = tmp_path / "default"
    api.convert_all(tmp_path / "job", default, jobs=2)  # without --astra-sim: the reference's bytes
    assert all(not f.collectives for f in api.check([default / f"trace.{r}.et" for r in range(4)]).files)


def test_host_only_job_with_sub_groups_simulates(simulator: Path, tmp_path: Path) -> None:
    _two_group_job(tmp_path / "job")
    out = tmp_path / "et"
    api.convert_all(tmp_path / "job", out, ConvertOptions(astra_sim=True), jobs=2)
    run = astrasim.simulate(out / "trace", 4, comm_groups=out / "trace.comm_group.json", workdir=tmp_path / "sim")
    assert run.returncode == 0 and run.all_finished, run.output[-2000:]
    assert all(r.comm_done == {"collective": 10} for r in run.ranks)


def test_no_record_function_id_and_no_name_in_common_says_so(tmp_path: Path) -> None:
    kineto = _load(HTA_DEVICE)
    for event in kineto["traceEvents"]:
        if event.get("cat") in ("cpu_op", "user_annotation"):
            event["name"] = "renamed::" + event["name"]
    device = tmp_path / "device.json"
    device.write_text(json.dumps(kineto))
    with pytest.raises(
        TraceContentError,
        match=r"has no 'Record function id' on its CPU ops .* none of the 36 host "
        r"ops matched its CPU ops by thread, order and name",
    ):
        api.link(HTA_HOST, device, None)


def _tensor(numel: int, element: int = 4) -> list[Any]:
    return [1, 2, 0, numel, element, "cuda:0"]


@pytest.mark.parametrize(
    ("name", "inputs", "kind", "size"),
    [
        (
            "c10d::allreduce_coalesced_",
            {
                "values": [[_tensor(10), _tensor(6)], "<Object>", "<Object>", -1],
                "shapes": [[[10], [6]], [], [], []],
                "types": ["GenericList[Tensor(float),Tensor(float)]", "Object", "Object", "Int"],
            },
            "ALL_REDUCE",
            64,
        ),
        (
            "c10d::allgather_into_tensor_coalesced_",
            {
                "values": [[_tensor(8, 2)], [_tensor(4, 2)], "<Object>"],
                "shapes": [[[8]], [[4]], []],
                "types": ["GenericList[Tensor(c10::BFloat16)]", "GenericList[Tensor(c10::BFloat16)]", "Object"],
            },
            "ALL_GATHER",
            8,
        ),
        (
            "c10d::reduce_scatter_tensor_coalesced_",
            {
                "values": [[_tensor(2)], [_tensor(8)], "<Object>", "<Object>", -1],
                "shapes": [[[2]], [[8]], [], [], []],
                "types": ["GenericList[Tensor(float)]", "GenericList[Tensor(float)]", "Object", "Object", "Int"],
            },
            "REDUCE_SCATTER",
            32,
        ),
    ],
)
def test_coalesced_collectives(name: str, inputs: dict[str, Any], kind: str, size: int) -> None:
    found = host_collective(name, inputs)
    assert found is not None and found.node_type == NodeType.COMM_COLL_NODE
    assert (found.comm_type, found.comm_size) == (CollectiveCommType[kind], size)


@pytest.mark.parametrize("shuffled", [False, True])
def test_linking_by_order_on_generated_edge_cases(shuffled: bool, tmp_path: Path) -> None:
    """The edge-case pairs of the linker tests (kernels, NCCL kernels, inter-thread groups, out-of
    order host nodes), their record-function ids taken out: the same document."""
    host, device = edge_case_pair(tmp_path, layers=20, seed=3, shuffled=shuffled, gz=False)
    kineto = _load(device)
    for event in kineto["traceEvents"]:
        (event.get("args") or {}).pop("Record function id", None)
    stripped = tmp_path / "stripped.json"
    stripped.write_text(json.dumps(kineto))
    assert not api.link(host, device, tmp_path / "by_id.json").stats.by_order
    assert api.link(host, stripped, tmp_path / "by_order.json").stats.by_order
    assert (tmp_path / "by_order.json").read_bytes() == (tmp_path / "by_id.json").read_bytes()

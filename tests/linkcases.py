"""Small synthetic host + Kineto pairs with the linker's edge cases, for the tests and the link benchmark.

Each "layer" is a parent op on one of two threads with two children; one child launches a kernel
(``cudaLaunchKernel`` + kernel on a stream), and every fifth layer an NCCL all-reduce. Gaps over
1 ms start new inter-thread groups, some parents share a start time with their first child
(the reference's tie rules), and host nodes can be written out of id order.
"""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path
from typing import Any

SCHEMA = "1.1.1-chakra.0.0.4"
PID = 4321


def _attrs(rf_id: int, tid: int) -> list[dict[str, Any]]:
    values: list[tuple[str, str, object]] = [("rf_id", "uint64", rf_id), ("fw_parent", "uint64", 0)]
    values += [("seq_id", "int64", -1)]
    values += [("scope", "uint64", 0), ("tid", "uint64", tid), ("fw_tid", "uint64", 0)]
    values += [("op_schema", "string", ""), ("kernel_backend", "string", ""), ("kernel_file", "string", "")]
    return [{"name": n, "type": t, "value": v} for n, t, v in values]


def _tensors(tensor_id: int) -> dict[str, Any]:
    return {
        "values": [[tensor_id, tensor_id, 0, 64, 4, "cuda:0"]],
        "shapes": [[8, 8]],
        "types": ["Tensor(float)"],
        "strides": [[8, 1]],
    }


class _Builder:
    def __init__(self, rank: int, seed: int) -> None:
        self.rng = random.Random(seed)
        self.rank = rank
        self.nodes: list[dict[str, Any]] = []
        self.events: list[dict[str, Any]] = []
        self.next_id = 4
        self.rf = 10
        self.corr = 1000
        self.clock = {1: 1_000_000.0, 2: 1_000_500.0}

    def host(self, name: str, parent: int, tid: int) -> tuple[int, int]:
        node_id, rf_id = self.next_id, self.rf
        self.next_id += 1
        self.rf += 1
        self.nodes.append(
            {
                "id": node_id,
                "name": name,
                "ctrl_deps": parent,
                "inputs": _tensors(node_id),
                "outputs": _tensors(node_id + 1),
                "attrs": _attrs(rf_id, tid),
            }
        )
        return node_id, rf_id

    def cpu(self, name: str, rf_id: int, tid: int, ts: float, dur: float) -> None:
        self.events.append(
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": name,
                "pid": PID,
                "tid": 100 + tid,
                "ts": ts,
                "dur": dur,
                "args": {"External id": rf_id, "Record function id": rf_id},
            }
        )

    def kernel(self, name: str, ext: int, tid: int, ts: float, pg: str | None) -> None:
        self.corr += 1
        self.events.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "pid": PID,
                "tid": 100 + tid,
                "ts": ts,
                "dur": 2.0,
                "args": {"External id": ext, "correlation": self.corr},
            }
        )
        args: dict[str, Any] = {"External id": ext, "correlation": self.corr, "stream": 7}
        if pg is not None:
            args["Process Group Name"] = pg
        self.events.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": name,
                "pid": 0,
                "tid": 7,
                "ts": ts + 5.0,
                "dur": 12.5,
                "args": args,
            }
        )

    def layer(self, number: int) -> None:
        tid = 1 if number % 3 else 2
        ts = self.clock[tid] + (1500.0 if number % 7 == 0 else self.rng.choice([1.0, 2.5, 40.0]))
        parent, parent_rf = self.host("aten::linear", 2 if tid == 1 else 3, tid)
        _, first_rf = self.host("aten::mm", parent, tid)
        second, second_rf = self.host("aten::add_", parent, tid)
        same_start = number % 4 == 0
        self.cpu("aten::linear", parent_rf, tid, ts, 30.0)
        self.cpu("aten::mm", first_rf, tid, ts if same_start else ts + 1.0, 10.0)
        self.kernel("volta_sgemm_128x64_nn", first_rf, tid, ts + 3.0, None)
        self.cpu("aten::add_", second_rf, tid, ts + 12.0, 8.25)
        if number % 5 == 0:
            _, comm_rf = self.host("nccl:all_reduce", second, tid)
            self.cpu("nccl:all_reduce", comm_rf, tid, ts + 13.0, 4.0)
            self.kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", comm_rf, tid, ts + 14.0, "0")
        self.clock[tid] = ts + 30.0


def edge_case_pair(
    directory: str | Path,
    *,
    layers: int = 50,
    rank: int = 0,
    world: int = 2,
    seed: int = 0,
    shuffled: bool = False,
    gz: bool = True,
) -> tuple[Path, Path]:
    """Write ``rank<R>_host.json[.gz]`` and ``rank<R>_device.json[.gz]`` into ``directory``."""
    b = _Builder(rank, seed + rank)
    for number in range(layers):
        b.layer(number)
    root = [
        {
            "id": 1,
            "name": "[pytorch|profiler|execution_trace|process]",
            "ctrl_deps": 1,
            "inputs": _tensors(0),
            "outputs": _tensors(0),
            "attrs": _attrs(0, 0),
        }
    ]
    root += [
        {
            "id": i,
            "name": "[pytorch|profiler|execution_trace|thread]",
            "ctrl_deps": 1,
            "inputs": _tensors(0),
            "outputs": _tensors(0),
            "attrs": _attrs(0, i - 1),
        }
        for i in (2, 3)
    ]
    nodes = root + b.nodes
    if shuffled:
        random.Random(seed).shuffle(nodes)
    host = {
        "schema": SCHEMA,
        "pid": PID,
        "time": "2026-01-01 00:00:00",
        "start_ts": 1,
        "nodes": nodes,
        "finish_ts": 2,
    }
    meta = [{"ph": "M", "name": "process_name", "ts": 999_000.0, "pid": PID, "tid": 0, "args": {"name": "python"}}]
    step = [
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "ProfilerStep#1",
            "pid": PID,
            "tid": 101,
            "ts": 999_500.0,
            "dur": 1e7,
            "args": {"External id": 1, "Record function id": 1},
        }
    ]
    device = {
        "schemaVersion": 1,
        "distributedInfo": {
            "backend": "nccl",
            "rank": rank,
            "world_size": world,
            "pg_config": [{"pg_name": "0", "ranks": list(range(world)), "pg_size": world}],
        },
        "traceEvents": meta + step + b.events,
        "traceName": "synthetic",
    }
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    suffix = ".json.gz" if gz else ".json"
    paths = (out / f"rank{rank}_host{suffix}", out / f"rank{rank}_device{suffix}")
    for path, doc in zip(paths, (host, device), strict=True):
        with gzip.open(path, "wt") if gz else open(path, "w") as f:
            json.dump(doc, f)
    return paths


def cyclic_pair(directory: str | Path) -> tuple[Path, Path]:
    """A pair whose merged trace has a dependency cycle closed by inter-thread edges.

    On thread 1, op P (id 15) has a child X (id 12), so X depends on P. The Kineto times put X
    first (ts 10), C on thread 2 next (ts 50) and P after a gap (ts 2000): P depends on C, and C,
    the first op of its thread, on X: X -> P -> C -> X.
    """
    host_nodes: list[dict[str, Any]] = [
        {"id": 1, "name": "[pytorch|profiler|execution_trace|process]", "ctrl_deps": 1},
        {"id": 2, "name": "[pytorch|profiler|execution_trace|thread]", "ctrl_deps": 1},
        {"id": 3, "name": "[pytorch|profiler|execution_trace|thread]", "ctrl_deps": 1},
        {"id": 12, "name": "aten::x", "ctrl_deps": 15},
        {"id": 13, "name": "aten::c", "ctrl_deps": 3},
        {"id": 15, "name": "aten::p", "ctrl_deps": 2},
    ]
    tids = {1: 0, 2: 1, 3: 2, 12: 1, 13: 2, 15: 1}
    for node in host_nodes:
        node_id = node["id"]
        node.update(inputs=_tensors(node_id), outputs=_tensors(node_id + 100), attrs=_attrs(node_id, tids[node_id]))
    host = {
        "schema": SCHEMA,
        "pid": PID,
        "time": "2026-01-01 00:00:00",
        "start_ts": 1,
        "nodes": host_nodes,
        "finish_ts": 2,
    }
    events = [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": name,
            "pid": PID,
            "tid": tid,
            "ts": ts,
            "dur": 10.0,
            "args": {"External id": rf_id, "Record function id": rf_id},
        }
        for name, rf_id, tid, ts in (("aten::x", 12, 101, 10.0), ("aten::c", 13, 102, 50.0), ("aten::p", 15, 101, 2e3))
    ]
    device = {
        "schemaVersion": 1,
        "distributedInfo": {"backend": "gloo", "rank": 0, "world_size": 1},
        "traceEvents": events,
    }
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    paths = (out / "rank0_host.json", out / "rank0_device.json")
    for path, doc in zip(paths, (host, device), strict=True):
        path.write_text(json.dumps(doc))
    return paths

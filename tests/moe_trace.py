"""A small, realistic Kineto trace of a mixture-of-experts training step, written here.

Provenance: synthetic, made by this module (no public trace with custom communication kernels on
side streams exists to commit). Its shape follows real PyTorch 2.x Kineto traces (the field names,
categories and ``args`` of ``tests/data/traces/kineto_public`` and ``gpu_h200``: ``cpu_op`` events
under ``ProfilerStep#N``, ``cuda_runtime`` ``cudaLaunchKernel`` calls whose ``correlation`` names
their ``kernel``, ``cudaStreamWaitEvent`` between streams, a ``cudaDeviceSynchronize`` ending the
step) and the kernels of an expert-parallel MoE layer as DeepEP (deepseek-ai/DeepEP) launches them:
``deep_ep::intranode::dispatch`` / ``combine`` on a communication stream, a shared expert's GEMMs on
a second compute stream overlapping the routed experts' GEMMs on the main stream, and an
all-to-all of a hand-written MoE library (``moe_dispatch_kernel``/``moe_combine_kernel``, names
that are communication only on a communication stream).

The GPU timeline is computed as a GPU runs it: a kernel starts when its launch has returned (plus
a launch latency), its stream's previous kernel has ended, and every kernel it waits for (the
``cudaStreamWaitEvent``) has ended. Durations are fixed per kernel kind, with a little seeded jitter.
"""

from __future__ import annotations

import gzip
import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MAIN, SIDE, COMM, NCCL = 7, 20, 24, 28  # streams: compute, shared expert, communication, NCCL
PID, TID = 4242, 4242
LAUNCH_US, LATENCY_US = 6.0, 4.0

GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel"
ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>>(int, ...)"
SOFTMAX = "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, c10::BFloat16, float, float>(...)"
TOPK = "void at::native::sbtopk::gatherTopK<c10::BFloat16, unsigned int, 2, false>(...)"
DISPATCH = "void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*, int*, long*, ...)"
COMBINE = "void deep_ep::intranode::combine<__nv_bfloat16, 8, 768, 4096>(__nv_bfloat16*, float*, ...)"
NOTIFY = "void deep_ep::intranode::notify_dispatch<8>(int const*, int*, int, int const*, ...)"
A2A_DISPATCH = "void moe::moe_dispatch_kernel<__nv_bfloat16, 128>(...)"
A2A_COMBINE = "void moe::moe_combine_kernel<__nv_bfloat16, 128>(...)"
ALL_REDUCE = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"


@dataclass
class _Trace:
    rng: random.Random
    events: list[dict[str, Any]] = field(default_factory=list)
    now: float = 0.0  # the CPU thread's clock
    stream_end: dict[int, float] = field(default_factory=dict)
    corr: int = 1000
    kernels: dict[str, float] = field(default_factory=dict)  # label -> end
    comm_kernels: int = 0

    def cpu(self, name: str, dur: float, **args: Any) -> None:
        self.events.append(
            {"ph": "X", "cat": "cpu_op", "name": name, "pid": PID, "tid": TID, "ts": self.now, "dur": dur, "args": args}
        )

    def runtime(self, name: str, dur: float, corr: int) -> None:
        self.events.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": name,
                "pid": PID,
                "tid": TID,
                "ts": self.now,
                "dur": dur,
                "args": {"correlation": corr, "cbid": 211},
            }
        )

    def op(
        self,
        op_name: str,
        kernel: str,
        stream: int,
        dur: float,
        label: str,
        waits: tuple[str, ...] = (),
        dims: list[list[int]] | None = None,
        kernel_args: dict[str, Any] | None = None,
    ) -> None:
        """A cpu_op that (after waiting on other streams' kernels) launches one kernel."""
        begin = self.now
        self.now += 3.0
        for _ in waits:  # cudaStreamWaitEvent: recorded on the CPU, no GPU op
            self.corr += 1
            self.runtime("cudaStreamWaitEvent", 2.0, self.corr)
            self.now += 3.0
        self.corr += 1
        self.runtime("cudaLaunchKernel", LAUNCH_US, self.corr)
        launched = self.now + LAUNCH_US
        self.now = launched + 2.0
        start = max(launched + LATENCY_US, self.stream_end.get(stream, 0.0), *(self.kernels[w] + 1.0 for w in waits))
        length = round(dur * self.rng.uniform(0.97, 1.03), 3)
        self.events.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": kernel,
                "pid": 0,
                "tid": stream,
                "ts": round(start, 3),
                "dur": length,
                "args": {"correlation": self.corr, "stream": stream, "device": 0, "context": 1, **(kernel_args or {})},
            }
        )
        self.stream_end[stream] = start + length
        self.kernels[label] = start + length
        args: dict[str, Any] = {"Record function id": self.corr}
        if dims is not None:
            args.update({"Input Dims": dims, "Input type": ["c10::BFloat16"] * len(dims)})
        self.events.append(
            {"ph": "X", "cat": "cpu_op", "name": op_name, "pid": PID, "tid": TID, "ts": begin,
             "dur": self.now - begin, "args": args}
        )  # fmt: skip

    def layer(self, n: int, deep_ep: bool, nccl: bool = False) -> None:
        """One MoE layer's forward: attention GEMM, router, dispatch (comm), routed experts on the
        main stream overlapped by the shared expert on the side stream, combine (comm), add; with
        ``nccl``, an NCCL all-reduce (of the attention's gradient, say) on a second communication
        stream, overlapping the combine."""
        p = f"{n}."
        tokens = [[4096, 2048]]
        self.op("aten::mm", GEMM, MAIN, 180.0, p + "attn", dims=tokens)
        self.op("aten::softmax", SOFTMAX, MAIN, 25.0, p + "router")
        self.op("aten::topk", TOPK, MAIN, 30.0, p + "topk")
        if deep_ep:
            self.op("deep_ep::notify_dispatch", NOTIFY, COMM, 15.0, p + "notify", waits=(p + "topk",))
            self.op("deep_ep::dispatch", DISPATCH, COMM, 140.0, p + "dispatch", dims=tokens)
        else:
            self.op("moe::dispatch", A2A_DISPATCH, COMM, 150.0, p + "dispatch", waits=(p + "topk",), dims=tokens)
        # the shared expert runs on the side stream while dispatch, the experts and combine run
        self.op("aten::mm", GEMM, SIDE, 260.0, p + "shared_up", waits=(p + "attn",))
        self.op("aten::mm", GEMM, SIDE, 240.0, p + "shared_down")
        for e in range(2):
            self.op("aten::mm", GEMM, MAIN, 120.0, p + f"expert{e}", waits=(p + "dispatch",) if e == 0 else ())
        kernel, name = (COMBINE, "deep_ep::combine") if deep_ep else (A2A_COMBINE, "moe::combine")
        self.op(name, kernel, COMM, 130.0, p + "combine", waits=(p + "expert1",), dims=tokens)
        if nccl:
            collective = {"Collective name": "allreduce", "In msg nelems": 4096 * 2048, "dtype": "BFloat16"}
            self.op("nccl:all_reduce", ALL_REDUCE, NCCL, 110.0, p + "allreduce", (p + "expert1",), None, collective)
            self.comm_kernels += 1
        self.op("aten::add", ADD, MAIN, 40.0, p + "add", waits=(p + "combine", p + "shared_down"))
        self.comm_kernels += 3 if deep_ep else 2

    def step(self, number: int, layers: int, nccl: bool = False) -> None:
        begin = self.now
        self.now += 5.0
        for n in range(layers):
            self.layer(n, deep_ep=n % 2 == 0, nccl=nccl)
        self.corr += 1
        sync_start = self.now
        done = max(self.stream_end.values())
        self.runtime("cudaDeviceSynchronize", done + 3.0 - sync_start, self.corr)
        self.now = done + 8.0
        self.events.append(
            {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{number}", "pid": PID, "tid": TID,
             "ts": begin, "dur": self.now - begin, "args": {}}
        )  # fmt: skip
        self.now += 20.0


def moe_trace(
    rank: int = 0, world: int = 2, steps: int = 2, layers: int = 4, seed: int = 0, nccl: bool = False
) -> dict[str, Any]:
    """The trace (a Kineto JSON object) of ``steps`` training steps of ``layers`` MoE layers
    (``nccl``: each with an NCCL all-reduce on a second communication stream)."""
    trace = _Trace(random.Random(seed * 1000 + rank))
    trace.now = 1_000_000.0
    for number in range(1, steps + 1):
        trace.step(number, layers, nccl)
    for event in trace.events:
        event["ts"] = round(event["ts"], 3)
        event["dur"] = round(event["dur"], 3)
    return {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3 (synthetic)"}],
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world},
        "traceEvents": sorted(trace.events, key=lambda e: (e["ts"], -e["dur"])),
    }


def comm_kernels_per_step(layers: int = 4) -> int:
    return sum(3 if n % 2 == 0 else 2 for n in range(layers))


def write_moe_job(folder: Path, world: int = 2, **kwargs: Any) -> list[Path]:
    """Rank traces ``folder/rank<R>.json.gz`` of a ``world``-rank job."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for rank in range(world):
        path = folder / f"rank{rank}.json.gz"
        with gzip.open(path, "wt") as out:
            json.dump(moe_trace(rank, world, **kwargs), out)
        paths.append(path)
    return paths

"""Capture host + Kineto traces of every c10d collective and point-to-point op on gloo (CPU).

    OMP_NUM_THREADS=1 python tests/capture_gloo_ops.py 4 tests/data/traces/gloo_ops_np4

Not a training run: one profiled region in which each rank issues each op once (small tensors,
several dtypes), sends 0 -> 1 (tag 7) and 1 -> 0 (isend/irecv, tag 9), and all-reduces on a
sub-group ({0, 1} or {2, 3}). Writes ``rank<R>_{host,device}.json`` (gzip them for the tests).
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch.multiprocessing.spawn import spawn
from torch.profiler import ExecutionTraceObserver, ProfilerActivity, profile


def issue_every_op(rank: int, world: int, sub: Any) -> None:
    def run(fn: Callable[[], Any]) -> None:
        work = fn()
        if work is not None and hasattr(work, "wait"):
            work.wait()

    run(lambda: dist.all_reduce(torch.ones(1000)))
    for dtype in (torch.bfloat16, torch.float16, torch.int64):
        run(functools.partial(dist.all_reduce, torch.ones(1000, dtype=dtype)))
    run(lambda: dist.all_reduce(torch.ones(1000, dtype=torch.float64), async_op=True))
    run(lambda: dist.broadcast(torch.ones(500), src=0))
    run(lambda: dist.all_gather([torch.empty(300) for _ in range(world)], torch.ones(300)))
    run(lambda: dist.all_gather_into_tensor(torch.empty(300 * world), torch.ones(300)))
    run(lambda: dist.reduce_scatter(torch.empty(200), [torch.ones(200) for _ in range(world)]))
    run(lambda: dist.reduce_scatter_tensor(torch.empty(200), torch.ones(200 * world)))
    run(lambda: dist.all_to_all_single(torch.empty(100 * world), torch.ones(100 * world)))
    run(lambda: dist.all_to_all([torch.empty(100) for _ in range(world)], [torch.ones(100) for _ in range(world)]))
    run(lambda: dist.reduce(torch.ones(400), dst=0))
    run(lambda: dist.gather(torch.ones(50), [torch.empty(50) for _ in range(world)] if rank == 0 else None, dst=0))
    run(lambda: dist.scatter(torch.empty(60), [torch.ones(60) for _ in range(world)] if rank == 0 else None, src=0))
    run(lambda: dist.barrier())
    if rank == 0:
        run(lambda: dist.send(torch.ones(700), dst=1, tag=7))
        run(lambda: dist.irecv(torch.empty(800), src=1, tag=9))
    elif rank == 1:
        run(lambda: dist.recv(torch.empty(700), src=0, tag=7))
        run(lambda: dist.isend(torch.ones(800), dst=0, tag=9))
    run(lambda: dist.all_reduce(torch.ones(900), group=sub))
    run(lambda: dist.all_reduce(torch.ones(100)))


def worker(rank: int, world: int, outdir: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ.get("MASTER_PORT", "29533"))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    low, high = dist.new_group([0, 1]), dist.new_group([2, 3])
    observer = ExecutionTraceObserver().register_callback(f"{outdir}/rank{rank}_host.json")
    with profile(activities=[ProfilerActivity.CPU], execution_trace_observer=observer) as prof:
        issue_every_op(rank, world, low if rank < 2 else high)
    prof.export_chrome_trace(f"{outdir}/rank{rank}_device.json")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    world = int(sys.argv[1]) if len(sys.argv) > 1 else 4
    outdir = sys.argv[2] if len(sys.argv) > 2 else f"gloo_ops_np{world}"
    os.makedirs(outdir, exist_ok=True)
    spawn(worker, args=(world, outdir), nprocs=world, join=True)

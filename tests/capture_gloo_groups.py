"""Capture host + Kineto traces of collectives on several process groups, on gloo (CPU), with
``chakra-profile``'s group markers (``profiler/groups.py``).

    OMP_NUM_THREADS=1 torchrun --standalone --nproc-per-node=4 tests/capture_gloo_groups.py DIR

Four ranks in a 2 x 2 layout: "pairs" {0,1} {2,3} and "columns" {0,2} {1,3}, plus a group of one
rank each. Each rank issues, in one profiled region: an all-reduce on its pair (a marker names
it), a functional all-reduce on its column (its input names the group), an all-gather on its pair,
a reduce-scatter on its column, an all-reduce on its one-rank group, an all-reduce on every rank,
and a send from the pair's first rank to its second (peer 1 of the pair group: global rank 1 or
3, tag 5). Writes ``rank<R>_{host,device}.json`` (gzip them for the tests).
"""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as fc
from torch.profiler import ExecutionTraceObserver, ProfilerActivity, profile

from chakra_convert_fast.profiler.groups import record_groups


def main(outdir: str) -> None:
    dist.init_process_group("gloo")
    record_groups()
    rank = dist.get_rank()
    pairs = [dist.new_group([0, 1]), dist.new_group([2, 3])]
    columns = [dist.new_group([0, 2]), dist.new_group([1, 3])]
    alone = [dist.new_group([r]) for r in range(4)]
    pair, column, one = pairs[rank // 2], columns[rank % 2], alone[rank]
    os.makedirs(outdir, exist_ok=True)
    observer = ExecutionTraceObserver().register_callback(os.path.join(outdir, f"rank{rank}_host.json"))
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, execution_trace_observer=observer) as prof:
        t = torch.ones(256)
        dist.all_reduce(t, group=pair)
        fc.wait_tensor(fc.all_reduce(t, "sum", column))
        dist.all_gather_into_tensor(torch.empty(512), t, group=pair)
        dist.reduce_scatter_tensor(torch.empty(128), t, group=column)
        dist.all_reduce(t, group=one)
        dist.all_reduce(torch.ones(64))
        if rank % 2 == 0:
            dist.send(torch.ones(32), group=pair, tag=5, group_dst=1)
        else:
            dist.recv(torch.empty(32), group=pair, tag=5, group_src=0)
    prof.export_chrome_trace(os.path.join(outdir, f"rank{rank}_device.json"))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])

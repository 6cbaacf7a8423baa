"""A user's own capture (not ``chakra-profile``): a tiny model trained with FSDP2 (``fully_shard``),
DDP, tensor parallelism or TP x FSDP2 over gloo on CPU ranks, every rank traced with
``torch.profiler`` and an ``ExecutionTraceObserver``.

    OMP_NUM_THREADS=1 python tests/capture_own_fsdp.py OUTDIR NPROC [fsdp|ddp|tp|2d|hsdp]

The layouts (default ``fsdp``), each the way its tutorial writes it:

- ``fsdp``: ``fully_shard`` on each block, then on the root, over a 1-D CPU mesh of every rank;
- ``ddp``: ``DistributedDataParallel`` over every rank;
- ``tp``: a 2-D mesh ``("dp", "tp")`` with tp = 2, each block's ``up`` ``ColwiseParallel`` and
  ``down`` ``RowwiseParallel`` (``parallelize_module`` on ``mesh["tp"]``), the model then
  replicated over ``mesh["dp"]`` with ``DistributedDataParallel`` (dp = NPROC / 2; on 2 ranks there
  is no data parallelism, so nothing to scale by);
- ``2d``: the same tensor parallelism, then ``fully_shard`` over ``mesh["dp"]`` (TP x FSDP2);
- ``hsdp``: ``fully_shard`` per block and root over a 2-D mesh ``("replicate", "shard")`` with
  shard = 2 (FSDP2's HSDP: shards gathered and gradients reduce-scattered within a shard group,
  the gradient shards all-reduced across the replicas).

The tensor-parallel ranks of one dp index see the same batch (seeded by the dp index).

What a user's script does: ``init_process_group("gloo")``, ``fully_shard`` on each block and then
on the root over a CPU device mesh, AdamW, random inputs; ``profile(activities=[CPU],
schedule=schedule(wait=1, warmup=1, active=1), execution_trace_observer=...)``, the Kineto trace
written by ``on_trace_ready``. No layout file, no group markers: the traces alone say what the job
was. Writes ``rank<r>_host.json`` and ``rank<r>_device.json`` in OUTDIR (gzip them to commit).

The model: an embedding (vocabulary 64, width 32), two blocks of Linear(32, 64) -> GELU ->
Linear(64, 32) with a residual, and a head Linear(32, 64); batch 2, sequence 8. Every parameter's
rows divide 4, so its FSDP shard is the same share of it on 2 and on 4 ranks.
"""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.multiprocessing.spawn import spawn
from torch.profiler import ExecutionTraceObserver, ProfilerActivity, profile, schedule


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.up, self.down = nn.Linear(width, 2 * width), nn.Linear(2 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(nn.functional.gelu(self.up(x)))


class Tiny(nn.Module):
    def __init__(self, vocab: int = 64, width: int = 32) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.blocks = nn.ModuleList([Block(width), Block(width)])
        self.head = nn.Linear(width, vocab)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def parallelize(model: Tiny, world: int, layout: str, rank: int) -> tuple[nn.Module, int]:
    """``model`` laid out as ``layout`` says, and the seed of this rank's batches."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    if layout == "ddp":
        return nn.parallel.DistributedDataParallel(model), rank
    if layout == "fsdp":
        mesh = init_device_mesh("cpu", (world,))
        for block in model.blocks:
            fully_shard(block, mesh=mesh)
        fully_shard(model, mesh=mesh)
        return model, rank
    if layout == "hsdp":  # replicate x shard (shard 2): FSDP2's HSDP
        mesh = init_device_mesh("cpu", (world // 2, 2), mesh_dim_names=("replicate", "shard"))
        for block in model.blocks:
            fully_shard(block, mesh=mesh)
        fully_shard(model, mesh=mesh)
        return model, rank
    mesh = init_device_mesh("cpu", (world // 2, 2), mesh_dim_names=("dp", "tp"))
    for block in model.blocks:
        parallelize_module(block, mesh["tp"], {"up": ColwiseParallel(), "down": RowwiseParallel()})
    seed = mesh["dp"].get_local_rank()
    if layout == "tp":
        if world == 2:
            return model, seed
        from torch.distributed.tensor.parallel.ddp import _pre_dp_module_transform

        _pre_dp_module_transform(model)  # DTensor parameters as local tensors, what DDP can replicate
        return nn.parallel.DistributedDataParallel(model, process_group=mesh["dp"].get_group()), seed
    for block in model.blocks:
        fully_shard(block, mesh=mesh["dp"])
    fully_shard(model, mesh=mesh["dp"])
    return model, seed


def worker(rank: int, world: int, outdir: str, layout: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ.get("MASTER_PORT", "29547"))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    model, seed = parallelize(Tiny(), world, layout, rank)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    generator = torch.Generator().manual_seed(seed)

    et = ExecutionTraceObserver()
    et.register_callback(f"{outdir}/rank{rank}_host.json")
    with profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=1, warmup=1, active=1, repeat=1),
        on_trace_ready=lambda p: p.export_chrome_trace(f"{outdir}/rank{rank}_device.json"),
        execution_trace_observer=et,
        record_shapes=True,
    ) as prof:
        for _ in range(3):
            ids = torch.randint(0, 64, (2, 8), generator=generator)
            loss = nn.functional.cross_entropy(model(ids).flatten(0, 1), ids.flatten())
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            prof.step()
    et.unregister_callback()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    out, nproc = sys.argv[1], int(sys.argv[2])
    layout = sys.argv[3] if len(sys.argv) > 3 else "fsdp"
    if layout not in ("fsdp", "ddp", "tp", "2d", "hsdp") or (layout != "fsdp" and layout != "ddp" and nproc % 2):
        sys.exit(
            f"layout {layout!r} on {nproc} ranks: choose fsdp, ddp, tp, 2d or hsdp (an even NPROC but for fsdp, ddp)"
        )
    os.makedirs(out, exist_ok=True)
    spawn(worker, args=(nproc, out, layout), nprocs=nproc, join=True)

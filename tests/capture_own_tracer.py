"""A tracer written the way users write theirs (not ``chakra-profile``), on a 2-rank GPT-2 DDP job.

    OMP_NUM_THREADS=1 python tests/capture_own_tracer.py OUTDIR [EXTRAS]

What users do, and what this script does on purpose:

- only rank 0 traces (the other rank trains untraced);
- the ``ExecutionTraceObserver`` is registered and **started by hand before the profiler's
  schedule begins**, and is *also* handed to ``torch.profiler.profile(execution_trace_observer=)``;
- ``record_shapes``, ``profile_memory``, ``with_stack`` and ``with_flops`` (EXTRAS, a comma
  list, default all four; ``none`` for none);
- schedule wait 1 / warmup 0 / active 1, then one more untraced step.

So the host trace holds ProfilerStep#0 and #1 and the Kineto trace only #1. Writes
``rank0_host.json`` and ``rank0_device.json`` in OUTDIR (gzip them for the tests), and
``rank0_kineto_flops.json``: the FLOPs the profiler counted with ``with_flops`` (its events'
``flops``, keyed by their ``External id``), which torch 2.13's chrome export leaves out of the
Kineto trace. The model is a
tiny GPT-2 from a config (2 layers, width 64, vocabulary 512, sequence 32, batch 2), random
token ids: nothing is downloaded.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import torch
import torch.distributed as dist
from torch.multiprocessing.spawn import spawn
from torch.profiler import ExecutionTraceObserver, ProfilerActivity, profile, schedule

EXTRAS = ("record_shapes", "profile_memory", "with_stack", "with_flops")


def save(prof: Any, outdir: str) -> None:
    prof.export_chrome_trace(f"{outdir}/rank0_device.json")
    ops = [{"External id": e.id, "name": e.name, "flops": e.flops} for e in prof.events() if e.flops]
    with open(f"{outdir}/rank0_kineto_flops.json", "w") as f:
        json.dump({"torch": torch.__version__, "ops": ops}, f, indent=1)


def worker(rank: int, world: int, outdir: str, extras: tuple[str, ...]) -> None:
    from transformers import GPT2Config, GPT2LMHeadModel

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ.get("MASTER_PORT", "29541"))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    # loss_type: a config attribute that GPT2Config's signature does not list
    config = GPT2Config(
        n_layer=2,
        n_embd=64,  # type: ignore[call-arg]
        n_head=2,
        n_positions=64,
        vocab_size=512,
        bos_token_id=0,
        eos_token_id=0,
        loss_type="ForCausalLM",
    )
    model = torch.nn.parallel.DistributedDataParallel(GPT2LMHeadModel(config))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    generator = torch.Generator().manual_seed(rank)

    def train_step() -> None:
        ids = torch.randint(0, 512, (2, 32), generator=generator)
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    steps = 3
    if rank != 0:
        for _ in range(steps):
            train_step()
    else:
        et = ExecutionTraceObserver()
        et.register_callback(f"{outdir}/rank0_host.json")
        et.start()  # before the schedule: the host trace will hold the wait step too
        extra_options: dict[str, Any] = {name: name in extras for name in EXTRAS}
        with profile(
            activities=[ProfilerActivity.CPU],
            schedule=schedule(wait=1, warmup=0, active=1, repeat=1),
            on_trace_ready=lambda p: save(p, outdir),
            execution_trace_observer=et,
            **extra_options,
        ) as prof:
            for _ in range(steps):
                train_step()
                prof.step()
        et.unregister_callback()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    outdir = sys.argv[1]
    chosen = sys.argv[2] if len(sys.argv) > 2 else ",".join(EXTRAS)
    extras = () if chosen == "none" else tuple(chosen.split(","))
    unknown = set(extras) - set(EXTRAS)
    if unknown:
        sys.exit(f"unknown extras {sorted(unknown)}; choose from {EXTRAS}")
    os.makedirs(outdir, exist_ok=True)
    spawn(worker, args=(2, outdir, extras), nprocs=2, join=True)

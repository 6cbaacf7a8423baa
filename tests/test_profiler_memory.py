"""``chakra-profile --profile-memory``: the state bytes the traced step began with, and the CPU
truth from Kineto's memory events of a real (tiny) profiled loop."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed import FileStore  # type: ignore[attr-defined]  # not in its __all__

from chakra_convert_fast.profiler import memory, tracing
from chakra_convert_fast.profiler.cli import parse_args

pytestmark = [pytest.mark.torch]


def test_state_bytes_count_each_storage_once() -> None:
    model = nn.Linear(4, 3)  # 12 + 3 float32
    optimizer = torch.optim.AdamW(model.parameters(), foreach=False)
    cpu = torch.device("cpu")
    assert memory.state_bytes(model, optimizer, cpu) == {"parameters": 60, "gradients": 0, "optimizer": 0}
    model(torch.ones(2, 4)).sum().backward()
    optimizer.step()
    found = memory.state_bytes(model, optimizer, cpu)
    assert found["gradients"] == 60
    assert found["optimizer"] == 2 * 60 + 2 * 4  # exp_avg, exp_avg_sq, and a float32 step per parameter
    assert memory.begin_step(cpu) == {} and memory.end_step(cpu) == {}


def test_profile_memory_is_off_by_default() -> None:
    assert parse_args(["--model", "gpt2"]).profile_memory is False
    assert parse_args(["--model", "gpt2", "--profile-memory"]).profile_memory is True


def test_a_profiled_loop_records_the_window_s_truth(tmp_path: Path) -> None:
    model = nn.Linear(64, 64)
    optimizer = torch.optim.AdamW(model.parameters())
    paths = tracing.TracePaths.for_rank(tmp_path, "t", 0)
    schedule = tracing.Schedule(1, 1, 1)
    recorded: dict[str, object] = {}
    with tracing.capture(paths, schedule, False, host=False, shapes=False, memory=True) as prof:
        for step in range(schedule.total):
            if step == schedule.active_steps()[0]:
                recorded["state_bytes_at_start"] = memory.state_bytes(model, optimizer, torch.device("cpu"))
            model(torch.ones(32, 64)).square().sum().backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            prof.step()
    truth = memory.window_truth(paths.device, recorded)
    assert int(truth["kineto_memory_events"]) > 0
    state = (64 * 64 + 64) * 4
    # the parameters, AdamW's two moments and its float32 step counter per parameter (weight, bias)
    assert truth["truth_bytes"] == int(truth["kineto_peak_total_allocated"]) + 3 * state + 2 * 4


def test_ddp_buckets_are_recorded_beside_the_truth(tmp_path: Path) -> None:
    """DDP's flat gradient buckets are live throughout the step; the summary names their bytes."""
    dist.init_process_group("gloo", store=FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1)
    try:
        model = nn.parallel.DistributedDataParallel(nn.Linear(64, 64))
        model(torch.ones(2, 64)).sum().backward()
        assert memory.ddp_bucket_bytes(model) == {"ddp_bucket_bytes": (64 * 64 + 64) * 4}
        assert memory.ddp_bucket_bytes(nn.Linear(2, 2)) == {}
    finally:
        dist.destroy_process_group()

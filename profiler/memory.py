"""The memory truth of the traced step, for ``chakra-convert-fast memory`` to be checked against.

On a GPU: ``torch.cuda.max_memory_allocated`` and ``max_memory_reserved`` over the traced step
(the peak statistics are reset when it begins). On any device: the bytes of the parameters,
gradients and optimizer state live when the traced step began (each storage counted once, a
DTensor by its local shard). Kineto's CPU ``[memory]`` events count only what was allocated while
profiling, so on CPU the truth is the window's peak "Total Allocated" (read from the rank's
Kineto trace after the profiler exits) plus those state bytes (docs/memory.md).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from chakra_convert_fast.converter.memory.kineto import CPU_DEVICE, CUDA_DEVICE, read_memory


def _local(tensor: torch.Tensor) -> torch.Tensor:
    """A DTensor's local shard, read as an attribute: ``to_local`` would record an op in the
    traced step."""
    local = getattr(tensor, "_local_tensor", tensor)
    return local if isinstance(local, torch.Tensor) else tensor


def _storage_bytes(tensors: Iterable[torch.Tensor], device: torch.device, seen: set[int]) -> int:
    total = 0
    for tensor in tensors:
        local = _local(tensor)
        if local.device.type != device.type:
            continue  # e.g. AdamW's ``step`` counters live on the CPU beside CUDA parameters
        storage = local.untyped_storage()
        key = storage.data_ptr()
        if key in seen or storage.nbytes() == 0:
            continue
        seen.add(key)
        total += storage.nbytes()
    return total


def state_bytes(module: nn.Module, optimizer: torch.optim.Optimizer, device: torch.device) -> dict[str, int]:
    """The parameters', gradients' and optimizer state's bytes on ``device`` now."""
    seen: set[int] = set()
    params = list(module.parameters())
    state = [v for per_param in optimizer.state.values() for v in per_param.values() if isinstance(v, torch.Tensor)]
    return {
        "parameters": _storage_bytes(params, device, seen),
        "gradients": _storage_bytes((p.grad for p in params if p.grad is not None), device, seen),
        "optimizer": _storage_bytes(state, device, seen),
    }


def ddp_bucket_bytes(module: nn.Module) -> dict[str, Any]:
    """DDP's gradient buckets (allocated when the model is wrapped, live throughout, not in the
    truth the issue defines): their bytes, as DDP's own logging data gives them; {} elsewhere."""
    logging_data = getattr(module, "_get_ddp_logging_data", None)
    if logging_data is None:
        return {}
    sizes = str(logging_data().get("bucket_sizes", ""))
    found = [int(part) for part in sizes.replace(",", " ").split() if part.isdigit()]
    return {"ddp_bucket_bytes": sum(found)} if found else {}


def begin_step(device: torch.device) -> dict[str, Any]:
    """Reset the CUDA peaks before the traced step; what is allocated as it begins. The caching
    allocator counts on the host as tensors are made and freed, so no synchronisation is needed
    (one would be a runtime call inside the traced step)."""
    if device.type != "cuda":
        return {}
    torch.cuda.reset_peak_memory_stats(device)
    return {"cuda_allocated_at_start": torch.cuda.memory_allocated(device)}


def end_step(device: torch.device) -> dict[str, Any]:
    """The CUDA peaks of the traced step (the step's ``loss.item()`` has waited for the GPU)."""
    if device.type != "cuda":
        return {}
    peak = torch.cuda.max_memory_allocated(device)
    return {
        "cuda_max_allocated": peak,
        "cuda_max_reserved": torch.cuda.max_memory_reserved(device),
        "truth_bytes": peak,
    }


def window_truth(device_trace: Path, recorded: dict[str, Any]) -> dict[str, Any]:
    """The CPU truth of a ``--profile-memory`` capture: the window's peak "Total Allocated" of
    the rank's device plus the state bytes live when the traced step began; on a GPU the truth is
    ``cuda_max_allocated``."""
    found = read_memory(device_trace, CUDA_DEVICE if "cuda_max_allocated" in recorded else CPU_DEVICE)
    if not found.events:
        return {"kineto_memory_events": 0}
    peak_total = max(e.total for e in found.events)
    state = sum(recorded.get("state_bytes_at_start", {}).values())
    facts: dict[str, Any] = {
        "kineto_memory_events": len(found.events),
        "kineto_peak_total_allocated": peak_total,
    }
    if "cuda_max_allocated" not in recorded:
        facts["truth_bytes"] = peak_total + state
    return facts

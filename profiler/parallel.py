"""The model split over a layout (``layouts.Layout``): tensor parallel blocks, pipeline stages,
data parallel wrapping, and the training step each needs.

* **TP** (Megatron-style, ``parallelize_module``): in each block the attention's Q/K/V projection
  and the MLP's first linear are column-parallel, the attention output and the MLP's second
  linear row-parallel (one all-reduce each, forward and backward); embeddings, norms and the head
  stay replicated. GPT-2's ``Conv1D`` layers become ``nn.Linear`` (the same function, its weight
  transposed) since only ``nn.Linear`` has plans; its fused Q/K/V output is split per rank (a
  different but equally random initialisation).
* **PP** (``torch.distributed.pipelining``): stage ``s`` holds whole blocks (``stage_layers``);
  the first also the embeddings, the last the final norm and head with the loss. The head is
  untied from the embedding (each stage owns its copy). Stages see no padding mask (causal
  attention for GPT-2, none for BERT): the shapes and the communication are the real job's.
* **DP**: ``ddp`` wraps the model in ``DistributedDataParallel`` over the data-parallel group (TP
  parameters made local first); ``fsdp`` applies FSDP2 ``fully_shard`` to each block and then the
  root, on the data-parallel mesh dimension. A pipeline stage under ``ddp`` all-reduces its
  gradients as one flat buffer after the schedule's last backward (DDP inside a pipeline schedule
  fails in torch 2.13: its reducer meets each parameter once per micro-batch, an internal assert).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

import torch
import torch.distributed as dist
from torch import nn

from chakra_convert_fast.profiler.layouts import MESH_DIMS, Layout, stage_layers
from chakra_convert_fast.profiler.models import MOE_MODELS

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh


class Trainer:
    """One training step over the layout; ``step`` returns the loss (NaN on pipeline stages
    that do not compute it)."""

    def __init__(
        self,
        module: nn.Module,
        optimizer: torch.optim.Optimizer,
        schedule: Any = None,
        first: bool = True,
        last: bool = True,
        grad_group: Any = None,
    ) -> None:
        self.module, self.optimizer, self.schedule = module, optimizer, schedule
        self.first, self.last = first, last
        self.grad_group = grad_group  # a pipeline stage's data-parallel group under ddp
        self.autocast: torch.dtype | None = None  # mixed precision: the forward pass and loss under autocast
        self.moe_layers: list[Any] = []  # expert parallelism: this rank's expert shards (their ``loads``)

    def step(self, batch: dict[str, torch.Tensor]) -> float:
        if self.schedule is None:
            device_type = next(iter(batch.values())).device.type
            with torch.autocast(device_type, dtype=self.autocast or torch.float32, enabled=self.autocast is not None):
                loss = self.module(**batch).loss
            loss.backward()
            value = float(loss.item())
        else:
            losses: list[torch.Tensor] = []
            if self.first:
                self.schedule.step(batch["input_ids"])
            elif self.last:
                self.schedule.step(target=batch["labels"], losses=losses)
            else:
                self.schedule.step()
            value = float(torch.stack(losses).mean().item()) if losses else math.nan
            if self.grad_group is not None:
                _all_reduce_gradients(self.module, self.grad_group)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return value


def _all_reduce_gradients(module: nn.Module, group: Any) -> None:
    """The mean of the stage's gradients over its data-parallel group, as one flat all-reduce.
    Under tensor parallelism a gradient is a DTensor: its local shard is what this rank reduces
    (``to_local`` with autograd off is that shard itself, so the copy back lands in the DTensor).

    The flat buffer's storage is freed here, once the gradients are copied back: the collective's
    work object (gloo's worker thread, NCCL's watchdog) may still hold a reference when
    ``all_reduce`` returns, and whichever thread drops the last one frees the buffer, before the
    optimizer step or during it, from run to run (a first pipeline stage's peak, which falls in the
    optimizer step, moved by the buffer's size between two runs of the same job)."""
    with torch.no_grad():
        grads = [_local(p.grad) for p in module.parameters() if p.grad is not None]
        if not grads:
            return
        flat = torch.cat([g.flatten() for g in grads])
        dist.all_reduce(flat, group=group)
        flat /= dist.get_world_size(group)
        offset = 0
        for g in grads:
            g.copy_(flat[offset : offset + g.numel()].view_as(g))
            offset += g.numel()
        flat.untyped_storage().resize_(0)


def _local(tensor: torch.Tensor) -> torch.Tensor:
    """A DTensor's local shard (a plain tensor as it is)."""
    to_local = getattr(tensor, "to_local", None)
    return tensor if to_local is None else cast(torch.Tensor, to_local())


def mesh_groups(mesh: Any, rank: int) -> dict[str, dict[str, Any]]:
    """This rank's group on each mesh dimension: its name (the trace's ``pg_name``) and ranks;
    without a mesh (data parallelism alone) every rank is in the default group and the other
    dimensions are this rank alone (no process group: ``one:<rank>``)."""
    if mesh is None:
        alone = {"pg_name": f"one:{rank}", "ranks": [rank]}
        world = dist.group.WORLD
        assert world is not None
        return {
            "pp": alone,
            "dp": {"pg_name": world.group_name, "ranks": dist.get_process_group_ranks(world)},
            "tp": dict(alone),
        }
    out = {}
    for dim in MESH_DIMS:
        group = mesh[dim].get_group()
        out[dim] = {"pg_name": group.group_name, "ranks": dist.get_process_group_ranks(group)}
    return out


def build(
    model_name: str, model: nn.Module, layout: Layout, rank: int, device: torch.device, lr: float
) -> tuple[Trainer, dict[str, Any]]:
    """Split ``model`` (built alike on every rank) over ``layout``; returns the trainer and this
    rank's mesh groups (and, under FSDP, its units' parameter rows: ``fsdp_units``)."""
    from torch.distributed.device_mesh import init_device_mesh

    # data parallelism alone runs on the default group, as before layouts (no one-rank groups)
    plain = layout.tp == layout.pp == 1
    mesh = None if plain else init_device_mesh(device.type, (layout.pp, layout.dp, layout.tp), mesh_dim_names=MESH_DIMS)
    coords = layout.coords(rank)
    first, last = coords["pp"] == 0, coords["pp"] == layout.pp - 1
    module: nn.Module = model
    if layout.pp > 1:
        module = _stage(
            model_name, model, stage_layers(_n_layer(model_name, model), layout.pp, coords["pp"]), first, last
        )
    if layout.tp > 1:
        for block in _blocks(model_name, module):
            _tensor_parallel(model_name, block, _dimension(mesh, "tp"), layout.tp)
    grad_group = None
    units: list[list[list[int]]] = []
    moe_layers: list[Any] = []
    if layout.ep > 1:
        from chakra_convert_fast.profiler.experts import shard_experts

        moe_layers = shard_experts(module, layout.ep, dist.group.WORLD)
    if layout.pp > 1 and layout.dp_mode == "ddp":
        grad_group = _dimension(mesh, "dp").get_group()
    else:
        module = _data_parallel(module, model_name, layout, mesh, device, units)
    optimizer = torch.optim.AdamW(module.parameters(), lr=lr)
    schedule = None
    if layout.pp > 1:
        from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

        stage = PipelineStage(module, coords["pp"], layout.pp, device, group=_dimension(mesh, "pp").get_group())
        kind = Schedule1F1B if layout.schedule == "1f1b" else ScheduleGPipe
        schedule = kind(stage, layout.microbatches, loss_fn=_loss(model_name))
    trainer = Trainer(module, optimizer, schedule, first, last, grad_group)
    trainer.moe_layers = moe_layers
    groups = mesh_groups(mesh, rank)
    if layout.ep > 1:  # the experts' group: the default one (--ep equals --nproc)
        groups["ep"] = dict(groups["dp"])
    return trainer, {**groups, "fsdp_units": units}


def _dimension(mesh: DeviceMesh | None, name: str) -> DeviceMesh:
    """The sub-mesh of one dimension (``tp``, ``dp``, ``pp``) of a layout's mesh."""
    if mesh is None:
        raise ValueError(f"a layout of plain data parallelism has no {name} mesh")
    return mesh[name]


def _n_layer(model_name: str, model: nn.Module) -> int:
    return len(_blocks(model_name, model))


# A transformers model (GPT2LMHeadModel, BertForMaskedLM) is reached into by attribute, which torch
# types as ``Tensor | Module``: such a model, and its submodules, are ``Any`` here, and what is
# taken out of them is cast to what it is.
def _blocks(model_name: str, module: Any) -> nn.ModuleList:
    if isinstance(module, _Stage):
        return module.blocks
    if model_name == "gpt2":
        return cast(nn.ModuleList, module.transformer.h)
    return cast(nn.ModuleList, module.bert.encoder.layer)


# -- tensor parallelism ---------------------------------------------------------------------------
def _as_linear(conv: Any) -> nn.Linear:
    """transformers' ``Conv1D`` (``x @ W + b``, W is in x out) as the same ``nn.Linear``."""
    weight = conv.weight
    linear = nn.Linear(weight.shape[0], weight.shape[1])
    with torch.no_grad():
        linear.weight.copy_(weight.t())
        linear.bias.copy_(conv.bias)
    return linear


def _tensor_parallel(model_name: str, block: Any, tp_mesh: Any, tp: int) -> None:
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    if model_name == "gpt2":
        attn, mlp = block.attn, block.mlp
        attn.c_attn, attn.c_proj = _as_linear(attn.c_attn), _as_linear(attn.c_proj)
        mlp.c_fc, mlp.c_proj = _as_linear(mlp.c_fc), _as_linear(mlp.c_proj)
        attn.split_size //= tp
        attn.num_heads //= tp
        plan = {
            "attn.c_attn": ColwiseParallel(),
            "attn.c_proj": RowwiseParallel(),
            "mlp.c_fc": ColwiseParallel(),
            "mlp.c_proj": RowwiseParallel(),
        }
    else:
        self_attn = block.attention.self
        self_attn.num_attention_heads //= tp
        self_attn.all_head_size //= tp
        plan = {
            "attention.self.query": ColwiseParallel(),
            "attention.self.key": ColwiseParallel(),
            "attention.self.value": ColwiseParallel(),
            "attention.output.dense": RowwiseParallel(),
            "intermediate.dense": ColwiseParallel(),
            "output.dense": RowwiseParallel(),
        }
    parallelize_module(block, tp_mesh, plan)


# -- data parallelism -----------------------------------------------------------------------------
def _world_mesh(device: torch.device) -> Any:
    """Every rank in one mesh dimension, on ``device``'s type (its group: the default one)."""
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh(device.type, (dist.get_world_size(),))


def _data_parallel(
    module: nn.Module, model_name: str, layout: Layout, mesh: Any, device: torch.device, units: list[list[list[int]]]
) -> nn.Module:
    if layout.dp_mode == "fsdp":
        from torch.distributed.fsdp import fully_shard

        units.extend(fsdp_units(module, list(_blocks(model_name, module))))
        # FSDP alone: a one-dimension mesh over every rank on this run's device type. Left to
        # fully_shard, it would be made on the machine's default device (CUDA wherever a GPU is
        # present), and a --device cpu job's ranks past the GPU count failed to start.
        dp_mesh = mesh["dp"] if mesh is not None else _world_mesh(device)
        for block in _blocks(model_name, module):
            fully_shard(block, mesh=dp_mesh)
        fully_shard(module, mesh=dp_mesh)
        return module
    if layout.tp > 1:
        from torch.distributed.tensor.parallel.ddp import _pre_dp_module_transform

        _pre_dp_module_transform(module)
    ids = [device.index] if device.type == "cuda" else None
    group = mesh["dp"].get_group() if mesh is not None else None
    if layout.ep > 1:  # each rank's experts are its own: their gradients are not averaged
        from chakra_convert_fast.profiler.experts import expert_parameter_names

        ignore: Any = nn.parallel.DistributedDataParallel._set_params_and_buffers_to_ignore_for_model
        ignore(module, expert_parameter_names(module))
    # Without --ep, a mixture of experts' expert that no token chose in a step has no gradient:
    # DDP must look for such parameters or it fails at the next step.
    unused = model_name in MOE_MODELS and layout.ep == 1
    return nn.parallel.DistributedDataParallel(
        module, device_ids=ids, process_group=group, find_unused_parameters=unused
    )


def fsdp_units(module: nn.Module, blocks: list[nn.Module]) -> list[list[list[int]]]:
    """Per FSDP unit (the blocks, then the root's other parameters), each parameter's
    ``[rows, bytes per row]`` as this rank holds it before sharding (tensor-parallel local shard):
    FSDP pads rows to a multiple of the data-parallel degree, so a unit's all-gather of one shard
    is ``sum(ceil(rows / D) * bytes per row)`` bytes, and ``scale`` can tell it for any degree."""

    def shape(p: torch.Tensor) -> list[int]:
        local = p.to_local() if hasattr(p, "to_local") else p
        rows = local.shape[0] if local.dim() else 1
        return [int(rows), int(local.numel() // max(rows, 1) * local.element_size())]

    in_blocks = {id(p) for b in blocks for p in b.parameters()}
    units = [[shape(p) for p in b.parameters()] for b in blocks]
    units.append([shape(p) for p in module.parameters() if id(p) not in in_blocks])
    return units


# -- pipeline parallelism -------------------------------------------------------------------------
class _Stage(nn.Module):
    """Whole blocks of the model; the first stage embeds token ids, the last returns logits."""

    def __init__(
        self,
        embed: nn.Module | None,
        blocks: list[nn.Module],
        head: nn.Module | None,
        positions: nn.Module | None = None,
        drop: nn.Module | None = None,
    ) -> None:
        super().__init__()
        self.embed, self.positions, self.drop, self.head = embed, positions, drop, head
        self.blocks = nn.ModuleList(blocks)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.embed is not None:
            if self.positions is not None:  # GPT-2: token + position embeddings, dropout
                x = self.embed(x) + self.positions(torch.arange(x.shape[1], device=x.device))
                x = self.drop(x) if self.drop is not None else x
            else:  # BERT's embeddings module
                x = self.embed(input_ids=x)
        for block in self.blocks:
            x = block(x)
        return self.head(x) if self.head is not None else x


def _untied(weight: nn.Parameter) -> nn.Parameter:
    return nn.Parameter(weight.detach().clone())


def _stage(model_name: str, model: Any, layers: range, first: bool, last: bool) -> _Stage:
    blocks = [_blocks(model_name, model)[i] for i in layers]
    if model_name == "gpt2":
        t = model.transformer
        head = None
        if last:
            model.lm_head.weight = _untied(model.lm_head.weight)
            head = nn.Sequential(t.ln_f, model.lm_head)
        if first:
            return _Stage(t.wte, blocks, head, t.wpe, t.drop)
        return _Stage(None, blocks, head)
    head = None
    if last:
        decoder = model.cls.predictions.decoder
        decoder.weight = _untied(decoder.weight)
        head = model.cls
    return _Stage(model.bert.embeddings if first else None, blocks, head)


def _loss(model_name: str) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    def gpt2(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:  # next-token prediction
        return nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten(), ignore_index=-100)

    def bert(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:  # masked tokens
        return nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)

    return gpt2 if model_name == "gpt2" else bert

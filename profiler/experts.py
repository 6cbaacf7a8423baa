"""Expert parallelism (``--ep E``): a mixture-of-experts layer's experts sharded over E ranks.

Each rank keeps ``experts / E`` consecutive experts of every MoE layer (rank r: experts
``r * local ... (r + 1) * local - 1``); the router, attention, embeddings and norms stay replicated
(data parallel). A layer's forward, as a real expert-parallel job runs it (Megatron-LM's
all-to-all token dispatcher, DeepSpeed-MoE without a capacity limit):

1. the router's top-k choices are sorted by expert; each rank counts the rows it sends to each
   expert and exchanges those counts (``all_to_all_single`` of ``experts`` int64, equal splits);
2. **dispatch**: ``all_to_all_single`` of the hidden rows with input splits (rows to each rank)
   and output splits (rows from each rank), both known from the counts;
3. each local expert (SwiGLU: ``gate_up_proj``, ``down_proj``) runs on its rows;
4. **combine**: the inverse ``all_to_all_single`` (the splits swapped), then the rows are
   weighted by the router's scores and summed back onto their tokens.

Dispatch and combine are ``torch.distributed.all_to_all_single`` in a differentiable wrapper
(``_AllToAll``): the backward pass runs the same two all-to-alls the other way. Each layer records
the rows its local experts received per forward (``loads``): the routing's imbalance.
"""

from __future__ import annotations

from typing import Any, cast

import torch
import torch.distributed as dist
from torch import nn


class _AllToAll(torch.autograd.Function):
    """``dist.all_to_all_single`` with splits, differentiable: the gradient goes back by the same
    all-to-all with the splits swapped (``c10d::alltoall_base_`` both ways, as a user's MoE code
    and torch's deprecated ``torch.distributed.nn.functional.all_to_all_single`` run it)."""

    @staticmethod
    def forward(ctx: Any, rows: torch.Tensor, output_splits: list[int], input_splits: list[int], group: Any) -> Any:
        ctx.splits, ctx.group = (output_splits, input_splits), group
        out = rows.new_empty(sum(output_splits), *rows.shape[1:])
        dist.all_to_all_single(out, rows.contiguous(), output_splits, input_splits, group=group)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Any:
        output_splits, input_splits = ctx.splits
        back = grad.new_empty(sum(input_splits), *grad.shape[1:])
        dist.all_to_all_single(back, grad.contiguous(), input_splits, output_splits, group=ctx.group)
        return back, None, None, None


def all_to_all_single(
    rows: torch.Tensor, output_splits: list[int], input_splits: list[int], group: Any
) -> torch.Tensor:
    """``rows`` (``input_splits[p]`` rows for rank p, in rank order) exchanged over ``group``:
    ``output_splits[p]`` rows from each rank p."""
    apply: Any = _AllToAll.apply  # torch leaves it untyped
    return cast(torch.Tensor, apply(rows, output_splits, input_splits, group))


class ExpertParallel(nn.Module):
    """The experts of one MoE layer that this rank holds, with the dispatch and combine around
    them; called like transformers' ``MixtralExperts`` (``hidden, top_k_index, top_k_weights``)."""

    def __init__(self, experts: Any, group: Any, ep: int, ep_rank: int) -> None:
        super().__init__()
        total = int(experts.num_experts)
        if total % ep:
            raise ValueError(f"{total} experts do not split over --ep {ep}")
        local = total // ep
        first = ep_rank * local
        self.num_experts, self.local, self.ep, self.group = total, local, ep, group
        self.gate_up_proj = nn.Parameter(experts.gate_up_proj.detach()[first : first + local].clone())
        self.down_proj = nn.Parameter(experts.down_proj.detach()[first : first + local].clone())
        self.act_fn = experts.act_fn
        self.loads: list[list[int]] = []  # per forward: rows received by each local expert

    def forward(self, hidden: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor) -> torch.Tensor:
        top_k = top_k_index.shape[1]
        chosen = top_k_index.reshape(-1)
        order = torch.argsort(chosen, stable=True)  # (token, choice) rows grouped by expert
        token_of = order // top_k
        per_expert = torch.bincount(chosen, minlength=self.num_experts)
        received_counts = torch.empty_like(per_expert)
        dist.all_to_all_single(received_counts, per_expert, group=self.group)  # the routing's counts first
        matrix = received_counts.view(self.ep, self.local)  # [source rank, local expert]
        input_splits = [int(n) for n in per_expert.view(self.ep, self.local).sum(1).tolist()]
        output_splits = [int(n) for n in matrix.sum(1).tolist()]

        rows = hidden[token_of]
        received = all_to_all_single(rows, output_splits, input_splits, self.group)
        expert_of = torch.repeat_interleave(
            torch.arange(self.local, device=hidden.device).repeat(self.ep), matrix.reshape(-1)
        )
        computed = torch.zeros_like(received)
        for e in range(self.local):
            index = (expert_of == e).nonzero().squeeze(1)
            if index.numel() == 0:
                continue
            gate, up = nn.functional.linear(received[index], self.gate_up_proj[e]).chunk(2, dim=-1)
            out = nn.functional.linear(self.act_fn(gate) * up, self.down_proj[e])
            computed = computed.index_copy(0, index, out)
        back = all_to_all_single(computed, input_splits, output_splits, self.group)
        weights = top_k_weights.reshape(-1)[order].to(back.dtype)
        self.loads.append([int(n) for n in matrix.sum(0).tolist()])
        return torch.zeros_like(hidden).index_add(0, token_of, back * weights[:, None])


def shard_experts(model: Any, ep: int, group: Any) -> list[ExpertParallel]:
    """Replace every MoE layer's experts of a transformers Mixtral model by this rank's shard;
    returns the layers in order. Raises ValueError where the model has no such layers."""
    ep_rank = dist.get_rank(group)
    layers = []
    for block in model.model.layers:
        moe = block.mlp
        experts = getattr(moe, "experts", None)
        if experts is None or not hasattr(experts, "gate_up_proj"):
            raise ValueError(f"{type(moe).__name__} has no fused experts to shard (transformers' MixtralExperts)")
        moe.experts = ExpertParallel(experts, group, ep, ep_rank)
        layers.append(moe.experts)
    return layers


def expert_parameter_names(module: nn.Module) -> list[str]:
    """The names of the expert shards' parameters in ``module`` (kept out of data parallelism)."""
    names: list[str] = []
    for prefix, sub in module.named_modules():
        if isinstance(sub, ExpertParallel):
            names.extend(f"{prefix}.{name}" for name, _ in sub.named_parameters())
    return names


def imbalance(loads: list[list[list[list[int]]]]) -> dict[str, Any]:
    """The routing's imbalance from every rank's loads (``loads[rank][layer][forward]``: the rows
    each of the rank's local experts received): per forward of each layer, the job's expert loads
    (ranks' local experts in order) and the max/mean ratios of expert loads and of rank loads
    (what the busiest expert, the busiest rank, waits on); their mean and maximum over the run."""
    n_layer = min((len(rank) for rank in loads), default=0)
    per_forward: list[dict[str, Any]] = []
    for layer in range(n_layer):
        forwards = min(len(rank[layer]) for rank in loads)
        for i in range(forwards):
            experts = [n for rank in loads for n in rank[layer][i]]
            ranks = [sum(rank[layer][i]) for rank in loads]
            per_forward.append(
                {
                    "layer": layer,
                    "forward": i,
                    "expert_rows": experts,
                    "expert_max_over_mean": _ratio(experts),
                    "rank_max_over_mean": _ratio(ranks),
                }
            )
    summary: dict[str, Any] = {}
    for key in ("expert_max_over_mean", "rank_max_over_mean"):
        values = [float(f[key]) for f in per_forward]
        summary[key] = {
            "mean": round(sum(values) / len(values), 4) if values else None,
            "max": max(values) if values else None,
        }
    summary["per_forward"] = per_forward
    return summary


def _ratio(values: list[int]) -> float:
    mean = sum(values) / len(values) if values else 0
    return round(max(values) / mean, 4) if mean else 1.0

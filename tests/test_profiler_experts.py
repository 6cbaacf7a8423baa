"""``profiler/experts.py`` in one process: the expert-parallel layer computes what transformers'
own Mixtral experts compute (outputs and gradients), and the imbalance figures add up."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
import torch.distributed as dist
from torch._C._distributed_c10d import HashStore
from transformers import MixtralConfig
from transformers.models.mixtral.modeling_mixtral import MixtralSparseMoeBlock

from chakra_convert_fast.profiler.experts import ExpertParallel, imbalance

pytestmark = [pytest.mark.torch]


@pytest.fixture
def world() -> Iterator[None]:
    """A one-rank gloo group: the all-to-alls run, each rank's splits all its own."""
    dist.init_process_group("gloo", store=HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def test_expert_parallel_layer_matches_transformers_experts(world: None) -> None:
    torch.manual_seed(0)
    config = MixtralConfig(hidden_size=16, intermediate_size=24, num_local_experts=4, num_experts_per_tok=2)
    block = MixtralSparseMoeBlock(config)
    for p in block.parameters():
        torch.nn.init.normal_(p, std=0.2)
    hidden = torch.randn(1, 40, 16)
    expected = block(hidden.clone())
    expected.square().sum().backward()
    want = {n: p.grad.clone() for n, p in block.experts.named_parameters() if p.grad is not None}
    block.zero_grad()

    sharded = ExpertParallel(block.experts, dist.group.WORLD, 1, 0)
    block.experts = sharded  # type: ignore[assignment]  # called alike: (hidden, top_k_index, top_k_weights)
    got = block(hidden.clone())
    got.square().sum().backward()
    torch.testing.assert_close(got, expected)
    for name, grad in want.items():
        torch.testing.assert_close(getattr(sharded, name).grad, grad)
    (loads,) = sharded.loads
    assert len(loads) == 4 and sum(loads) == 40 * 2  # every token, top-2


def test_experts_that_do_not_split_are_refused(world: None) -> None:
    config = MixtralConfig(hidden_size=8, intermediate_size=8, num_local_experts=3)
    with pytest.raises(ValueError, match="3 experts do not split over --ep 2"):
        ExpertParallel(MixtralSparseMoeBlock(config).experts, dist.group.WORLD, 2, 0)


def test_imbalance_joins_the_ranks_experts_per_forward() -> None:
    # two ranks, one layer, two forwards; each rank holds two experts
    report = imbalance([[[[30, 10], [20, 20]]], [[[20, 20], [25, 15]]]])
    first, second = report["per_forward"]
    assert first["expert_rows"] == [30, 10, 20, 20] and first["expert_max_over_mean"] == 1.5
    assert first["rank_max_over_mean"] == 1.0
    assert second["expert_rows"] == [20, 20, 25, 15] and second["rank_max_over_mean"] == round(40 / 40, 4)
    assert report["expert_max_over_mean"] == {"mean": 1.375, "max": 1.5}

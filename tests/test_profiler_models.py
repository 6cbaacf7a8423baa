"""Model presets: shapes, overrides and the real GPT-2 / BERT-base parameter counts."""

from __future__ import annotations

import pytest
import torch
import transformers  # noqa: F401 - a missing dependency fails, never skips

from chakra_convert_fast.profiler import models

pytestmark = [pytest.mark.torch]

SPECIAL = {"bos": 0, "eos": 0, "pad": 0}


@pytest.mark.parametrize(
    ("model", "size", "on_gpu", "expected"),
    [
        ("gpt2", "auto", True, "base"),
        ("gpt2", "auto", False, "small"),
        ("gpt2", "tiny", True, "tiny"),
        ("gpt2", "gpt2", False, "base"),
        ("bert", "bert-base", False, "base"),
    ],
)
def test_resolve_size(model: str, size: str, on_gpu: bool, expected: str) -> None:
    assert models.resolve_size(model, size, on_gpu) == expected


def test_resolve_size_rejects_the_other_models_name() -> None:
    with pytest.raises(ValueError, match="does not apply"):
        models.resolve_size("bert", "gpt2", False)


def test_overrides_replace_preset_values() -> None:
    shape = models.resolve_shape("gpt2", "tiny", {"n_layer": 3, "hidden": 96, "n_head": None})
    assert (shape.n_layer, shape.hidden, shape.n_head) == (3, 96, 2)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [({"hidden": 65}, "multiple of n_head"), ({"seq_len": 1000}, "exceeds max_positions")],
)
def test_bad_overrides_are_rejected(overrides: dict[str, int | None], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        models.resolve_shape("bert", "tiny", overrides)


@pytest.mark.parametrize(
    ("model", "tokenizer_size", "parameters"),
    [("gpt2", 50257, 124_439_808), ("bert", 1660, 109_514_298)],  # BERT: a vocabulary trained on little text
)
def test_base_presets_have_the_real_sizes(model: str, tokenizer_size: int, parameters: int) -> None:
    shape = models.resolve_shape(model, "base", {})
    with torch.device("meta"):  # no memory, no time: only the shapes matter
        module = models.build_model(model, shape, models.embedding_rows(shape, tokenizer_size), SPECIAL)
    assert models.count_parameters(module) == parameters


def test_small_presets_follow_the_tokenizer() -> None:
    assert models.embedding_rows(models.resolve_shape("bert", "small", {}), 1660) == 1660
    assert models.embedding_rows(models.resolve_shape("bert", "small", {"vocab_size": 4096}), 1660) == 4096
    # a WordPiece vocabulary trained for the run: 1,660 or 1,662 pieces from run to run, the same rows
    small = models.resolve_shape("bert", "small", {})
    assert {models.embedding_rows(small, n, trained=True) for n in (1660, 1662)} == {1664}
    assert models.embedding_rows(small, 1664, trained=True) == 1664
    assert models.embedding_rows(small, 1665, trained=True) == 1728


@pytest.mark.parametrize("model", models.MODELS)
def test_tiny_models_train_one_step(model: str) -> None:
    shape = models.resolve_shape(model, "tiny", {"seq_len": 8})
    module = models.build_model(model, shape, 100, SPECIAL)
    ids = torch.randint(1, 100, (2, shape.seq_len))
    loss = module(input_ids=ids, labels=ids).loss
    loss.backward()
    assert torch.isfinite(loss)


def test_fsdp_alone_shards_on_the_runs_device_type(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--dp fsdp`` with no TP/PP mesh shards over a mesh of the run's device type: left to
    fully_shard, the mesh was the machine's default device (CUDA on a GPU server), and a
    ``--device cpu`` job's ranks past the GPU count failed ("invalid device ordinal")."""
    import torch.distributed as dist
    import torch.distributed.fsdp as fsdp
    from torch._C._distributed_c10d import HashStore

    from chakra_convert_fast.profiler import parallel
    from chakra_convert_fast.profiler.layouts import make_layout

    meshes: list[object] = []
    monkeypatch.setattr(fsdp, "fully_shard", lambda module, mesh=None: meshes.append(mesh))
    module = models.build_model("gpt2", models.resolve_shape("gpt2", "tiny", {}), 100, SPECIAL)
    dist.init_process_group("gloo", store=HashStore(), rank=0, world_size=1)
    try:
        parallel._data_parallel(module, "gpt2", make_layout(1, 1, 1, "fsdp", 1, "1f1b"), None, torch.device("cpu"), [])
    finally:
        dist.destroy_process_group()
    assert len(meshes) == 3  # two blocks, then the whole model
    assert all(getattr(m, "device_type", None) == "cpu" for m in meshes)


def test_pipeline_gradient_all_reduce_takes_tensor_parallel_shards() -> None:
    """``--tp 2 --pp 2``: a stage's gradients are DTensors (tensor-parallel shards) beside plain
    tensors; the flat all-reduce over the data-parallel group reduces each local shard and writes
    it back (it failed: "mixed torch.Tensor and DTensor")."""
    import torch.distributed as dist
    from torch._C._distributed_c10d import HashStore
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    from chakra_convert_fast.profiler import parallel

    dist.init_process_group("gloo", store=HashStore(), rank=0, world_size=1)
    try:
        mesh = init_device_mesh("cpu", (1,))
        module = torch.nn.Linear(4, 2)
        sharded = torch.nn.Parameter(distribute_tensor(torch.ones(2, 4), mesh, [Shard(0)]))
        module.weight = sharded
        module.weight.grad = distribute_tensor(torch.full((2, 4), 3.0), mesh, [Shard(0)])
        module.bias.grad = torch.full((2,), 5.0)
        parallel._all_reduce_gradients(module, dist.group.WORLD)
        assert module.weight.grad.to_local().eq(3.0).all() and module.bias.grad.eq(5.0).all()
    finally:
        dist.destroy_process_group()


def test_pipeline_gradient_all_reduce_frees_its_buffer_whoever_holds_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """The flat buffer of a pipeline stage's gradient all-reduce is freed before the optimizer
    step even while the collective's work object still holds it (gloo's worker thread can drop
    its reference after ``all_reduce`` returns: a 4-rank DDP 2 x PP 2 capture had the buffer live
    through the optimizer step on its first-stage ranks, +12.5 MiB at their peaks, and a rerun of
    the same command did not)."""
    import torch
    import torch.distributed as dist
    from torch._C._distributed_c10d import HashStore

    from chakra_convert_fast.profiler import parallel

    held: list[torch.Tensor] = []
    real_all_reduce = dist.all_reduce

    def holding(tensor: torch.Tensor, *args: object, **kwargs: object) -> object:
        held.append(tensor)  # as a work object not yet dropped by its thread
        return real_all_reduce(tensor, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(dist, "all_reduce", holding)
    dist.init_process_group("gloo", store=HashStore(), rank=0, world_size=1)
    try:
        module = torch.nn.Linear(64, 32)
        module.weight.grad = torch.full((32, 64), 3.0)
        module.bias.grad = torch.full((32,), 5.0)
        parallel._all_reduce_gradients(module, dist.group.WORLD)
    finally:
        dist.destroy_process_group()
    assert module.weight.grad.eq(3.0).all() and module.bias.grad.eq(5.0).all()
    assert len(held) == 1 and held[0].untyped_storage().nbytes() == 0

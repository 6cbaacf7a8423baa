"""``--roofline`` and ``--target accelerator``: the FLOP rules against ``torch.utils.flop_counter``,
the values written on real traces, and bad shapes (no values and a warning, never a crash)."""

from __future__ import annotations

import ast
import copy
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from chakra_convert_fast.converter import ConvertOptions, api
from chakra_convert_fast.converter.convert.roofline import MIN_BYTES
from chakra_convert_fast.converter.schema.opcost import BadShapes, OpClass, base_name, op_class, op_cost

from .clirun import run_cli
from .traces import REAL_TRACES_DIR, load_trace, read_et, write_trace

GPT2 = REAL_TRACES_DIR / "cpu_gpt2_ddp2"
RESNET_MERGED = REAL_TRACES_DIR / "resnet_ddp_synthetic_kineto" / "rank0_merged_by_chakra_trace_link.json.gz"
COMP = 4


def attrs(node: Any) -> dict[str, Any]:
    return {a.name: a for a in node.attr}


def values(node: Any) -> tuple[int, int] | None:
    a = attrs(node)
    if "num_ops" not in a:
        return None
    assert a["num_ops"].WhichOneof("value") == "int64_val" and a["tensor_size"].WhichOneof("value") == "uint64_val"
    return a["num_ops"].int64_val, a["tensor_size"].uint64_val


def counted(node: Any) -> tuple[int, int]:
    """``values`` of a node that must carry them."""
    found = values(node)
    assert found is not None, node.name
    return found


# -- the FLOP rules against torch.utils.flop_counter ------------------------------------------------
def _counted(run: Any) -> int:
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode

    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        run()
    return int(counter.get_total_flops())


def _io(*tensors: Any) -> tuple[list[list[int]], list[str]]:
    names = {"torch.float32": "float", "torch.float16": "c10::Half", "torch.bfloat16": "c10::BFloat16"}
    return [list(t.shape) for t in tensors], [f"Tensor({names[str(t.dtype)]})" for t in tensors]


CASES = [  # (aten op as traced, inputs, output, the torch call flop_counter sees)
    ("mm", lambda t: ((t.randn(64, 32), t.randn(32, 48)),)),
    ("addmm", lambda t: ((t.randn(48), t.randn(64, 32), t.randn(32, 48)),)),
    ("bmm", lambda t: ((t.randn(3, 64, 32), t.randn(3, 32, 16)),)),
    ("baddbmm", lambda t: ((t.randn(3, 64, 16), t.randn(3, 64, 32), t.randn(3, 32, 16)),)),
    ("matmul", lambda t: ((t.randn(2, 3, 64, 32), t.randn(32, 16)),)),
    ("linear", lambda t: ((t.randn(4, 10, 32), t.randn(24, 32), t.randn(24)),)),
    ("convolution", lambda t: ((t.randn(2, 3, 16, 16), t.randn(8, 3, 3, 3)),)),
    ("conv_transpose2d", lambda t: ((t.randn(2, 8, 7, 7), t.randn(8, 4, 3, 3)),)),
    ("scaled_dot_product_attention", lambda t: ((t.randn(2, 4, 32, 16), t.randn(2, 4, 24, 16), t.randn(2, 4, 24, 8)),)),
]


def _call(name: str, args: tuple[Any, ...]) -> Any:
    import torch
    import torch.nn.functional as F

    calls: dict[str, Callable[..., Any]] = {
        "mm": torch.mm,
        "addmm": torch.addmm,
        "bmm": torch.bmm,
        "baddbmm": torch.baddbmm,
        "matmul": torch.matmul,
        "linear": F.linear,
        "convolution": lambda x, w: F.conv2d(x, w, padding=1),
        "conv_transpose2d": lambda x, w: F.conv_transpose2d(x, w, stride=2),
        "scaled_dot_product_attention": F.scaled_dot_product_attention,
    }
    return calls[name](*args)


@pytest.mark.torch
@pytest.mark.parametrize("name,make", CASES, ids=[c[0] for c in CASES])
def test_flops_match_torch_flop_counter(name: str, make: Any) -> None:
    torch = pytest.importorskip("torch")
    (args,) = make(torch)
    out = _call(name, args)
    in_shapes, in_types = _io(*args)
    out_shapes, out_types = _io(out)
    cost = op_cost(f"aten::{name}", in_shapes, in_types, out_shapes, out_types)
    assert cost.flops == _counted(lambda: _call(name, args)) > 0
    assert cost.bytes == sum(t.numel() * t.element_size() for t in (*args, out))


def test_attention_kernels_and_backward() -> None:
    """The flash/efficient kernels take the same q, k, v as sdpa; the backward counts twice the forward."""
    q, k, v = [[2, 4, 32, 16]] * 3
    forward = 2 * 2 * 4 * 32 * 32 * 16 * 2
    for name in (
        "aten::_scaled_dot_product_flash_attention",
        "aten::_scaled_dot_product_efficient_attention",
        "aten::_flash_attention_forward",
        "aten::_cudnn_attention_forward",  # the op that launches cuDNN's kernel (an H200 capture, torch 2.11)
        "aten::_scaled_dot_product_flash_attention_for_cpu",
    ):
        assert op_cost(name, [q, k, v], ["Tensor(c10::BFloat16)"] * 3, [q], ["Tensor(c10::BFloat16)"]).flops == forward
    for name in ("aten::_scaled_dot_product_flash_attention_backward", "aten::_cudnn_attention_backward"):
        grad = op_cost(name, [q, q, k, v], ["Tensor(c10::BFloat16)"] * 4, [q, k, v], ["Tensor(c10::BFloat16)"] * 3)
        assert grad.flops == 2 * forward


def test_convolution_backward_counts_input_and_weight_gradients() -> None:
    torch = pytest.importorskip("torch")
    x = torch.randn(2, 3, 16, 16, requires_grad=True)
    w = torch.randn(8, 3, 3, 3, requires_grad=True)
    y = torch.nn.functional.conv2d(x, w, padding=1)
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        y.backward(torch.ones_like(y))
    cost = op_cost(
        "aten::convolution_backward",
        [list(y.shape), list(x.shape), list(w.shape)],
        ["Tensor(float)"] * 3,
        [list(x.shape), list(w.shape)],
        ["Tensor(float)"] * 2,
    )
    assert cost.flops == counter.get_total_flops()


def test_element_rules_and_names() -> None:
    shape = [4, 128, 256]
    n = math.prod(shape)
    t = "Tensor(float)"
    assert op_cost("aten::add_", [shape, shape, []], [t, t, "Int"], [shape], [t]) == (OpClass.ELEMENTWISE, n, 12 * n)
    assert op_cost("aten::gelu", [shape], [t], [shape], [t]).flops == 8 * n
    assert op_cost("aten::_softmax", [shape, [], []], [t, "Int", "Bool"], [shape], [t]).flops == 5 * n
    assert (
        op_cost(
            "aten::native_layer_norm",
            [shape, [[]], [256], [256], []],
            [t, "GenericList[Int]", t, t, "Double"],
            [shape],
            [t],
        ).flops
        == 8 * n
    )
    assert op_cost("aten::sum", [shape], [t], [[256]], [t]).flops == n
    emb = op_cost("aten::embedding", [[50257, 256], [4, 128]], [t, "Tensor(long int)"], [shape], [t])
    assert emb == (OpClass.EMBEDDING, 0, 4 * 128 * 8 + 2 * 4 * n)  # not the whole table
    assert op_cost("aten::view", [shape, [[]]], [t, "GenericList[Int]"], [shape], [t]) == (OpClass.NONE, 0, 0)
    cat = op_cost(
        "aten::cat", [[[2, 3], [4, 3]], []], ["GenericList[Tensor(float),Tensor(c10::Half)]", "Int"], [[6, 3]], [t]
    )
    assert cat.bytes == 6 * 4 + 12 * 2 + 18 * 4
    assert base_name("aten::add.Tensor") == "add" and op_class("aten::_index_put_impl_") is OpClass.COPY
    assert op_class("autograd::engine::evaluate_function: MmBackward0") is OpClass.UNKNOWN


@pytest.mark.parametrize(
    "shapes,types",
    [
        ([5], ["Tensor(float)"]),  # a shape that is not a list
        ([["a", 2]], ["Tensor(float)"]),  # sizes that are not integers
        ([[2, 3]], []),  # dtypes missing
        ([[2, 3]], ["Tensor()"]),  # a dtype missing inside
        ([[2, 3]], ["Tensor(quantum float)"]),  # a dtype of unknown size
    ],
)
def test_unreadable_shapes_raise(shapes: list[Any], types: list[Any]) -> None:
    with pytest.raises(BadShapes):
        op_cost("aten::mm", shapes, types, [[2, 2]], ["Tensor(float)"])


# -- real traces -------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def gpt2_outputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Rank 0 of the GPT-2 pair converted --astra-sim, + --roofline, + --target accelerator."""
    tmp = tmp_path_factory.mktemp("roofline")
    outputs = {}
    for label, options in (
        ("astra", ConvertOptions(astra_sim=True, rank=0)),
        ("roofline", ConvertOptions(astra_sim=True, rank=0, roofline=True)),
        ("accelerator", ConvertOptions(astra_sim=True, rank=0, roofline=True, target="accelerator")),
        ("host", ConvertOptions(astra_sim=True, rank=0, roofline=True, target="accelerator", host_time="captured")),
    ):
        outputs[label] = tmp / f"{label}.0.et"
        result = api.convert_pair(
            GPT2 / "rank0_host.json.gz", GPT2 / "rank0_device.json.gz", outputs[label], options, rank=0
        )
        if label != "astra":
            summary = result.conversion.roofline
            assert summary is not None and summary.unreadable == 0 and not summary.warnings()
    return outputs


def test_every_compute_node_gets_values_and_nothing_else_changes(gpt2_outputs: dict[str, Path]) -> None:
    _, plain = read_et(gpt2_outputs["astra"])
    _, costed = read_et(gpt2_outputs["roofline"])
    assert len(plain) == len(costed)
    work = 0
    for before, after in zip(plain, costed, strict=True):
        got = values(after)
        if after.type != COMP:
            assert got is None
        else:
            assert got is not None
            num_ops, tensor_size = got
            assert num_ops >= 1 and tensor_size >= 1  # ASTRA-sim: no 0/0, no skipped node
            if (num_ops, tensor_size) != (1, 1):
                work += 1
                assert tensor_size >= MIN_BYTES  # >= 1 ns at up to 16 TB/s
        stripped = copy.deepcopy(after)
        del stripped.attr[:]
        stripped.attr.extend(a for a in after.attr if a.name not in ("num_ops", "tensor_size"))
        assert stripped == before
    assert work > 300


def test_matmul_nodes_carry_their_products(gpt2_outputs: dict[str, Path]) -> None:
    """Each aten::mm / addmm / bmm node's num_ops is 2 m k n of its recorded shapes; aten::linear
    and aten::matmul (wrappers over them) and views keep the minimum."""
    _, nodes = read_et(gpt2_outputs["roofline"])
    by_name: dict[str, list[tuple[int, int]]] = {}
    seen = 0
    for node in nodes:
        got = values(node)
        if got is None:
            continue
        by_name.setdefault(node.name, []).append(got)
        if node.name in ("aten::mm", "aten::bmm"):
            ins, (out, *_) = ast.literal_eval(node.inputs.shapes), ast.literal_eval(node.outputs.shapes)
            assert got[0] == 2 * math.prod(out) * ins[0][-1]
            seen += 1
    assert seen > 10
    assert all(v == (1, 1) for v in by_name["aten::linear"] + by_name["aten::view"] + by_name["aten::matmul"])
    assert all(v[0] > 1000 for v in by_name["aten::addmm"])  # the product lives in addmm, not in its bias copy


def test_accelerator_target(gpt2_outputs: dict[str, Path]) -> None:
    """Nodes that do work become non-CPU ops; the others stay CPU ops without duration."""
    _, nodes = read_et(gpt2_outputs["accelerator"])
    _, costed = read_et(gpt2_outputs["roofline"])
    accelerated = 0
    for node, before in zip(nodes, costed, strict=True):
        if node.type != COMP:
            continue
        assert values(node) == values(before)
        is_cpu = attrs(node)["is_cpu_op"].bool_val
        if values(node) == (1, 1):
            assert is_cpu and node.duration_micros == 0
        else:
            assert not is_cpu and node.duration_micros == before.duration_micros
            accelerated += 1
    assert accelerated > 300


def test_host_time_captured_keeps_the_no_work_nodes_durations(gpt2_outputs: dict[str, Path]) -> None:
    """--host-time captured: the accelerator target's file, but the CPU ops keep their durations."""
    _, nodes = read_et(gpt2_outputs["host"])
    _, accelerated = read_et(gpt2_outputs["accelerator"])
    _, costed = read_et(gpt2_outputs["roofline"])
    kept = 0
    for node, other, before in zip(nodes, accelerated, costed, strict=True):
        if node.type == COMP and attrs(node)["is_cpu_op"].bool_val:
            assert values(node) == (1, 1) and node.duration_micros == before.duration_micros
            kept += node.duration_micros > 0
            other.duration_micros = node.duration_micros
        assert node == other  # nothing else differs
    assert kept > 1000


def test_gpu_kernels_share_their_launchers_cost(tmp_path: Path) -> None:
    """ResNet (GPU kernels under their CPU ops): each launcher's cost is split between its kernels
    by their durations; the launcher keeps the minimum."""
    out = tmp_path / "resnet.et"
    result = api.convert(RESNET_MERGED, out, ConvertOptions(astra_sim=True, roofline=True))
    assert result.roofline is not None and result.roofline.kernels > 2000
    _, nodes = read_et(out)
    by_id = {n.id: n for n in nodes}
    kernels: dict[int, list[Any]] = {}
    for node in nodes:
        if node.type == COMP and not attrs(node)["is_cpu_op"].bool_val:
            assert counted(node)[1] >= MIN_BYTES
            if node.ctrl_deps:
                kernels.setdefault(node.ctrl_deps[0], []).append(node)
    convs = [parent for parent in kernels if by_id[parent].name == "aten::cudnn_convolution"]
    assert convs
    for parent in convs:
        assert values(by_id[parent]) == (1, 1)
        children = kernels[parent]
        flops = sum(counted(k)[0] for k in children)
        assert flops >= 1e6
        if len(children) > 1 and len({k.duration_micros for k in children}) > 1:
            longest = max(children, key=lambda k: k.duration_micros)
            assert counted(longest)[0] == max(counted(k)[0] for k in children)


def test_unreadable_shapes_give_no_values_and_a_warning(tmp_path: Path) -> None:
    trace = load_trace(GPT2 / "rank0_merged_by_chakra_trace_link.json.gz")
    broken: dict[int, dict[str, Any]] = {}
    for node in trace["nodes"]:
        if node["name"] == "aten::mm" and len(broken) < 2:
            if not broken:
                node["inputs"]["shapes"][0] = 7  # not a list
            else:
                node["inputs"]["types"] = []  # dtypes missing
            broken[node["id"]] = node
    path = write_trace(trace, tmp_path / "broken.json")
    result = api.convert(path, tmp_path / "out.et", ConvertOptions(astra_sim=True, roofline=True))
    assert result.roofline is not None and result.roofline.unreadable == 2
    (warning,) = result.roofline.warnings()
    assert "2 compute node(s)" in warning and "not a list" in warning
    _, nodes = read_et(tmp_path / "out.et")
    assert {n.id for n in nodes if n.type == COMP and values(n) is None} == set(broken)
    done = run_cli("convert", path, tmp_path / "cli.et", "--astra-sim", "--roofline")
    assert done.returncode == 0 and "warning: --roofline: 2 compute node(s)" in done.stderr
    assert "Traceback" not in done.stderr


def test_target_accelerator_needs_roofline(tmp_path: Path) -> None:
    done = run_cli(
        "convert", GPT2 / "rank0_merged_by_chakra_trace_link.json.gz", tmp_path / "x.et", "--target", "accelerator"
    )
    assert done.returncode == 2 and "--target accelerator needs --roofline" in done.stderr
    assert not (tmp_path / "x.et").exists()
    with pytest.raises(ValueError, match="`target` accelerator needs `roofline`"):
        ConvertOptions(target="accelerator")
    done = run_cli(
        "convert",
        GPT2 / "rank0_merged_by_chakra_trace_link.json.gz",
        tmp_path / "y.et",
        "--roofline",
        "--target",
        "accelerator",
    )
    assert done.returncode == 0 and "--roofline:" in done.stderr and "accelerator" in done.stderr


def test_host_time_needs_the_accelerator_target(tmp_path: Path) -> None:
    done = run_cli(
        "convert",
        GPT2 / "rank0_merged_by_chakra_trace_link.json.gz",
        tmp_path / "x.et",
        "--roofline",
        "--host-time",
        "captured",
    )
    assert done.returncode == 2 and "--host-time captured needs --target accelerator" in done.stderr
    assert not (tmp_path / "x.et").exists()
    with pytest.raises(ValueError, match="`host_time` captured needs `target` accelerator"):
        ConvertOptions(roofline=True, host_time="captured")
    with pytest.raises(ValueError, match=r"`host_time` .measured.: one of none, captured"):
        ConvertOptions(roofline=True, target="accelerator", host_time="measured")
    done = run_cli(
        "convert",
        GPT2 / "rank0_merged_by_chakra_trace_link.json.gz",
        tmp_path / "y.et",
        "--roofline",
        "--target",
        "accelerator",
        "--host-time",
        "captured",
    )
    assert done.returncode == 0 and "as CPU ops with their captured duration" in done.stderr, done.stderr


# -- round three (issue 29): no accelerator node without values -------------------------------------
HOST_102 = Path(__file__).parent / "data" / "traces" / "host" / "chakra_1.0.2_host_2rank.json.gz"


def assert_every_accelerator_op_has_values(path: Path) -> list[Any]:
    """Every non-CPU compute node carries num_ops and tensor_size; returns the CPU compute nodes."""
    _, nodes = read_et(path)
    cpu = []
    for node in nodes:
        if node.type != COMP:
            continue
        if attrs(node)["is_cpu_op"].bool_val:
            cpu.append(node)
        else:
            assert values(node) is not None, node
    return cpu


def test_unreadable_shapes_stay_replayed_cpu_ops_with_target_accelerator(tmp_path: Path) -> None:
    """Issue 29: chakra_1.0.2_host_2rank's record_param_comms nodes (shapes that do not match their
    types) were written as accelerator ops without num_ops, exit 0; ASTRA-sim then never finished.
    They stay CPU ops, replayed for their captured durations, and the warning says so."""
    done = run_cli("convert", HOST_102, tmp_path / "h.et", "--astra-sim", "--roofline", "--target", "accelerator")
    assert done.returncode == 0, done.stderr
    assert (
        "warning: --roofline: 10 compute node(s) have shapes or dtypes that cannot be read and get no "
        "num_ops/tensor_size (with --target accelerator they stay CPU ops, replayed for their captured "
        "durations"
    ) in done.stderr
    _, captured = read_et(_converted(tmp_path, ConvertOptions(astra_sim=True)))
    durations = {node.id: node.duration_micros for node in captured}
    replayed = [n for n in assert_every_accelerator_op_has_values(tmp_path / "h.et") if values(n) is None]
    assert len(replayed) == 10 and {n.name for n in replayed} == {"record_param_comms"}
    assert all(n.duration_micros == durations[n.id] for n in replayed)  # as captured


def _converted(tmp_path: Path, options: ConvertOptions) -> Path:
    out = tmp_path / "captured.et"
    api.convert(HOST_102, out, options)
    return out


@pytest.mark.slow
def test_kernels_of_an_unreadable_launcher_are_replayed_cpu_ops(tmp_path: Path) -> None:
    """A GPU kernel whose launcher's shapes cannot be read has no cost either: with --target
    accelerator it is written as a CPU op with its measured duration, never a non-CPU op without
    num_ops."""
    trace = load_trace(RESNET_MERGED)
    broken: set[int] = set()
    for node in trace["nodes"]:
        if node["name"] == "aten::cudnn_convolution" and not broken:
            node["inputs"]["shapes"][0] = 7  # not a list
            broken.add(node["id"])
    path = write_trace(trace, tmp_path / "broken.json")
    out = tmp_path / "out.et"
    result = api.convert(path, out, ConvertOptions(astra_sim=True, roofline=True, target="accelerator"))
    assert result.roofline is not None and result.roofline.unreadable >= 2
    cpu = assert_every_accelerator_op_has_values(out)
    kernels = [n for n in cpu if n.ctrl_deps and n.ctrl_deps[0] in broken]
    assert kernels and all(values(k) is None and k.duration_micros > 0 for k in kernels)

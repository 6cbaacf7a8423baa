"""What an operator costs on a roofline: FLOPs and bytes from its recorded shapes and dtypes.

A host trace records, for each op, its inputs' and outputs' ``shapes`` and ``types`` (e.g.
``Tensor(float)``, ``GenericList[Tensor(float),Tensor(float)]``). ``op_cost`` turns them into
``(num_ops, tensor_size)``: FLOPs, and bytes read + written (every tensor input and output once,
at its dtype's size). The rules are a table: an op name (``aten::`` prefix and a trailing ``_``
of in-place variants dropped) maps to a class, each class to one formula:

========== ========================================================= ==================================
class      FLOPs                                                     bytes
========== ========================================================= ==================================
matmul     ``2 m k n`` (x batch): mm, addmm, bmm, baddbmm, matmul,   inputs + outputs
           linear (bias not counted, as ``torch.utils.flop_counter``)
conv       ``2 N prod(out spatial) prod(weight)`` (transposed: input inputs + outputs
           spatial); backward 2x forward
attention  ``2 b h s_q s_k (d + d_v)``; backward 2x (q, k, v grads)  inputs + outputs
embedding  0 (a gather)                                              indices + 2 x output (rows read,
                                                                     output written)
norm       8 per input element (layer/batch/group/RMS norm; back 10) inputs + outputs
softmax    5 per element (log_softmax, softmax; backward 4)          inputs + outputs
elementwise k per output element (k from the table: add 1, gelu 8,  inputs + outputs
           ...)
reduction  1 per input element (sum, mean, max, nll_loss, ...)       inputs + outputs
copy       0 (copy_, clone, cat, index_select, ...)                  inputs + outputs
none       views and allocations: no work (view, reshape, empty,     -
           as_strided, t, expand, detach, ...)
unknown    any other op: 0 (treated as moving its tensors)           inputs + outputs
========== ========================================================= ==================================

Shapes or types that cannot be read (a shape that is not a list, a dtype missing, an unknown
dtype) raise ``BadShapes``: the caller gives that node no roofline values and warns.
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Callable, Sequence
from enum import Enum
from typing import Any, NamedTuple


class OpClass(str, Enum):
    MATMUL = "matmul"
    CONV = "conv"
    ATTENTION = "attention"
    EMBEDDING = "embedding"
    NORM = "norm"
    SOFTMAX = "softmax"
    ELEMENTWISE = "elementwise"
    REDUCTION = "reduction"
    COPY = "copy"
    NONE = "none"
    UNKNOWN = "unknown"


class BadShapes(ValueError):
    """An op's shapes or dtypes cannot be read (the node gets no roofline values)."""


class Tensor(NamedTuple):
    shape: tuple[int, ...]
    itemsize: int

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * self.itemsize


class Cost(NamedTuple):
    op_class: OpClass
    flops: int
    bytes: int


#: bytes per element of each dtype as the host trace spells it inside ``Tensor(...)``.
DTYPE_BYTES: dict[str, int] = {
    "float": 4,
    "double": 8,
    "Half": 2,
    "BFloat16": 2,
    "long int": 8,
    "long": 8,
    "int": 4,
    "short int": 2,
    "short": 2,
    "signed char": 1,
    "unsigned char": 1,
    "bool": 1,
    "complex<float>": 8,
    "complex<double>": 16,
    "complex<c10::Half>": 4,
    "Float8_e4m3fn": 1,
    "Float8_e5m2": 1,
    "Float8_e4m3fnuz": 1,
    "Float8_e5m2fnuz": 1,
    "unsigned short": 2,
    "unsigned int": 4,
    "unsigned long": 8,
    "long long": 8,
    "unsigned long long": 8,
    "nullptr (uninitialized)": 0,  # an undefined tensor: no data
}  # names as c10's C++ types print them, without their c10:: prefix (older traces write "long")

_NONE = (
    "view",
    "_unsafe_view",
    "reshape",
    "_reshape_alias",
    "as_strided",
    "t",
    "transpose",
    "permute",
    "expand",
    "expand_as",
    "squeeze",
    "unsqueeze",
    "slice",
    "select",
    "narrow",
    "split",
    "split_with_sizes",
    "chunk",
    "unbind",
    "detach",
    "alias",
    "resolve_conj",
    "resolve_neg",
    "lift_fresh",
    "empty",
    "empty_strided",
    "empty_like",
    "new_empty",
    "new_empty_strided",
    "result_type",
    "set_",
    "resize_",
    "_local_scalar_dense",
    "item",
    "numpy_T",
    "contiguous",
    "to",
    "type_as",
    "view_as",
    "unflatten",
    "flatten",
    "movedim",
    "diagonal",
    "scalar_tensor",
    "is_nonzero",
    "size",
    "stride",
    "record_stream",
)
_COPY = (
    "copy",
    "clone",
    "_to_copy",
    "cat",
    "stack",
    "index_select",
    "gather",
    "scatter",
    "index",
    "index_put",
    "_index_put_impl",
    "masked_select",
    "repeat",
    "roll",
    "flip",
    "tril",
    "triu",
    "zeros",
    "zeros_like",
    "ones",
    "ones_like",
    "full",
    "full_like",
    "fill",
    "zero",
    "arange",
    "new_zeros",
    "new_ones",
    "new_full",
    "constant_pad_nd",
    "pad",
    "_unsafe_index",
    "slice_backward",
    "select_backward",
)
_REDUCTION = (
    "sum",
    "mean",
    "max",
    "min",
    "amax",
    "amin",
    "argmax",
    "argmin",
    "norm",
    "linalg_vector_norm",
    "var",
    "std",
    "var_mean",
    "prod",
    "any",
    "all",
    "nll_loss_forward",
    "nll_loss_backward",
    "nll_loss",
    "nll_loss_nd",
    "nll_loss2d_forward",
    "_foreach_norm",
    "count_nonzero",
    "cumsum",
)
#: elementwise ops and their FLOPs per output element (others of this class: 1)
_ELEMENTWISE: dict[str, int] = {
    "add": 1,
    "sub": 1,
    "rsub": 1,
    "mul": 1,
    "div": 1,
    "neg": 1,
    "abs": 1,
    "maximum": 1,
    "minimum": 1,
    "clamp": 1,
    "clamp_min": 1,
    "clamp_max": 1,
    "where": 1,
    "masked_fill": 1,
    "eq": 1,
    "ne": 1,
    "lt": 1,
    "le": 1,
    "gt": 1,
    "ge": 1,
    "logical_not": 1,
    "logical_and": 1,
    "logical_or": 1,
    "bitwise_not": 1,
    "reciprocal": 1,
    "sign": 1,
    "relu": 1,
    "threshold_backward": 1,
    "square": 1,
    "pow": 1,
    "sqrt": 1,
    "rsqrt": 1,
    "exp": 1,
    "log": 1,
    "sin": 1,
    "cos": 1,
    "addcmul": 2,
    "addcdiv": 2,
    "lerp": 2,
    "tanh": 4,
    "tanh_backward": 2,
    "sigmoid": 4,
    "sigmoid_backward": 2,
    "silu": 5,
    "silu_backward": 6,
    "gelu": 8,
    "gelu_backward": 12,
    "erf": 4,
    "bernoulli": 2,
    "dropout": 2,
    "native_dropout": 2,
    "native_dropout_backward": 1,
    "softplus": 4,
    "hardtanh": 1,
    "leaky_relu": 1,
    "elu": 4,
    "mse_loss": 3,
    "_foreach_add": 1,
    "_foreach_mul": 1,
    "_foreach_div": 1,
    "_foreach_sqrt": 1,
    "_foreach_addcmul": 2,
    "_foreach_addcdiv": 2,
    "_foreach_lerp": 2,
    "_foreach_sub": 1,
    "_fused_adamw": 12,
    "_fused_adam": 12,
    "_fused_sgd": 2,
    "fmod": 1,
    "remainder": 1,
    "floor": 1,
    "ceil": 1,
    "round": 1,
}
_NORM: dict[str, int] = {
    "native_layer_norm": 8,
    "layer_norm": 8,
    "native_batch_norm": 8,
    "batch_norm": 8,
    "_batch_norm_impl_index": 8,
    "_native_batch_norm_legit": 8,
    "_native_batch_norm_legit_no_training": 8,
    "cudnn_batch_norm": 8,
    "native_group_norm": 8,
    "group_norm": 8,
    "rms_norm": 6,
    "_fused_rms_norm": 6,
    "native_layer_norm_backward": 10,
    "native_batch_norm_backward": 10,
    "cudnn_batch_norm_backward": 10,
    "native_group_norm_backward": 10,
    "_fused_rms_norm_backward": 8,
    "instance_norm": 8,
}
_SOFTMAX: dict[str, int] = {
    "softmax": 5,
    "_softmax": 5,
    "log_softmax": 5,
    "_log_softmax": 5,
    "_softmax_backward_data": 4,
    "_log_softmax_backward_data": 4,
    "cross_entropy_loss": 6,
}
_MATMUL = (
    "mm",
    "addmm",
    "bmm",
    "baddbmm",
    "matmul",
    "linear",
    "_addmm_activation",
    "addbmm",
    "mv",
    "addmv",
    "dot",
    "_scaled_mm",
)
_CONV = (
    "convolution",
    "_convolution",
    "conv1d",
    "conv2d",
    "conv3d",
    "cudnn_convolution",
    "mkldnn_convolution",
    "convolution_overrideable",
    "_slow_conv2d_forward",
    "conv_transpose1d",
    "conv_transpose2d",
    "conv_transpose3d",
    "cudnn_convolution_transpose",
    "_convolution_mode",
    "thnn_conv2d",
    "_nnpack_spatial_convolution",
    "convolution_backward",
    "convolution_backward_overrideable",
)
_ATTENTION = (
    "scaled_dot_product_attention",
    "_scaled_dot_product_attention_math",
    "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_cudnn_attention",
    "_flash_attention_forward",
    "_efficient_attention_forward",
    "_cudnn_attention_forward",  # under _scaled_dot_product_cudnn_attention on Hopper (torch 2.11): launches the kernel
    "_scaled_dot_product_fused_attention_overrideable",
)
_ATTENTION_BACKWARD = (
    "_scaled_dot_product_flash_attention_backward",
    "_scaled_dot_product_efficient_attention_backward",
    "_scaled_dot_product_cudnn_attention_backward",
    "_flash_attention_backward",
    "_efficient_attention_backward",
    "_cudnn_attention_backward",
    "_scaled_dot_product_flash_attention_for_cpu_backward",
    "_scaled_dot_product_fused_attention_overrideable_backward",
)
_EMBEDDING = (
    "embedding",
    "embedding_dense_backward",
    "embedding_backward",
    "_embedding_bag",
    "embedding_bag",
    "_embedding_bag_backward",
)

_TABLE: dict[str, OpClass] = {}
for _names, _cls in (
    (_NONE, OpClass.NONE),
    (_COPY, OpClass.COPY),
    (_REDUCTION, OpClass.REDUCTION),
    (tuple(_ELEMENTWISE), OpClass.ELEMENTWISE),
    (tuple(_NORM), OpClass.NORM),
    (tuple(_SOFTMAX), OpClass.SOFTMAX),
    (_MATMUL, OpClass.MATMUL),
    (_CONV, OpClass.CONV),
    (_ATTENTION + _ATTENTION_BACKWARD, OpClass.ATTENTION),
    (_EMBEDDING, OpClass.EMBEDDING),
):
    for _name in _names:
        _TABLE[_name] = _cls

_PREFIXES = ("aten::", "prims::", "torch::")


def base_name(name: str) -> str:
    """``aten::add_`` -> ``add``: the table's key for an op name."""
    for prefix in _PREFIXES:
        if name.startswith(prefix):
            name = name[len(prefix) :]
            break
    else:
        return name
    name = name.split(".", 1)[0]  # an overload: aten::add.Tensor
    if name.endswith("_") and name not in _TABLE and name[:-1] in _TABLE:
        name = name[:-1]  # the in-place variant
    return name


def op_class(name: str) -> OpClass:
    """The class of an op by its name; ``UNKNOWN`` for names not in the table."""
    return _TABLE.get(base_name(name), OpClass.UNKNOWN)


# -- shapes and types -----------------------------------------------------------------------------
_TENSOR = re.compile(r"Tensor\(([^()]*(?:\([^()]*\))?[^()]*)\)")


def parse_list(text: str, what: str) -> list[Any]:
    """The Python list whose ``str()`` the .et holds (the reference writes ``str(shapes)``)."""
    if not text:
        return []
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        raise BadShapes(f"{what} {text[:60]!r} is not a list") from None
    if not isinstance(value, list):
        raise BadShapes(f"{what} {text[:60]!r} is not a list")
    return value


def tensors(shapes: Sequence[Any], types: Sequence[Any]) -> list[Tensor]:
    """The tensors among one side's values (tensor lists flattened), with their sizes."""
    if len(types) != len(shapes):
        raise BadShapes(f"{len(shapes)} shapes but {len(types)} dtypes")
    out: list[Tensor] = []
    for shape, type_name in zip(shapes, types, strict=True):
        if not isinstance(type_name, str):
            raise BadShapes(f"dtype {type_name!r} is not a string")
        if "Tensor" not in type_name:
            continue
        dtypes = _TENSOR.findall(type_name)
        if not dtypes:
            raise BadShapes(f"dtype missing in {type_name!r}")
        if type_name.startswith("Tensor("):
            out.append(_tensor(shape, dtypes[0]))
        else:  # a list of tensors: one shape each
            if not isinstance(shape, list) or len(shape) != len(dtypes):
                raise BadShapes(f"shape {shape!r} does not match {type_name!r}")
            out.extend(_tensor(s, d) for s, d in zip(shape, dtypes, strict=True))
    return out


def dtype_bytes(name: str) -> int | None:
    """Bytes an element of a dtype as a trace names it (``c10::BFloat16``, ``BFloat16``, ``float``);
    None for one without a size here."""
    return DTYPE_BYTES.get(name.strip().removeprefix("c10::"))


def _tensor(shape: Any, dtype: str) -> Tensor:
    if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
        raise BadShapes(f"shape {shape!r} of a {dtype} tensor is not a list of sizes")
    itemsize = dtype_bytes(dtype)
    if itemsize is None:
        raise BadShapes(f"unknown dtype {dtype!r}")
    return Tensor(tuple(shape), itemsize)


# -- the formulas -----------------------------------------------------------------------------------
def matmul_flops(name: str, ins: list[Tensor], outs: list[Tensor]) -> int:
    """2 m k n per output matrix: from the operand the op multiplies (k) and its output."""
    base = base_name(name)
    mats = [t for t in ins if len(t.shape) >= 1]
    if base in ("addmm", "baddbmm", "_addmm_activation", "addbmm", "addmv") and len(mats) >= 3:
        mats = mats[1:]  # the added term first
    if len(mats) < 2:
        return 0
    a, b = mats[0], mats[1]
    if base == "linear":  # x [..., k], weight [n, k]
        return 2 * a.numel * (b.shape[0] if len(b.shape) == 2 else 1)
    k = a.shape[-1] if a.shape else 1
    if outs:
        out_elems = outs[0].numel
        if base == "addbmm":  # batches summed into one matrix
            out_elems *= a.shape[0] if len(a.shape) == 3 else 1
        return 2 * out_elems * k
    return 2 * a.numel * (b.shape[-1] if len(b.shape) >= 2 else 1)


def conv_flops(name: str, ins: list[Tensor], outs: list[Tensor]) -> int:
    """``torch.utils.flop_counter``'s rule: 2 N prod(spatial) prod(weight), spatial of the output
    (of the input when transposed); the backward 2x (input and weight gradients)."""
    base = base_name(name)
    if base.startswith("convolution_backward"):
        if len(ins) < 3:
            return 0
        grad, x, w = ins[0], ins[1], ins[2]
        return 2 * _conv(x.shape, w.shape, grad.shape, False)
    if len(ins) < 2 or not outs:
        return 0
    x, w = ins[0], ins[1]
    return _conv(x.shape, w.shape, outs[0].shape, "transpose" in base)


def _conv(x: tuple[int, ...], w: tuple[int, ...], out: tuple[int, ...], transposed: bool) -> int:
    if len(x) < 2 or len(w) < 2:
        return 0
    spatial = (x if transposed else out)[2:]
    return 2 * x[0] * math.prod(spatial) * math.prod(w)


def attention_flops(name: str, ins: list[Tensor], outs: list[Tensor]) -> int:
    """q k^T and (attention) v: ``2 b h s_q s_k d + 2 b h s_q s_k d_v``; the backward twice that."""
    backward = base_name(name) in _ATTENTION_BACKWARD
    qkv = ins[1:4] if backward else ins[0:3]
    if len(qkv) < 3 or any(len(t.shape) < 2 for t in qkv):
        return 0
    q, k, v = (t.shape for t in qkv)
    batch_heads = math.prod(q[:-2])
    s_q, d, s_k, d_v = q[-2], q[-1], k[-2], v[-1]
    forward = 2 * batch_heads * s_q * s_k * d + 2 * batch_heads * s_q * s_k * d_v
    return 2 * forward if backward else forward


_PER_ELEMENT = {OpClass.ELEMENTWISE: _ELEMENTWISE, OpClass.NORM: _NORM, OpClass.SOFTMAX: _SOFTMAX}


def op_cost(
    name: str, in_shapes: Sequence[Any], in_types: Sequence[Any], out_shapes: Sequence[Any], out_types: Sequence[Any]
) -> Cost:
    """FLOPs and bytes of one op; raises ``BadShapes`` when its shapes/dtypes cannot be read."""
    cls = op_class(name)
    if cls is OpClass.NONE:
        return Cost(cls, 0, 0)
    ins, outs = tensors(in_shapes, in_types), tensors(out_shapes, out_types)
    moved = sum(t.nbytes for t in ins) + sum(t.nbytes for t in outs)
    flops = 0
    rule = _FLOPS.get(cls)
    if rule is not None:
        flops = rule(name, ins, outs)
    elif cls in _PER_ELEMENT:
        per = _PER_ELEMENT[cls].get(base_name(name), 1)
        flops = per * _elements(name, ins if cls is OpClass.NORM else outs or ins)
    elif cls is OpClass.REDUCTION:
        flops = sum(t.numel for t in ins)
    if cls is OpClass.EMBEDDING:
        moved = _embedding_bytes(name, ins, outs)
        if base_name(name) != "embedding":
            flops = sum(t.numel for t in ins[:1])  # the backward adds each gradient row in
    return Cost(cls, flops, moved)


def _elements(name: str, side: list[Tensor]) -> int:
    """The elements an op computes: its largest tensor (its result; for norms, the input), or
    every tensor of a ``_foreach_``/``_fused_`` op's lists."""
    if base_name(name).startswith(("_foreach", "_fused")):
        return sum(t.numel for t in side)
    return max((t.numel for t in side), default=0)


def _embedding_bytes(name: str, ins: list[Tensor], outs: list[Tensor]) -> int:
    if base_name(name) == "embedding" and len(ins) >= 2 and outs:
        return ins[1].nbytes + 2 * outs[0].nbytes  # indices, the rows gathered, the output
    return sum(t.nbytes for t in ins) + sum(t.nbytes for t in outs)


_FLOPS: dict[OpClass, Callable[[str, list[Tensor], list[Tensor]], int]] = {
    OpClass.MATMUL: matmul_flops,
    OpClass.CONV: conv_flops,
    OpClass.ATTENTION: attention_flops,
}

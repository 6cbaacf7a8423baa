"""Device profiles: what a GPU (or a CPU) reaches per op class, by shape and dtype, as a JSON file.

ASTRA-sim's roofline times a kernel at the datasheet's peak: on the committed H200 captures GPU
kernels reach 0.1-0.9 of it depending on the class (``bench/results/gpu.md``). A device profile
holds what the device *measured* instead: for each class of op, points ``(dtype, shape, us)``
(the time of the op's kernels at that shape), and what the host costs per op and per kernel
launch. ``predict`` interpolates between the points by shape; the what-if (``kineto/whatif.py``)
times each kernel from it. The format (``docs/device-profiles.md``), version 1::

    {"format": "chakra-device-profile", "version": 1,
     "device": "NVIDIA H200", "backend": "cuda",
     "peak_tflops": 989.0, "mem_bandwidth_gbps": 4800.0,      # optional: the roofline fallback
     "made": {"by": "...", "date": "...", "torch": "...", "notes": "..."},
     "host": {"op_us": 1.8, "launch_us": 10.5},               # per host op, per runtime call
     "gpu": {"kernel_gap_us": 1.3},                           # optional: between queued kernels
     "ops": {"matmul": [{"dtype": "bf16", "shape": [m, n, k], "us": 12.5, "count": 3}, ...],
             "attention": [... "shape": [batch x heads, seq_q, seq_k, head_dim] ...],
             "elementwise": [... "shape": [bytes] ...], ...},
     "collectives": {"all_reduce": [{"bytes": 1048576, "busbw_gbps": 180.0}, ...]}}

Each class's shape (``SHAPE_KEYS``) is what ``op_key`` reads from an op's recorded inputs: a
matmul's ``m, n, k`` (batch folded into m), attention's ``batch x heads, seq_q, seq_k, head
dim``, a convolution's FLOPs, every other class the bytes of its tensor inputs (as a Kineto trace
records them: inputs only). A file that is not such a profile is refused with one line naming
the file and the first problem (``ProfileError``).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from ..errors import ConverterError, shown
from ..schema.opcost import BadShapes, OpClass, Tensor, base_name, op_cost, tensors

FORMAT = "chakra-device-profile"
VERSION = 1
#: The shape each class's points are keyed by (what ``op_key`` reads from the op's inputs).
SHAPE_KEYS: dict[str, tuple[str, ...]] = {
    OpClass.MATMUL.value: ("m", "n", "k"),
    OpClass.ATTENTION.value: ("batch_heads", "seq_q", "seq_k", "head_dim"),
    OpClass.CONV.value: ("flops",),
    OpClass.EMBEDDING.value: ("bytes",),
    OpClass.NORM.value: ("bytes",),
    OpClass.SOFTMAX.value: ("bytes",),
    OpClass.ELEMENTWISE.value: ("bytes",),
    OpClass.REDUCTION.value: ("bytes",),
    OpClass.COPY.value: ("bytes",),
    OpClass.UNKNOWN.value: ("bytes",),
    "memcpy": ("bytes",),  # a memcpy or memset on the GPU, by its own bytes
}
#: The classes timed by FLOPs (their throughput is FLOP/s); the others by bytes.
FLOP_CLASSES = frozenset({OpClass.MATMUL.value, OpClass.ATTENTION.value, OpClass.CONV.value})
#: dtype names as traces spell them -> the profile's.
_DTYPES = {
    "float": "fp32",
    "double": "fp64",
    "Half": "fp16",
    "BFloat16": "bf16",
    "long int": "int64",
    "long": "int64",
    "int": "int32",
    "bool": "bool",
    "unsigned char": "uint8",
    "signed char": "int8",
    "Float8_e4m3fn": "fp8",
    "Float8_e5m2": "fp8",
}
_FLOATING = ("fp32", "fp64", "fp16", "bf16", "fp8")
_NEIGHBOURS = 3
SHIPPED = ("h200", "h100")  # the profiles in the package (converter/devices/data/NAME.json)


class ProfileError(ConverterError):
    """A device profile that cannot be read: one line naming the file and the problem."""


@dataclass(frozen=True)
class Point:
    dtype: str
    shape: tuple[int, ...]
    us: float
    count: int = 1
    op: str = ""  # the op's name without aten:: and overload (``addmm``); "" for any op of the class

    def work(self, op_class: str) -> float:
        return work_of(op_class, self.shape)


@dataclass(frozen=True)
class OpKey:
    """An op as the profile looks it up: class, dtype, shape (``SHAPE_KEYS``) and its work
    (FLOPs for the FLOP classes, else bytes)."""

    op_class: str
    dtype: str
    shape: tuple[int, ...]
    flops: int
    bytes: int
    op: str = ""

    @property
    def work(self) -> float:
        return float(self.flops if self.op_class in FLOP_CLASSES else self.bytes)


@dataclass
class DeviceProfile:
    device: str
    backend: str
    path: str
    ops: dict[str, list[Point]] = field(default_factory=dict)
    host_op_us: float | None = None
    host_launch_us: float | None = None
    #: the GPU's own time between two kernels queued back to back on a stream (CUPTI's kernel times
    #: leave it out): the end of one to the start of the next, launched before the first ended
    kernel_gap_us: float | None = None
    peak_tflops: float | None = None
    mem_bandwidth_gbps: float | None = None
    made: dict[str, Any] = field(default_factory=dict)
    collectives: dict[str, list[tuple[int, float]]] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.device} ({os.path.basename(self.path)})"

    def has(self, op_class: str, dtype: str) -> bool:
        return any(p.dtype == dtype for p in self.ops.get(op_class, ()))

    def predict(self, key: OpKey) -> float | None:
        """The op's time (us) interpolated between the profile's points of its class and dtype (the
        nearest in log shape, weighted by closeness, their throughput applied to the op's work; at
        least the fastest point's time); None where the profile has no point for them."""
        points = [p for p in self.ops.get(key.op_class, ()) if p.dtype == key.dtype]
        if not points:
            return None
        named = [p for p in points if p.op and p.op == key.op]
        points = named or points  # the op's own points first (a backward is not its forward)
        work = key.work
        floor = min((p.us for p in points if p.work(key.op_class) <= work), default=0.0)
        target = [_log(v) for v in key.shape]
        ranked = sorted(points, key=lambda p: _distance(target, p.shape))[:_NEIGHBOURS]
        exact = [p for p in ranked if tuple(p.shape) == key.shape]
        if exact:
            return sum(p.us * p.count for p in exact) / sum(p.count for p in exact)
        weights, logs = 0.0, 0.0
        for p in ranked:
            w = 1.0 / (_distance(target, p.shape) + 1e-3) ** 2
            rate = p.work(key.op_class) / p.us if p.us > 0 else 0.0
            if rate <= 0 or work <= 0:  # no work to scale by: the nearest points' times
                logs += w * math.log(max(p.us, 1e-6))
            else:
                logs += w * math.log(work / rate)
            weights += w
        return max(floor, math.exp(logs / weights))

    def roofline_us(self, key: OpKey) -> float | None:
        """The datasheet roofline's time, where the profile names the device's peak and bandwidth."""
        if not self.peak_tflops or not self.mem_bandwidth_gbps:
            return None
        return max(key.flops / (self.peak_tflops * 1e6), key.bytes / (self.mem_bandwidth_gbps * 1e3))

    def class_rate(self, op_class: str) -> float | None:
        """The class's median throughput over its points (work per us, any dtype): the scale of a
        kernel whose shapes are unknown."""
        rates = sorted(p.work(op_class) / p.us for p in self.ops.get(op_class, ()) if p.us > 0)
        return rates[len(rates) // 2] if rates else None


def _log(v: float) -> float:
    return math.log2(max(float(v), 1.0))


def _distance(target: list[float], shape: Sequence[int]) -> float:
    if len(shape) != len(target):
        return math.inf
    return math.sqrt(sum((t - _log(v)) ** 2 for t, v in zip(target, shape, strict=True)))


def work_of(op_class: str, shape: Sequence[int]) -> float:
    """A point's work from its shape: matmul 2mnk, attention 4 b s_q s_k d, else the one number."""
    if op_class == OpClass.MATMUL.value:
        return 2.0 * math.prod(shape)
    if op_class == OpClass.ATTENTION.value:
        bh, sq, sk, d = shape
        return 4.0 * bh * sq * sk * d
    return float(shape[0]) if shape else 0.0


def dtype_name(trace_name: str) -> str:
    """``c10::BFloat16`` -> ``bf16``; a name without an entry, as written."""
    name = trace_name.strip().removeprefix("c10::")
    return _DTYPES.get(name, name)


def op_key(name: str, in_shapes: Sequence[Any], in_types: Sequence[Any]) -> OpKey | str:
    """The profile's key of an op from its recorded inputs (types as the host trace spells them,
    ``Tensor(float)``), or why there is none."""
    try:
        cost = op_cost(name, in_shapes, in_types, [], [])
        ins = tensors(in_shapes, in_types)
    except BadShapes as exc:
        return f"shapes that cannot be read ({str(exc)[:80]})"
    cls = cost.op_class
    if cls is OpClass.NONE:
        return "an op that does no work"
    dtype = _dtype(in_types)
    shape: tuple[int, ...]
    if cls is OpClass.MATMUL:
        dims = _matmul_dims(name, ins, cost.flops)
        if dims is None:
            return "a matmul whose operands cannot be told"
        shape = dims
    elif cls is OpClass.ATTENTION:
        qkv = _attention_dims(name, ins)
        if qkv is None:
            return "an attention whose q, k, v cannot be told"
        shape = qkv
    elif cls is OpClass.CONV:
        shape = (cost.flops,)
    else:
        shape = (cost.bytes,)
    return OpKey(cls.value, dtype, shape, cost.flops, cost.bytes, base_name(name))


def _dtype(in_types: Sequence[Any]) -> str:
    names = [dtype_name(m) for t in in_types if isinstance(t, str) for m in _inner(t)]
    return next((n for n in names if n in _FLOATING), names[0] if names else "none")


def _inner(type_name: str) -> list[str]:
    if not type_name.startswith("Tensor(") or not type_name.endswith(")"):
        return []
    return [type_name[len("Tensor(") : -1]]


def _matmul_dims(name: str, ins: list[Tensor], flops: int) -> tuple[int, int, int] | None:
    mats = [t for t in ins if len(t.shape) >= 1]
    base = base_name(name)
    if base in ("addmm", "baddbmm", "_addmm_activation", "addbmm", "addmv") and len(mats) >= 3:
        mats = mats[1:]
    if len(mats) < 2 or not mats[0].shape:
        return None
    k = mats[0].shape[-1]
    if k <= 0:
        return None
    m = mats[0].numel // k
    n = flops // (2 * m * k) if m > 0 else 0
    return (m, n, k)


def _attention_dims(name: str, ins: list[Tensor]) -> tuple[int, int, int, int] | None:
    backward = "backward" in base_name(name)
    qkv = ins[1:4] if backward else ins[0:3]
    if len(qkv) < 3 or any(len(t.shape) < 2 for t in qkv):
        return None
    q, k = qkv[0].shape, qkv[1].shape
    return (math.prod(q[:-2]), q[-2], k[-2], q[-1])


def memcpy_key(moved: int) -> OpKey:
    return OpKey("memcpy", "none", (moved,), 0, moved)


# -- reading and writing --------------------------------------------------------------------------
def load(path: str | os.PathLike[str]) -> DeviceProfile:
    """Read and validate a profile file; ``ProfileError`` (one line) on anything wrong."""
    where = shown(os.fspath(path))
    try:
        with open(path, "rb") as fh:
            raw = fh.read(64 << 20)
    except OSError as exc:
        raise ProfileError(f"{where}: cannot read the device profile ({exc.strerror or exc})") from None
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise ProfileError(f"{where}: not a device profile (not JSON: {str(exc)[:80]})") from None
    return parse(data, where)


def shipped(name: str) -> DeviceProfile:
    """A profile in the package by name (``h200``)."""
    key = name.lower()
    if key not in SHIPPED:
        raise ProfileError(f"no shipped device profile {name!r}; shipped: {', '.join(SHIPPED)}")
    ref = resources.files("chakra_convert_fast.converter.devices") / "data" / f"{key}.json"
    with resources.as_file(ref) as path:
        return load(path)


def resolve(spec: str) -> DeviceProfile:
    """A file path, or the name of a shipped profile."""
    if spec.lower() in SHIPPED and not os.path.exists(spec):
        return shipped(spec)
    return load(spec)


def parse(data: Any, where: str) -> DeviceProfile:
    def bad(problem: str) -> ProfileError:
        return ProfileError(f"{where}: not a valid device profile: {problem}")

    if not isinstance(data, dict):
        raise bad("the top level is not an object")
    if data.get("format") != FORMAT:
        raise bad(f"'format' is {data.get('format')!r}, not {FORMAT!r}")
    if data.get("version") != VERSION:
        raise bad(f"'version' {data.get('version')!r}: this release reads version {VERSION}")
    device, backend = data.get("device"), data.get("backend")
    if not isinstance(device, str) or not device:
        raise bad("'device' is not a name")
    if backend not in ("cuda", "cpu", "rocm"):
        raise bad(f"'backend' {backend!r} is not cuda, rocm or cpu")
    profile = DeviceProfile(device, backend, where)
    for key in ("peak_tflops", "mem_bandwidth_gbps"):
        value = data.get(key)
        if value is not None:
            setattr(profile, key, _positive(value, f"'{key}'", bad))
    made = data.get("made", {})
    if not isinstance(made, dict):
        raise bad("'made' is not an object")
    profile.made = made
    host = data.get("host", {})
    if not isinstance(host, dict):
        raise bad("'host' is not an object")
    for key, attr in (("op_us", "host_op_us"), ("launch_us", "host_launch_us")):
        if host.get(key) is not None:
            setattr(profile, attr, _non_negative(host[key], f"'host.{key}'", bad))
    gpu = data.get("gpu", {})
    if not isinstance(gpu, dict):
        raise bad("'gpu' is not an object")
    if gpu.get("kernel_gap_us") is not None:
        profile.kernel_gap_us = _non_negative(gpu["kernel_gap_us"], "'gpu.kernel_gap_us'", bad)
    ops = data.get("ops")
    if not isinstance(ops, dict):
        raise bad("'ops' is not an object")
    for cls, points in ops.items():
        if cls not in SHAPE_KEYS:
            raise bad(f"'ops' has an unknown class {cls!r} (known: {', '.join(SHAPE_KEYS)})")
        if not isinstance(points, list):
            raise bad(f"'ops.{cls}' is not a list")
        width = len(SHAPE_KEYS[cls])
        parsed = []
        for i, point in enumerate(points):
            what = f"'ops.{cls}[{i}]'"
            if not isinstance(point, dict):
                raise bad(f"{what} is not an object")
            dtype, shape = point.get("dtype"), point.get("shape")
            if not isinstance(dtype, str) or not dtype:
                raise bad(f"{what}: 'dtype' is not a name")
            if not isinstance(shape, list) or len(shape) != width or not all(type(v) is int and v >= 0 for v in shape):
                raise bad(f"{what}: 'shape' is not {width} size(s) ({', '.join(SHAPE_KEYS[cls])})")
            us = _positive(point.get("us"), f"{what}: 'us'", bad)
            count, op = point.get("count", 1), point.get("op", "")
            if type(count) is not int or count < 1:
                raise bad(f"{what}: 'count' is not a positive integer")
            if not isinstance(op, str):
                raise bad(f"{what}: 'op' is not a name")
            parsed.append(Point(dtype, tuple(shape), us, count, op))
        profile.ops[cls] = parsed
    collectives = data.get("collectives", {})
    if not isinstance(collectives, dict):
        raise bad("'collectives' is not an object")
    for kind, rows in collectives.items():
        if not isinstance(rows, list):
            raise bad(f"'collectives.{kind}' is not a list")
        table = []
        for i, row in enumerate(rows):
            what = f"'collectives.{kind}[{i}]'"
            if not isinstance(row, dict) or type(row.get("bytes")) is not int or row["bytes"] < 0:
                raise bad(f"{what}: 'bytes' is not a size")
            table.append((row["bytes"], _positive(row.get("busbw_gbps"), f"{what}: 'busbw_gbps'", bad)))
        profile.collectives[str(kind)] = table
    return profile


def _positive(value: Any, what: str, bad: Any) -> float:
    if type(value) not in (int, float) or not math.isfinite(value) or value <= 0:
        raise bad(f"{what} is not a positive number")
    return float(value)


def _non_negative(value: Any, what: str, bad: Any) -> float:
    if type(value) not in (int, float) or not math.isfinite(value) or value < 0:
        raise bad(f"{what} is not a number >= 0")
    return float(value)


def to_json(profile_fields: dict[str, Any]) -> str:
    """A profile's JSON text (points sorted, one per line: a diff shows what changed)."""
    ops = profile_fields.get("ops", {})
    head = {k: v for k, v in profile_fields.items() if k not in ("ops", "collectives")}
    lines = ["{"]
    for k, v in head.items():
        lines.append(f"  {json.dumps(k)}: {json.dumps(v, sort_keys=True)},")
    lines.append('  "ops": {')
    classes = sorted(ops)
    for ci, cls in enumerate(classes):
        points = sorted(ops[cls], key=lambda p: (p["dtype"], p.get("op", ""), p["shape"]))
        lines.append(f"    {json.dumps(cls)}: [")
        for pi, point in enumerate(points):
            comma = "," if pi + 1 < len(points) else ""
            lines.append(f"      {json.dumps(point, sort_keys=True)}{comma}")
        lines.append("    ]" + ("," if ci + 1 < len(classes) else ""))
    lines.append("  },")
    lines.append(f'  "collectives": {json.dumps(profile_fields.get("collectives", {}), sort_keys=True)}')
    lines.append("}")
    return "\n".join(lines) + "\n"

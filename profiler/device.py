"""``chakra-profile device-profile``: measure a device profile (``docs/device-profiles.md``) in minutes.

Times, on this machine's GPU (or its CPU: ``--device cpu``), each class of op the what-if costs over
a grid of shapes in one dtype: GEMMs (``aten::mm``: m, n, k), attention (``scaled_dot_product_
attention``: batch x heads, sequence, head size), element-wise ops and copies, norms, softmax,
reductions and embeddings (a table and int64 indices) by the bytes of their inputs; and the host's
cost per op (``aten::view`` in a loop) and per kernel launch (``aten::add_`` less that), untraced.
Each op is keyed exactly as the what-if keys a traced op (``devices.profile.op_key`` on its input
shapes and dtypes), so a point measured here is found by the trace's op of the same shape. NCCL's
all-reduce bus bandwidth is not measured yet: the file's ``collectives`` stays empty.

    chakra-profile device-profile --out h100.json            # CUDA when present, else the CPU
    chakra-profile device-profile --out cpu.json --device cpu --quick
"""

from __future__ import annotations

import argparse
import datetime
import functools
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

_TYPES = {"bf16": "BFloat16", "fp32": "float", "fp16": "Half"}
#: calls per timed run on a GPU, and the spin (GPU clock cycles, about 5 ms) that keeps the GPU busy
#: while the host queues them
_BATCH = 10
_SPIN_CYCLES = 10_000_000


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="chakra-profile device-profile",
        description="Measure what this device reaches per op class by shape: a device profile for "
        "convert --kineto --device-profile.",
        epilog="example: chakra-profile device-profile --out h100.json",
    )
    p.add_argument("--out", required=True, metavar="FILE", help="the profile to write (JSON)")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto", help="default: cuda when present")
    p.add_argument(
        "--dtype",
        choices=tuple(_TYPES),
        default=None,
        help="default: bf16 on a GPU, fp32 on the CPU; other than fp32, the classes timed by bytes are "
        "measured in fp32 too (autocast runs norms, softmax and embeddings in fp32)",
    )
    p.add_argument("--quick", action="store_true", help="a small grid and few repeats (seconds; for a smoke test)")
    p.add_argument("--repeats", type=int, default=None, help="timed runs per shape (default 20, quick 3)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _main(argv)
    except KeyboardInterrupt:
        print("chakra-profile device-profile: interrupted; nothing written", file=sys.stderr)
        return 130


def _main(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(argv)
    out = os.path.abspath(args.out)
    if not os.path.isdir(os.path.dirname(out)):
        print(f"chakra-profile device-profile: error: {args.out}: no such directory", file=sys.stderr)
        return 1
    if os.path.exists(out) and not os.path.isfile(out):
        print(f"chakra-profile device-profile: error: {args.out}: not a regular file", file=sys.stderr)
        return 1
    import torch

    from chakra_convert_fast.converter.devices import profile as dp

    if args.device == "cuda" and not torch.cuda.is_available():
        print("chakra-profile device-profile: error: --device cuda: no CUDA device here", file=sys.stderr)
        return 2
    device = torch.device("cuda" if args.device != "cpu" and torch.cuda.is_available() else "cpu")
    dtype_name = args.dtype or ("bf16" if device.type == "cuda" else "fp32")
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32, "fp16": torch.float16}[dtype_name]
    repeats = args.repeats or (3 if args.quick else 20)
    bench = _Bench(torch, device, repeats)
    ops: dict[str, list[dict[str, Any]]] = {}
    # under autocast (bf16, fp16) norms, softmax, embeddings and the optimizer's element-wise ops run in
    # fp32: those classes are measured in fp32 too
    passes = [(dtype_name, dtype)] + ([("fp32", torch.float32)] if dtype_name != "fp32" else [])
    cases = [(d, t, case) for d, t in passes for case in _cases(torch, device, args.quick)]
    for case_dtype, torch_dtype, (name, shapes, call) in cases:
        # an embedding's indices (its second input, as aten::embedding takes them) are int64
        lookup = name == "aten::embedding"
        types = [f"Tensor({'long int' if lookup and i == 1 else _TYPES[case_dtype]})" for i in range(len(shapes))]
        key = dp.op_key(name, [list(shape) for shape in shapes], types)
        if isinstance(key, str) or (case_dtype != dtype_name and key.op_class in dp.FLOP_CLASSES):
            continue
        tensors = [
            torch.randint(0, shapes[0][0], shape, device=device)
            if lookup and i == 1
            else torch.randn(*shape, device=device, dtype=torch_dtype)
            for i, shape in enumerate(shapes)
        ]
        us = bench.time(functools.partial(call, *tensors))
        ops.setdefault(key.op_class, []).append(
            {"op": key.op, "dtype": key.dtype, "shape": list(key.shape), "us": round(us, 3), "count": repeats}
        )
        del tensors
    host = bench.host(dtype)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU ({os.cpu_count()} cores)"
    fields: dict[str, Any] = {
        "format": dp.FORMAT,
        "version": dp.VERSION,
        "device": name,
        "backend": "cuda" if device.type == "cuda" else "cpu",
        "made": {
            "by": "chakra-profile device-profile" + (" --quick" if args.quick else ""),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
            "torch": torch.__version__,
            "notes": f"{repeats} timed runs per shape, the median; host costs untraced, in a loop",
        },
        "host": host,
        "ops": ops,
        "collectives": {},
    }
    text = dp.to_json(fields)
    dp.parse(__import__("json").loads(text), args.out)  # what is written reads back
    tmp = f"{out}.tmp-{os.getpid()}"
    try:
        with open(tmp, "w") as fh:
            fh.write(text)
        os.replace(tmp, out)
    except OSError as exc:
        if os.path.exists(tmp):
            os.unlink(tmp)
        print(f"chakra-profile device-profile: error: {args.out}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    points = sum(len(v) for v in ops.values())
    print(f"wrote {args.out}: {name}, {dtype_name}, {points} point(s) in {len(ops)} class(es); host {host}")
    return 0


class _Bench:
    def __init__(self, torch: Any, device: Any, repeats: int) -> None:
        self.torch, self.device, self.repeats = torch, device, repeats

    def sync(self) -> None:
        if self.device.type == "cuda":
            self.torch.cuda.synchronize()

    def time(self, fn: Callable[[], object]) -> float:
        """The median of ``repeats`` runs, microseconds (CUDA events on a GPU).

        On a GPU each run is ``_BATCH`` calls queued behind a spin kernel (``torch.cuda._sleep``), so
        the events time the kernels back to back, as CUPTI times a trace's, not the host's dispatch:
        one eager call between two events times the dispatch where the kernel is shorter (a copy of
        8 KB and one of 16 MB both took 14.7 us on the H100 that way)."""
        fn()
        self.sync()
        times = []
        cuda = self.device.type == "cuda"
        spin = getattr(self.torch.cuda, "_sleep", None) if cuda else None
        batch = _BATCH if spin is not None else 1
        for _ in range(self.repeats):
            if cuda:
                start, end = self.torch.cuda.Event(enable_timing=True), self.torch.cuda.Event(enable_timing=True)
                if spin is not None:
                    spin(_SPIN_CYCLES)
                start.record()
                for _ in range(batch):
                    fn()
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end) * 1e3 / batch)
            else:
                t0 = time.perf_counter()
                fn()
                times.append((time.perf_counter() - t0) * 1e6)
        return float(statistics.median(times))

    def host(self, dtype: Any) -> dict[str, float]:
        """Untraced host cost per op (``aten::view``) and per launch (``aten::add_`` less a view)."""
        x = self.torch.ones(16, device=self.device, dtype=dtype)
        n = 2000

        def loop(fn: Callable[[], object]) -> float:
            self.sync()
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            self.sync()
            return (time.perf_counter() - t0) * 1e6 / n

        view = min(loop(lambda: x.view(-1)) for _ in range(3))
        add = min(loop(lambda: x.add_(1.0)) for _ in range(3))
        return {"op_us": round(view, 4), "launch_us": round(max(0.0, add - view), 4)}


def _cases(torch: Any, device: Any, quick: bool) -> list[tuple[str, list[tuple[int, ...]], Callable[..., object]]]:
    """(op name as a trace records it, its inputs' shapes, the call) over the grid."""
    f = torch.nn.functional
    tokens = (512, 2048) if quick else (512, 2048, 4096, 8192, 16384)
    widths = (256, 768) if quick else (768, 1024, 2304, 3072, 4096)
    cases: list[tuple[str, list[tuple[int, ...]], Callable[..., object]]] = []
    for m in tokens:
        for n in widths:
            for k in widths:
                cases.append(("aten::mm", [(m, k), (k, n)], torch.mm))
    attention = (
        "aten::_scaled_dot_product_efficient_attention"
        if device.type == "cuda"
        else "aten::_scaled_dot_product_flash_attention_for_cpu"
    )
    for bh in (8,) if quick else (48, 96, 384):
        for s in (128, 256) if quick else (128, 256, 512, 1024, 2048):
            cases.append((attention, [(1, bh, s, 64)] * 3, f.scaled_dot_product_attention))
    sizes = (1 << 16, 1 << 20) if quick else tuple(1 << p for p in range(12, 29, 2))

    def norm(x: Any) -> object:
        return f.layer_norm(x, (768,))

    def lookup(weight: Any, indices: Any) -> object:  # aten::embedding(weight, indices)
        return f.embedding(indices, weight)

    def softmax(x: Any) -> object:
        return torch.softmax(x, -1)

    for vocab in (1024, 30522) if quick else (1024, 30522, 50257):
        for tokens_ in (512,) if quick else (512, 4096, 16384):
            cases.append(("aten::embedding", [(vocab, 768), (tokens_,)], lookup))
    for numel in sizes:
        rows = max(1, numel // 768)
        cases += [
            ("aten::add", [(numel,), (numel,)], torch.add),
            ("aten::mul", [(numel,), (numel,)], torch.mul),
            ("aten::gelu", [(numel,)], f.gelu),
            ("aten::clone", [(numel,)], torch.clone),
            ("aten::sum", [(numel,)], torch.sum),
            ("aten::native_layer_norm", [(rows, 768)], norm),
            ("aten::_softmax", [(rows, 768)], softmax),
        ]
    return cases


if __name__ == "__main__":
    sys.exit(main())

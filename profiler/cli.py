"""``chakra-profile``: parse the arguments, launch the ranks, report the exit status.

``--nproc 1`` trains in this process; more ranks go through ``torch.distributed.run`` with
``-m profiler.train`` and the same arguments, exactly as a user's own ``torchrun`` would.
This module imports neither torch nor transformers, so ``--help`` and argument errors are fast.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import signal
import sys
from collections.abc import Sequence

from chakra_convert_fast.converter.cli.numbers import quantity, whole
from chakra_convert_fast.profiler.convert import CONVERTERS, ConverterUnavailable, ensure_available
from chakra_convert_fast.profiler.layouts import DP_MODES, SCHEDULES, Layout, make_layout, shape_problems
from chakra_convert_fast.profiler.models import (
    MODELS,
    MOE_MODELS,
    MOE_PRESETS,
    SIZE_CHOICES,
    check_size,
    resolve_shape,
    resolve_size,
)

BACKENDS = ("auto", "gloo", "nccl")
PRECISIONS = ("fp32", "bf16")
DEVICES = ("auto", "cpu", "cuda")


#: The bounds of the numbers (ASCII decimal, a usage error outside: ``cli/numbers.py``).
MAX_NPROC = 1024  # ranks on one machine
MAX_COUNT = 1_000_000  # a model dimension, a batch, steps
MAX_SEED = (1 << 32) - 1  # numpy's seeds (torch's are wider)
_positive = whole(1, MAX_COUNT)
_non_negative = whole(0, MAX_COUNT)


def _version() -> str:
    try:
        return importlib.metadata.version("chakra-convert-fast")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def build_parser(prog: str = "chakra-profile") -> argparse.ArgumentParser:
    """The one parser shared by the launcher and each rank (``python -m profiler.train``)."""
    p = argparse.ArgumentParser(
        prog=prog,
        allow_abbrev=False,
        description="Pretrain GPT-2, BERT or Mixtral on SQuAD text (data, tensor, pipeline and expert parallel) "
        "and capture Chakra host+device traces.",
        epilog="example: chakra-profile --model gpt2 --size tiny --nproc 4 --tp 2 --dp fsdp --steps 4 --convert; "
        "a device profile (what this GPU reaches per op class, for convert --device-profile): "
        "chakra-profile device-profile --out FILE",
    )
    p.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    p.add_argument(
        "--model",
        choices=MODELS,
        required=True,
        help="gpt2: causal LM; bert: masked LM; mixtral: causal LM with mixture-of-experts layers",
    )
    p.add_argument(
        "--size",
        choices=SIZE_CHOICES,
        default="auto",
        help="shape preset; 'base' (alias gpt2 / bert-base) is the real 124M / 110M shape; "
        "auto: base on GPUs, small on CPU (default)",
    )
    p.add_argument("--n-layer", type=_positive, help="override the preset's layer count")
    p.add_argument("--hidden", type=_positive, help="override the hidden width")
    p.add_argument("--n-head", type=_positive, help="override the attention head count")
    p.add_argument("--intermediate", type=_positive, help="override the MLP width")
    p.add_argument("--max-positions", type=_positive, help="override the position table size")
    p.add_argument("--seq-len", type=_positive, help="tokens per example (padded/truncated)")
    p.add_argument(
        "--vocab-size",
        type=_positive,
        help="embedding rows at least (default: the tokenizer's; base keeps the real size)",
    )
    p.add_argument("--batch-size", type=_positive, default=4, help="examples per rank per step (default 4)")
    p.add_argument("--lr", type=quantity(0, 1e3, ""), default=1e-4, help="AdamW learning rate (default 1e-4)")
    p.add_argument("--seed", type=whole(0, MAX_SEED), default=0)

    p.add_argument(
        "--data", default=None, help="SQuAD v1.1 JSON file; 'squad' for the hub dataset; default: the shipped sample"
    )
    p.add_argument(
        "--tokenizer", default=None, help="a real tokenizer (local path or hub name) instead of the offline default"
    )

    p.add_argument("--nproc", type=whole(1, MAX_NPROC), default=1, help="ranks to launch (default 1)")
    p.add_argument("--backend", choices=BACKENDS, default="auto", help="auto: nccl on GPUs, gloo on CPU")
    p.add_argument("--device", choices=DEVICES, default="auto", help="auto: cuda when every rank has a GPU")
    p.add_argument(
        "--dp",
        choices=DP_MODES,
        default="ddp",
        help="how data parallelism synchronises: ddp (gradient all-reduce, default) or fsdp "
        "(FSDP2 fully_shard: parameter all-gather, gradient reduce-scatter)",
    )
    p.add_argument(
        "--tp",
        type=_positive,
        default=1,
        help="tensor-parallel degree (Megatron-style column/row plans on attention and MLP)",
    )
    p.add_argument(
        "--pp",
        type=_positive,
        default=1,
        help="pipeline-parallel stages (whole blocks); --nproc = data parallel x --tp x --pp",
    )
    p.add_argument(
        "--ep",
        type=_positive,
        default=1,
        help="expert-parallel degree (--model mixtral): each MoE layer's experts sharded over --ep ranks, "
        "tokens dispatched and combined by all-to-all; --nproc must equal --ep (DDP for the rest)",
    )
    p.add_argument(
        "--microbatches", type=_positive, default=None, help="micro-batches per step with --pp (default: --pp)"
    )
    p.add_argument("--schedule", choices=SCHEDULES, default="1f1b", help="pipeline schedule with --pp (default 1f1b)")
    p.add_argument(
        "--threads", type=_positive, default=None, help="CPU threads per rank (default: $OMP_NUM_THREADS, else 1)"
    )

    p.add_argument(
        "--precision",
        choices=PRECISIONS,
        default="fp32",
        help="fp32 (default) or bf16: the forward pass and loss under torch.autocast(bfloat16), as mixed-"
        "precision training runs on tensor cores (not with --pp)",
    )
    p.add_argument("--steps", type=_positive, default=8, help="training steps (default 8)")
    p.add_argument(
        "--enable-tracing",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="capture host and device traces (default on)",
    )
    p.add_argument(
        "--host-trace",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the host execution trace (ExecutionTraceObserver) beside the Kineto trace (default on); "
        "--no-host-trace: the Kineto trace alone, the lighter capture (docs/kineto.md)",
    )
    p.add_argument(
        "--record-shapes",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="Kineto's record_shapes: input shapes and types on each op (default on)",
    )
    p.add_argument(
        "--profile-memory",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="Kineto's profile_memory: every allocation and free of the traced step, for "
        "`chakra-convert-fast memory` (docs/memory.md; default off)",
    )
    p.add_argument("--wait", type=_non_negative, default=2, help="steps before profiling starts (default 2)")
    p.add_argument("--warmup", type=_non_negative, default=1, help="profiled but discarded steps (default 1)")
    p.add_argument("--active", type=_positive, default=1, help="traced steps (default 1)")

    p.add_argument("--outdir", default="outputs", help="where traces and the summary go (default outputs)")
    p.add_argument("--name", default=None, help="file name prefix (default {model}_{size}_np{ranks})")
    p.add_argument("--convert", action="store_true", help="convert each rank's traces to {name}.{rank}.et")
    p.add_argument(
        "--converter",
        choices=CONVERTERS,
        default="fast",
        help="fast: this project's converter (default); reference: mlc-chakra's",
    )
    p.add_argument(
        "--compact",
        action="store_true",
        help="with --convert: write compacted .et files (fewer nodes, the same simulated time)",
    )
    p.add_argument(
        "--roofline",
        action="store_true",
        help="with --convert: write num_ops and tensor_size on compute nodes (simulate --accelerator)",
    )
    p.add_argument(
        "--target",
        choices=("captured", "accelerator"),
        default="captured",
        help="with --convert --roofline: 'accelerator' writes compute nodes as accelerator ops, timed by "
        "simulate's --accelerator roofline (default captured: the traced durations)",
    )
    p.add_argument("--save-dir", default=None, help="save the trained model and tokenizer here")
    return p


def parse_args(argv: Sequence[str] | None = None, prog: str = "chakra-profile") -> argparse.Namespace:
    """Parse and cross-check the arguments, so a bad combination fails before any rank starts."""
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    window = args.wait + args.warmup + args.active
    if args.enable_tracing and args.steps < window:
        parser.error(f"--steps {args.steps} is shorter than the trace window wait+warmup+active = {window}")
    try:
        check_size(args.model, args.size)
    except ValueError as e:
        parser.error(str(e))
    problem = _outdir_problem(args.outdir)
    if problem:
        parser.error(f"--outdir {args.outdir}: {problem}")
    if args.backend == "nccl" and args.device == "cpu":
        parser.error("--backend nccl needs --device cuda")
    if not args.host_trace and args.convert and (args.compact or args.roofline or args.converter != "fast"):
        parser.error(
            "--no-host-trace converts the Kineto trace alone (chakra-convert-fast's Kineto front end): "
            "no --compact, --roofline or --converter reference with it"
        )
    if args.precision != "fp32" and args.pp > 1:
        parser.error(
            f"--precision {args.precision} is not supported with --pp (the pipeline schedule runs its own forward)"
        )
    try:
        layout_of(args, None if prog == "chakra-profile" else world_size())
    except ValueError as e:
        parser.error(str(e))
    return args


def _outdir_problem(outdir: str) -> str | None:
    """Why ``outdir`` cannot take the capture (checked before any model is built), or None."""
    path = os.path.abspath(outdir)
    while not os.path.lexists(path):
        path = os.path.dirname(path)
    if not os.path.isdir(path):
        return f"{path} is not a directory" if path != os.path.abspath(outdir) else "not a directory"
    if not os.access(path, os.W_OK | os.X_OK):
        return f"{path} is not writable"
    return None


def world_size() -> int:
    """The job's ranks as torchrun tells each of them (1 without torchrun)."""
    text = os.environ.get("WORLD_SIZE", "1")
    return int(text) if text.isdigit() and int(text) > 0 else 1


def layout_of(args: argparse.Namespace, nproc: int | None = None) -> Layout:
    """The run's layout, checked against the model's shape where the size is known before the
    ranks start (``auto`` depends on the device: each rank checks it then). Raises ValueError."""
    microbatches = args.microbatches if args.microbatches is not None else (args.pp if args.pp > 1 else 1)
    layout = make_layout(
        args.nproc if nproc is None else nproc, args.tp, args.pp, args.dp, microbatches, args.schedule, args.ep
    )
    if args.model in MOE_MODELS and (layout.tp, layout.pp, layout.dp_mode) != (1, 1, "ddp"):
        raise ValueError(f"--model {args.model} runs data and expert parallelism: --tp 1, --pp 1 and --dp ddp")
    if args.ep > 1 and args.model not in MOE_MODELS:
        raise ValueError(f"--ep applies to a mixture-of-experts model ({', '.join(MOE_MODELS)}), not {args.model}")
    if args.ep > 1 and args.size != "auto":
        experts = MOE_PRESETS[(args.model, resolve_size(args.model, args.size, False))][0]
        if experts % args.ep:
            raise ValueError(f"the model's {experts} experts do not split over --ep {args.ep}")
    if args.size != "auto":
        shape = resolve_shape(
            args.model,
            resolve_size(args.model, args.size, False),
            {
                k: getattr(args, k.replace("-", "_"))
                for k in ("n_layer", "hidden", "n_head", "intermediate", "max_positions", "seq_len")
            },
        )
        problems = shape_problems(
            layout, shape.n_layer, shape.hidden, shape.n_head, shape.intermediate, args.batch_size
        )
        if problems:
            raise ValueError("the layout does not divide the model: " + "; ".join(problems))
    return layout


def threads_for(args: argparse.Namespace) -> int:
    """One thread per rank unless told otherwise: more made CPU steps 10-50x slower."""
    if args.threads is not None:
        return int(args.threads)
    env = os.environ.get("OMP_NUM_THREADS", "")
    return int(env) if env.isdigit() and int(env) > 0 else 1


def without_nproc(argv: Sequence[str]) -> list[str]:
    """``argv`` less ``--nproc N`` / ``--nproc=N``: torchrun rejects it as ambiguous with its own."""
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--nproc":
            skip = True
        elif not arg.startswith("--nproc="):
            out.append(arg)
    return out


def launch_command(argv: Sequence[str], nproc: int) -> list[str]:
    """The torchrun command line that starts ``nproc`` ranks of ``profiler.train``."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={nproc}",
        "-m",
        "chakra_convert_fast.profiler.train",
        *without_nproc(argv),
    ]


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``chakra-profile``; returns the process exit status."""
    if argv is None:  # the command line: a parent's blocked stop signals (a mask is inherited) unblocked
        signal.pthread_sigmask(signal.SIG_UNBLOCK, (signal.SIGINT, signal.SIGTERM, signal.SIGHUP))
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["device-profile"]:  # the device micro-benchmark (profiler/device.py)
        from chakra_convert_fast.profiler import device

        return device.main(argv[1:])
    args = parse_args(argv)
    if args.compact and (not args.convert or args.converter != "fast"):
        print("chakra-profile: error: --compact needs --convert with the fast converter", file=sys.stderr)
        return 2
    if args.roofline and (not args.convert or args.converter != "fast"):
        print("chakra-profile: error: --roofline needs --convert with the fast converter", file=sys.stderr)
        return 2
    if args.target == "accelerator" and not args.roofline:
        print(
            "chakra-profile: error: --target accelerator needs --roofline (an accelerator op without num_ops "
            "cannot be timed)",
            file=sys.stderr,
        )
        return 2
    if args.convert:
        try:
            ensure_available(args.converter)
        except ConverterUnavailable as e:
            print(f"chakra-profile: error: {e}", file=sys.stderr)
            return 2
    os.environ["OMP_NUM_THREADS"] = str(threads_for(args))  # before torch starts its thread pool
    from chakra_convert_fast.profiler.launch import run_in_process, run_ranks

    if args.nproc == 1:
        from chakra_convert_fast.profiler import train

        return run_in_process(lambda: train.main(argv), args.outdir)
    return run_ranks(launch_command(argv, args.nproc), args.outdir)


if __name__ == "__main__":
    sys.exit(main())

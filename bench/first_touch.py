"""What a fresh large allocation costs a CPU op: GPT-2's log-softmax backward, timed in user and system time.

    python -m bench.first_touch [--procs 2] [--repeats 6]
    LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4 python -m bench.first_touch

``aten::_log_softmax_backward_data`` over GPT-2's logits (512 tokens x 50,257, fp32: 103 MB in,
103 MB out) in ``--procs`` processes at once (one thread each, each repeat started together, as
the captured ranks ran it). glibc's malloc maps every allocation over 32 MiB afresh and returns it
on free, so each call's output is new memory whose every 4 KiB page faults on first touch (the
kernel zeroes it: system time); a caching allocator (tcmalloc, jemalloc with retained memory, a
GPU's caching allocator) hands the same memory back. The roofline counts only the op's bytes and
FLOPs, so the faults are time it cannot see. Prints per process and repeat: wall, user and system
milliseconds and minor faults.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import resource
import time
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

TOKENS, VOCAB = 512, 50257


def run(args: tuple[Any, int]) -> list[tuple[float, float, float, int]]:
    barrier, repeats = args
    import torch

    torch.set_num_threads(1)
    output = torch.log_softmax(torch.randn(TOKENS, VOCAB), -1)
    grad = torch.zeros(TOKENS, VOCAB)
    grad[torch.arange(TOKENS), torch.randint(0, VOCAB, (TOKENS,))] = -1 / TOKENS  # nll_loss's gradient
    out = []
    for _ in range(repeats):
        barrier.wait()
        before, wall = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        result = torch._log_softmax_backward_data(grad, output, -1, torch.float32)
        wall = time.perf_counter() - wall
        after = resource.getrusage(resource.RUSAGE_SELF)
        del result
        out.append(
            (
                wall * 1e3,
                (after.ru_utime - before.ru_utime) * 1e3,
                (after.ru_stime - before.ru_stime) * 1e3,
                after.ru_minflt - before.ru_minflt,
            )
        )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.first_touch", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--procs", type=int, default=2, help="processes at once (the capture's ranks)")
    parser.add_argument("--repeats", type=int, default=6)
    args = parser.parse_args(argv)
    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager:
        barrier = manager.Barrier(args.procs)
        with context.Pool(args.procs) as pool:
            results = pool.map(run, [(barrier, args.repeats)] * args.procs)
    print(
        f"LD_PRELOAD={os.environ.get('LD_PRELOAD', '')!r}: aten::_log_softmax_backward_data, {TOKENS}x{VOCAB} fp32, "
        f"{args.procs} process(es) at once"
    )
    print("| process | repeat | wall ms | user ms | system ms | minor faults |")
    print("|---:|---:|---:|---:|---:|---:|")
    for proc, rows in enumerate(results):
        for repeat, (wall, user, system, faults) in enumerate(rows):
            print(f"| {proc} | {repeat} | {wall:.1f} | {user:.1f} | {system:.1f} | {faults:,} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

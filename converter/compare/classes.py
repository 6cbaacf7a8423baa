"""Op classes: what kind of work a node or op is, from its name and where it runs (the rows of
``compare``'s "per op class" table). The resources are ASTRA-sim's: one CPU, one GPU compute and one
GPU communication node at a time per NPU."""

from __future__ import annotations

import re

from ..kineto.graph import CARRY_IN_NAME, GAP_NAME
from ..schema.kineto import STEP_PREFIX

CPU, GPU_COMPUTE, COMMUNICATION = "CPU", "GPU compute", "communication"
IDLE = "host: idle and launch gaps"
_RUNTIME = re.compile(r"^(cuda|cu|hip)[A-Z]")
#: GPU kernel classes, by words in the name (lower case), first match wins.
_GPU_CLASSES = (
    ("GPU: memcpy", ("memcpy",)),
    ("GPU: memset", ("memset",)),
    ("GPU: attention", ("flash", "fmha", "attention", "attn", "sdpa")),
    ("GPU: GEMM", ("gemm", "cutlass", "xmma", "cublas", "matmul", "wgmma", "s884", "s1688", "h884", "h1688")),
    ("GPU: normalisation", ("norm",)),
    ("GPU: softmax", ("softmax",)),
    ("GPU: reduction", ("reduce", "reduction")),
    ("GPU: elementwise", ("elementwise", "triton_poi", "vectorized", "unrolled", "copy", "fill")),
    ("GPU: fused (Triton)", ("triton",)),
)
#: Names that are GPU kernels when nothing else says where a node ran (two simulated runs).
_KERNEL_HINT = re.compile(
    r"^(void |sm\d+_|ampere_|volta_|turing_|nccl|rccl|Memcpy|Memset|triton_)|kernel", re.IGNORECASE
)


def op_class(name: str, cpu: bool | None, communication: bool) -> str:
    """The class of an op; ``cpu`` None: not known (guessed from the name)."""
    if communication:
        return "communication"
    if name == CARRY_IN_NAME:
        return "GPU: work launched before the step"
    if cpu is None:
        cpu = not _KERNEL_HINT.search(name)
    if cpu:
        if name == GAP_NAME:
            return IDLE
        if name.endswith(" (wait)"):
            return "host: waiting for the GPU"
        if name.startswith(STEP_PREFIX):
            return "host: step marker"
        if _RUNTIME.match(name):
            return "host: CUDA/HIP runtime"
        return "host: ops"
    low = name.lower()
    for klass, words in _GPU_CLASSES:
        if any(word in low for word in words):
            return klass
    return "GPU: other kernels"

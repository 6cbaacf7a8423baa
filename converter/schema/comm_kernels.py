"""Communication kernels that are not NCCL's, by name: the patterns both front ends read (the
Kineto front end types them as communication nodes, ``kineto/comm.py``; the host path says they
stay compute nodes there). docs/kineto.md lists them with the libraries that launch them."""

from __future__ import annotations

import re

from .chakra import CollectiveCommType

_C = CollectiveCommType

#: Case-insensitive, searched anywhere in the kernel's name; the first match wins.
CUSTOM_COMM_PATTERNS: tuple[tuple[str, CollectiveCommType], ...] = (
    (r"deep_?ep", _C.ALL_TO_ALL),  # DeepEP: deep_ep::intranode::dispatch, ...::combine, internode, low_latency
    (r"pplx", _C.ALL_TO_ALL),  # pplx-kernels' all-to-all dispatch and combine
    (r"nvshmem", _C.ALL_TO_ALL),  # NVSHMEM-based kernels (puts and gets to peers)
    (r"all_?to_?all|(?<![a-z0-9])a2a(?![a-z])", _C.ALL_TO_ALL),  # custom all-to-all, MoE a2a
    (r"reduce_?scatter|userbuffers\w*_rs", _C.REDUCE_SCATTER),  # incl. TransformerEngine's userbuffers RS
    (r"all_?gather|userbuffers", _C.ALL_GATHER),  # incl. TransformerEngine's userbuffers AG
    (r"all_?reduce|cross_device_reduce|mscclpp", _C.ALL_REDUCE),  # vLLM/TRT-LLM custom, symmetric memory
)
#: Names that are communication only on a communication stream (MoE dispatch and combine kernels;
#: the same words name local permutations on the compute stream).
STREAM_COMM_PATTERNS: tuple[tuple[str, CollectiveCommType], ...] = ((r"dispatch|combine", _C.ALL_TO_ALL),)
_CUSTOM = [(re.compile(p, re.IGNORECASE), t) for p, t in CUSTOM_COMM_PATTERNS]
_STREAM_ONLY = [(re.compile(p, re.IGNORECASE), t) for p, t in STREAM_COMM_PATTERNS]


def is_nccl_kernel(name: str) -> bool:
    """An NCCL/RCCL kernel (``ncclKernel_*``, ``ncclDevKernel_*``, ``rccl...``)."""
    return name.startswith(("nccl", "rccl")) or "nccl" in name[:32].lower()


def custom_comm_type(name: str, on_comm_stream: bool = False) -> CollectiveCommType | None:
    """The collective a non-NCCL communication kernel does, by its name (``CUSTOM_COMM_PATTERNS``;
    on a communication stream also ``STREAM_COMM_PATTERNS``), else None."""
    if is_nccl_kernel(name):
        return None
    for pattern, kind in _CUSTOM if not on_comm_stream else (*_CUSTOM, *_STREAM_ONLY):
        if pattern.search(name):
            return kind
    return None

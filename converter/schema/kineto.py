"""The Kineto (Chrome JSON) trace format, as both of its readers see it: one owner.

Two readers stream a Kineto trace: the linker's (``link/kineto.py``, which pairs it with a host
trace and must reproduce ``chakra_trace_link``'s results exactly) and the Kineto front end's
(``kineto/events.py``, a Kineto trace alone). What they share lives here: the event categories and
names, the ``ProfilerStep#N`` markers, and the streaming loop over ``traceEvents`` (runs of events
decoded by msgspec, exact or refused, the rest by the standard library), with the position of each
event for error messages. Each reader keeps its own record of an event (the linker's follows the
reference's defaults; the front end's is a compact record of what a replay graph needs).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

from ..errors import TraceFormatError
from ..fastjson import ExactDecoder
from ..jsonstream import EVENT_BOUNDARY, DecodedRun, JsonObjectStream

#: Host-side categories: operators and annotations, and the CUDA/HIP runtime and driver calls.
CPU_OP, USER_ANNOTATION, CUDA_RUNTIME, CUDA_DRIVER = "cpu_op", "user_annotation", "cuda_runtime", "cuda_driver"
CPU_CATEGORIES = frozenset({CPU_OP, USER_ANNOTATION})
RUNTIME_CATEGORIES = frozenset({CUDA_RUNTIME, CUDA_DRIVER})
#: Device-side categories.
KERNEL, GPU_MEMCPY, GPU_MEMSET = "kernel", "gpu_memcpy", "gpu_memset"
#: The flow events that link a launch (``s``) to its GPU work (``f``).
FLOW_CATEGORY = "ac2g"

PROFILER_STEP = "ProfilerStep"
STEP_PREFIX = "ProfilerStep#"

#: Runtime calls that launch GPU work the linker pairs by correlation id (the reference's list).
LAUNCH_NAMES = frozenset(
    {
        "cuLaunchKernel",
        "cuLaunchKernelEx",
        "cudaLaunchKernel",
        "cudaLaunchKernelExC",
        "cudaMemcpy",
        "cudaMemcpyAsync",
        "cudaMemcpyFromSymbol",
        "cudaMemcpyToSymbol",
        "cudaLaunchCooperativeKernel",
        "hipLaunchKernel",
        "hipExtLaunchKernel",
        "hipExtModuleLaunchKernel",
        "hipModuleLaunchKernel",
        "hipMemcpyWithStream",
        "hipMemcpyAsync",
    }
)

_SHOWN = 60  # characters of a bad value shown in an error


def step_number(name: str) -> int | None:
    """N of a ``ProfilerStep#N`` name, the host trace's or the Kineto trace's (None for any other
    name, and for digits that are not decimal: ``ProfilerStep#²``)."""
    if not name.startswith(STEP_PREFIX):
        return None
    text = name[len(STEP_PREFIX) :]
    return int(text) if text.isdecimal() else None


def shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN else text[:_SHOWN] + "..."


def event_name(index: int, name: Any) -> str:
    """``traceEvents[i] ('name')``: where an event is, for an error message."""
    return f"traceEvents[{index}] ({shown(name)})" if isinstance(name, str) else f"traceEvents[{index}]"


def stream_trace(
    path: str | os.PathLike[str], runs: ExactDecoder[Any], on_key: Callable[[str, Any, bool], None]
) -> Iterator[tuple[int, Any]]:
    """Stream ``path`` (``.json`` or ``.json.gz``): yield ``(index, event)`` for each element of
    ``traceEvents`` (a ``runs`` struct, or what the standard library decoded where msgspec refused
    a run); every other top-level key goes to ``on_key(key, value, seen_events)``. Raises
    ``TraceFormatError`` when the file has no ``traceEvents`` array."""
    seen = False
    with JsonObjectStream(path, stream_keys={"traceEvents"}, batch=runs, boundary=EVENT_BOUNDARY) as stream:
        for key, value in stream.items():
            if key != "traceEvents":
                on_key(key, value, seen)
                continue
            seen = True
            index = 0
            for element in value:
                for event in element if type(element) is DecodedRun else (element,):
                    yield index, event
                    index += 1
    if not seen:
        raise TraceFormatError(os.fspath(path), "no 'traceEvents' array: not a Kineto trace")

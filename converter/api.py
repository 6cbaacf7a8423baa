"""Typed entry points: everything the command line does, as functions.

* ``convert``: one merged or host trace -> ``.et`` (byte-identical to ``chakra_converter`` by default);
* ``convert_pair``: a host trace and its Kineto trace, linked and converted in one process;
* ``link``: host + Kineto -> the merged JSON ``chakra_trace_link`` writes;
* ``convert_all``: every rank found in a directory, in parallel processes;
* ``repair``: the last complete JSON object of a host trace that holds several;
* ``check``: ``.et`` files (ours or anyone's) read back and checked against what ASTRA-sim accepts.

Every function raises a ``ConverterError`` subclass on input it cannot handle or an output it
cannot write (``OutputError``: checked before any work, and every ``OSError`` of writing) and then
leaves no output behind (``convert_all`` reports failing ranks in its result instead).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from typing import Any

from .check.rules import CheckReport
from .check.rules import check as _check
from .convert.pipeline import ConversionResult, ConvertOptions, RemovedEdge, convert_file
from .convert.writer import Progress
from .errors import TraceFormatError
from .et.decode import read_et
from .io import (  # the log file of the command line: appended to, never truncated; its checks
    open_log,
    read_side_input,
    same_file,
)
from .link.pipeline import LinkResult
from .link.pipeline import link as _link
from .ranks import commgroups
from .ranks.commgroups import CommGroups
from .ranks.convert_all import MultiRankResult, RankOutcome
from .ranks.convert_all import convert_all as _convert_all
from .ranks.convert_all import uses_file as _convert_all_uses
from .ranks.pair import PairResult
from .ranks.pair import convert_pair as _convert_pair
from .repair import RepairResult
from .repair import repair as _repair

PathArg = str | os.PathLike[str]

__all__ = [
    "CheckReport",
    "CommGroups",
    "ConversionResult",
    "ConvertOptions",
    "LinkResult",
    "MultiRankResult",
    "PairResult",
    "PathArg",
    "Progress",
    "RankOutcome",
    "RemovedEdge",
    "RepairResult",
    "check",
    "convert",
    "convert_all",
    "convert_all_uses",
    "convert_pair",
    "link",
    "open_log",
    "repair",
    "same_file",
    "write_comm_groups",
]


def convert(
    input_path: PathArg, output_path: PathArg, options: ConvertOptions | None = None, *,
    progress: Progress | None = None,
) -> ConversionResult:
    """Convert a merged (or host) trace, ``.json`` or ``.json.gz``, into a Chakra ``.et`` file."""
    return convert_file(_path("input_path", input_path), _path("output_path", output_path),
                        _options(options), _callable("progress", progress))


def convert_pair(
    host_path: PathArg, device_path: PathArg, output_path: PathArg, options: ConvertOptions | None = None, *,
    rank: int | None = None, keep_merged: PathArg | None = None, allow_mismatch: bool = False,
    progress: Progress | None = None,
) -> PairResult:
    """Link a host trace with its Kineto trace and convert the result; ``keep_merged`` also writes
    the merged JSON. ``rank`` is checked against the Kineto trace's; a pair that does not belong
    together is refused unless ``allow_mismatch``."""
    return _convert_pair(
        _path("host_path", host_path), _path("device_path", device_path), _path("output_path", output_path),
        _options(options), rank=_int("rank", rank), keep_merged=_path("keep_merged", keep_merged, optional=True),
        allow_mismatch=_bool("allow_mismatch", allow_mismatch), progress=_callable("progress", progress),
    )


def link(
    host_path: PathArg, device_path: PathArg, output_path: PathArg | None, *, rank: int | None = None,
    allow_mismatch: bool = False,
) -> LinkResult:
    """Write the merged trace ``chakra_trace_link`` writes for this pair (``.gz`` output is gzipped);
    with ``output_path`` None, only link and check the pair."""
    return _link(_path("host_path", host_path), _path("device_path", device_path),
                 _path("output_path", output_path, optional=True), rank=_int("rank", rank),
                 allow_mismatch=_bool("allow_mismatch", allow_mismatch))


def convert_all(
    directory: PathArg, output_dir: PathArg, options: ConvertOptions | None = None, *, jobs: int | None = None,
    prefix: str = "trace", allow_mismatch: bool = False, on_rank_done: Callable[[RankOutcome], None] | None = None,
    ray_address: str | None = None,
) -> MultiRankResult:
    """Link and convert every rank in ``directory`` into ``output_dir/<prefix>.<rank>.et``, ``jobs``
    ranks at a time (or each a task on the Ray cluster at ``ray_address``, "auto" for the local one),
    and write ``comm_group.json``; failing ranks are reported, not raised."""
    if not isinstance(prefix, str):
        raise TypeError(f"prefix must be a str, got {type(prefix).__name__}")
    if ray_address is not None and not isinstance(ray_address, str):
        raise TypeError(f"ray_address must be a str or None, got {type(ray_address).__name__}")
    return _convert_all(_path("directory", directory), _path("output_dir", output_dir), _options(options),
                        jobs=_jobs("jobs", jobs), prefix=prefix, allow_mismatch=_bool("allow_mismatch", allow_mismatch),
                        on_rank_done=_callable("on_rank_done", on_rank_done), ray_address=ray_address)


def write_comm_groups(device_traces: Sequence[PathArg], output_path: PathArg) -> CommGroups:
    """Write ASTRA-sim's communicator group file for a job from its ranks' Kineto traces."""
    return commgroups.write_for_job(_paths("device_traces", device_traces), _path("output_path", output_path))


def repair(input_path: PathArg, output_path: PathArg) -> RepairResult:
    """Keep the last complete JSON object of a file that holds several (``.gz`` output is gzipped)."""
    return _repair(_path("input_path", input_path), _path("output_path", output_path))


def check(paths: PathArg | Sequence[PathArg], comm_groups: PathArg | None = None) -> CheckReport:
    """Read ``.et`` files (one per rank, ``<prefix>.<rank>.et``; one path alone is one file) and
    check them, with the communicator groups of ``comm_groups`` (``{"<id>": [ranks]}``) if given,
    against ASTRA-sim."""
    files = _paths("paths", paths)
    groups = _path("comm_groups", comm_groups, optional=True)
    traces = [read_et(path) for path in files]
    return _check(traces, None if groups is None else _read_comm_groups(groups))


def _read_comm_groups(path: str) -> dict[str, Any]:
    try:
        groups = json.loads(read_side_input(path, "--comm-groups"))
    except (ValueError, RecursionError) as exc:
        raise TraceFormatError(path, f"not a JSON communicator group file: {exc}") from None
    if not isinstance(groups, dict):
        raise TraceFormatError(path, 'not a communicator group file: expected {"<id>": [ranks], ...}')
    return groups


def convert_all_uses(path: PathArg, directory: PathArg, output_dir: PathArg, prefix: str = "trace") -> bool:
    """Whether ``convert_all(directory, output_dir, prefix=prefix)`` could read or write ``path``
    (a trace of the directory, an output): such a path cannot be a log file."""
    return _convert_all_uses(_path("path", path), _path("directory", directory), _path("output_dir", output_dir),
                             prefix)


# -- reliability --
# What the command line needs to end a command truthfully: which outputs are already in place
# when a signal comes, the last commit and its report made one step, streams a caller closed.
from ._early import standard_descriptors  # noqa: E402
from .errors import shown  # noqa: E402
from .io import (  # noqa: E402
    committed_outputs,
    forget_committed,
    hold_signals_after_commit,
    release_held_signals,
)

__all__ += [
    "committed_outputs",
    "forget_committed",
    "hold_signals_after_commit",
    "release_held_signals",
    "shown",
    "standard_descriptors",
]


# -- argument checks --
# Every entry point checks its arguments: a wrong type is a TypeError naming the argument, a bad
# value a ValueError (or the package's error), the same values the command line refuses.
def _path(name: str, value: Any, *, optional: bool = False) -> Any:
    if value is None and optional:
        return None
    if isinstance(value, (str, os.PathLike)):
        path = os.fspath(value)
        if isinstance(path, str):
            return path
    raise TypeError(f"{name} must be a path (str or os.PathLike[str]), got {type(value).__name__}")


def _paths(name: str, value: Any) -> list[str]:
    """A list of paths; one path alone (a str is not taken letter by letter) is a list of one."""
    if isinstance(value, (str, os.PathLike)):
        return [_path(name, value)]
    if isinstance(value, (bytes, dict)) or not hasattr(value, "__iter__"):
        raise TypeError(f"{name} must be a path or a list of paths, got {type(value).__name__}")
    paths = [_path(f"{name}[{k}]", item) for k, item in enumerate(value)]
    if not paths:
        raise ValueError(f"{name}: no file given")
    return paths


def _options(value: Any) -> ConvertOptions:
    if value is None:
        return ConvertOptions()
    if not isinstance(value, ConvertOptions):
        raise TypeError(f"options must be a ConvertOptions or None, got {type(value).__name__}")
    return value


def _int(name: str, value: Any) -> Any:
    if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
        raise TypeError(f"{name} must be an int or None, got {type(value).__name__}")
    return value


def _jobs(name: str, value: Any) -> Any:
    _int(name, value)
    if value is not None and value < 1:
        raise ValueError(f"{name} must be at least 1 (or None: one per CPU), got {value}")
    return value


def _bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__}")
    return value


def _callable(name: str, value: Any) -> Any:
    if value is not None and not callable(value):
        raise TypeError(f"{name} must be callable or None, got {type(value).__name__}")
    return value

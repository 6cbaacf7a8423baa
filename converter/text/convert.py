"""A text workload -> ``PREFIX.<npu>.et`` for every NPU (and ``PREFIX.comm_group.json`` where its
collectives span communicator groups), all written or none."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass

from .._types import Progress
from ..errors import OptionError, OutputError, TraceContentError
from ..et import wire
from ..io.output import OutputTarget, check_output
from ..io.outputset import OutputSet
from ..io.read import check_input
from ..schema.chakra import GLOBAL_METADATA_FIELDS
from .groups import Groups
from .layout import LAYOUTS, Emitter
from .replay import Recorded, Replay
from .workload import REFERENCE_TYPES, Workload, read_workload

#: The most NPUs (one file each) and training passes a workload is written for (memory does not
#: grow with the passes; the files do: about 9 bytes per node).
MAX_NPUS = 1 << 20
MAX_PASSES = 1_000_000
SCHEMA = "1.0.2-chakra.1.0.0"  # what chakra_converter Text writes in the GlobalMetadata
_TAG_METADATA_ATTR = wire.key(GLOBAL_METADATA_FIELDS["attr"])


@dataclass(frozen=True)
class TextResult:
    input: str
    kind: str
    layers: int
    npus: int
    passes: int
    outputs: list[str]
    comm_group_path: str | None
    nodes_per_npu: int
    bytes_written: int
    seconds: float

    @property
    def reference_type(self) -> bool:
        """Whether ``chakra_converter Text`` converts this type (the output is then its bytes)."""
        return self.kind in REFERENCE_TYPES


def convert_text(
    input_path: str,
    prefix: str,
    npus: int,
    passes: int,
    *,
    first_dim: int | None = None,
    progress: Progress | None = None,
) -> TextResult:
    """Write ``prefix.<npu>.et`` for ``npus`` NPUs and ``passes`` training passes of the workload."""
    started = time.perf_counter()
    if not 1 <= npus <= MAX_NPUS:
        raise OptionError(f"`npus` {npus}: must be from 1 to {MAX_NPUS:,}")
    if not 0 <= passes <= MAX_PASSES:
        raise OptionError(f"`passes` {passes}: must be from 0 to {MAX_PASSES:,}")
    check_input(input_path)
    workload = read_workload(input_path)
    groups = _groups(workload, npus, first_dim)
    outputs = [f"{prefix}.{rank}.et" for rank in range(npus)]
    group_path = f"{prefix}.comm_group.json"
    found = targets([*outputs, group_path], input_path)
    metadata = global_metadata(workload.text)
    layout = LAYOUTS[workload.kind]
    next_id = written = per_npu = 0
    same_files = workload.kind in (*REFERENCE_TYPES, "DISTRIBUTED_INFERENCE", "DATA_REORDER")  # no group by rank
    recorded: list[Recorded] | None = [] if same_files else None
    replay: Replay | None = None
    with OutputSet(unnamed=True, shown=f"{prefix}.*") as files:
        for rank, target in enumerate(found[:-1]):
            with files.open(target) as out:
                out.write(metadata)
                rendered = None if replay is None else replay.render(next_id)
                if rendered is not None:
                    for chunk in rendered:
                        out.write(chunk)
                    last_id = next_id + per_npu
                else:
                    emitter = Emitter(out.write, next_id, rank, groups, recorded)
                    layout(workload, emitter, passes)
                    emitter.flush()
                    last_id = emitter.next_id
                    if recorded is not None:
                        replay, recorded = Replay(recorded, emitter.pass_starts, passes), None
                written += out.tell()
            per_npu, next_id = last_id - next_id, last_id
            if progress is not None:
                progress("ranks", rank + 1, npus)
        members = groups.members()
        if members:
            with files.open(found[-1]) as out:
                out.write(json.dumps(members).encode())
        files.commit()
    return TextResult(
        input_path,
        workload.kind,
        len(workload.layers),
        npus,
        passes,
        outputs,
        group_path if members else None,
        per_npu,
        written,
        time.perf_counter() - started,
    )


def targets(paths: list[str], *inputs: str) -> list[OutputTarget]:
    """``check_output`` of each path (checked before any work), refusing a path named twice."""
    found: list[OutputTarget] = []
    seen: set[str] = set()
    for path in paths:
        target = check_output(path, *inputs)
        if target.final in seen:
            raise OutputError(path, "named twice among the outputs")
        seen.add(target.final)
        found.append(target)
    return found


def global_metadata(text: str) -> bytes:
    """The reference's GlobalMetadata: the schema and the whole input file."""
    message = b"".join(
        wire.string_attr(wire.attr_name(name), value, name, _TAG_METADATA_ATTR)
        for name, value in (("schema", SCHEMA), ("input_file", text))
    )
    return wire.delimited_message(message)


def _groups(workload: Workload, npus: int, first_dim: int | None) -> Groups:
    if first_dim is not None and workload.kind != "HYBRID_CUSTOMIZED":
        raise OptionError(f"`first_dim` is for HYBRID_CUSTOMIZED workloads; {workload.path} is {workload.kind}")
    transformer = workload.kind.startswith("HYBRID_TRANSFORMER")
    block = workload.model_parallel_group if transformer else npus if first_dim is None else first_dim
    try:
        return Groups(npus, block)
    except ValueError:
        if transformer:
            raise TraceContentError(
                workload.path,
                f"line 1: model_parallel_NPU_group {block} does not divide the {npus} NPUs into equal groups",
            ) from None
        raise OptionError(f"`first_dim` {block} does not divide the {npus} NPUs into equal groups") from None


def uses_file(path: str, prefix: str, npus: int) -> bool:
    """Whether ``path`` is one of the outputs of ``prefix`` (it cannot be a log file then)."""
    folder, name = os.path.split(os.path.abspath(path))
    base_folder, base = os.path.split(os.path.abspath(prefix))
    if folder != base_folder or not name.startswith(f"{base}."):
        return False
    rest = name[len(base) + 1 :]
    return rest == "comm_group.json" or (rest.endswith(".et") and rest[:-3].isdigit() and int(rest[:-3]) < npus)

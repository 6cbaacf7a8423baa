"""One rank: its host and Kineto traces linked, and the merged nodes converted in one process."""

from __future__ import annotations

from dataclasses import dataclass, replace

from .._types import Progress
from ..convert.pipeline import ConversionResult, ConvertOptions, convert_document, convert_file
from ..errors import ConverterError, OutputError
from ..et.encode import PROCESS_GROUPS
from ..io.output import check_output, check_side_output
from ..io.read import check_input
from ..link.pipeline import LinkResult, link, link_document
from ..link.steps import StepChoice
from .discover import distributed_info
from .jobsize import host_world_size, job_metadata


@dataclass(frozen=True)
class PairResult:
    link: LinkResult
    conversion: ConversionResult


def convert_pair(
    host_path: str,
    device_path: str,
    output_path: str,
    options: ConvertOptions,
    *,
    rank: int | None = None,
    keep_merged: str | None = None,
    allow_mismatch: bool = False,
    progress: Progress | None = None,
    steps: StepChoice = None,
) -> PairResult:
    """Link and convert. The merged JSON goes straight into the converter as it is made; it is
    written only with ``keep_merged`` (then it is converted from that file)."""
    check_input(host_path)
    check_input(device_path)
    target = check_output(output_path, host_path, device_path)
    if keep_merged is not None:
        merged = check_side_output(keep_merged, "`keep_merged`", host_path, device_path, regular=True)
        if merged.final == target.final:
            raise OutputError(keep_merged, "the merged trace and the output would be the same file")
        linked = link(host_path, device_path, keep_merged, rank=rank, allow_mismatch=allow_mismatch, steps=steps)
        options = _job_options(options, linked, host_path, device_path)
        return PairResult(linked, convert_file(keep_merged, output_path, options, progress))
    linked, document = link_document(
        host_path,
        device_path,
        target,
        rank=rank,
        allow_mismatch=allow_mismatch,
        parallel=options.jobs != 1,
        steps=steps,
    )
    options = _job_options(options, linked, host_path, device_path)
    return PairResult(linked, convert_document(document, target, options, source_name=linked.host_path))


def _job_options(options: ConvertOptions, linked: LinkResult, host_path: str, device_path: str) -> ConvertOptions:
    """The rank (the Kineto trace says which) and, for ASTRA-sim, the job's size and process groups
    as the traces record them."""
    if options.rank is None and linked.rank is not None:
        options = replace(options, rank=linked.rank)
    if options.astra_sim and options.world_size is None:
        world = linked.world_size or host_world_size(host_path)
        if world is not None:
            options = replace(options, world_size=world)
    if options.astra_sim and options.process_groups is None:
        try:
            info = distributed_info(device_path)
        except ConverterError:  # the link read it: not here, then nothing to record
            info = {}
        if options.world_size is not None:
            info = {**info, "world_size": options.world_size}
        groups = job_metadata(info, options.rank).get(PROCESS_GROUPS)
        if groups is not None:
            options = replace(options, process_groups=groups)
    return options

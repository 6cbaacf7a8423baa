"""One rank: its host and Kineto traces linked, and the merged nodes converted in one process."""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..convert.pipeline import ConversionResult, ConvertOptions, convert_document, convert_file
from ..convert.writer import Progress
from ..errors import OutputError
from ..io import check_input, check_output, check_side_output
from ..link.pipeline import LinkResult, link, link_document
from ..link.steps import StepChoice


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
        merged = check_side_output(keep_merged, "--keep-merged", host_path, device_path, regular=True)
        if merged.final == target.final:
            raise OutputError(keep_merged, "the merged trace and the output would be the same file")
        linked = link(host_path, device_path, keep_merged, rank=rank, allow_mismatch=allow_mismatch, steps=steps)
        if options.rank is None and linked.rank is not None:
            options = replace(options, rank=linked.rank)
        return PairResult(linked, convert_file(keep_merged, output_path, options, progress))
    linked, document = link_document(host_path, device_path, target, rank=rank, allow_mismatch=allow_mismatch,
                                     parallel=options.jobs != 1, steps=steps)
    if options.rank is None and linked.rank is not None:  # the Kineto trace says which rank this is
        options = replace(options, rank=linked.rank)
    return PairResult(linked, convert_document(document, target, options, source_name=linked.host_path))


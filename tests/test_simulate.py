"""--simulate: our event-driven run issues every op at the same time as the reference's 1-us loop."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

from chakra_convert_fast.converter import ConvertOptions, convert
from chakra_convert_fast.fixtures.generate import generate_merged, make_config
from chakra_convert_fast.fixtures.reference import reference_convert

from .traces import REAL_TRACES_DIR

ISSUE = re.compile(r"Issuing (?:CPU|GPU) Node ID (\d+) \(.*?\) at (\d+)us")


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.issued: list[tuple[int, int]] = []

    def emit(self, record: logging.LogRecord) -> None:
        found = ISSUE.match(record.getMessage())
        if found:
            self.issued.append((int(found.group(1)), int(found.group(2))))


def reference_issue_log(source: Path, tmp_path: Path) -> list[tuple[int, int]]:
    capture = _Capture()
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(capture)
    root.setLevel(logging.DEBUG)
    try:
        reference_convert(source, tmp_path / "ref.et", simulate=True)
    finally:
        root.removeHandler(capture)
        root.setLevel(old_level)
    return capture.issued


def _generated(tmp_path: Path) -> Path:
    config = make_config("gpt2", layers=1, ranks=2, comm_mix="all")
    return generate_merged(tmp_path / "g.json", config=config, order="shuffled", seed=3).path


@pytest.mark.parametrize(
    "source",
    [
        lambda tmp: REAL_TRACES_DIR / "cpu_gpt2_ddp2" / "rank0_merged_by_chakra_trace_link.json.gz",
        lambda tmp: REAL_TRACES_DIR / "host" / "chakra_1.0.2_host_2rank.json.gz",
        _generated,
    ],
    ids=["gpt2-merged", "host-2rank", "generated-gpu-nccl"],
)
def test_issue_times_match_the_reference(source, tmp_path: Path) -> None:
    path = source(tmp_path)
    expected = reference_issue_log(path, tmp_path)
    result = convert(path, tmp_path / "ours.et", ConvertOptions(simulate=True))
    assert result.simulation is not None
    assert result.simulation.issued == expected
    assert len(expected) == result.nodes_written

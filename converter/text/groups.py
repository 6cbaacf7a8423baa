"""The NPUs a collective spans, as ASTRA-sim communicator groups.

ASTRA-sim 1.0 gave each collective the network dimensions it involves; a Transformer's
model-parallel collectives span the first dimensions that hold ``model_parallel_NPU_group`` NPUs
(``Sys::break_dimension``) and its data-parallel ones the rest. Chakra nodes name a communicator
group instead (``pg_name``, defined in ASTRA-sim's ``--comm-group-configuration`` file): the
first dimensions are blocks of consecutive NPUs (NPU ids grow along the first dimension first),
the rest the NPUs at the same place in every block. A group of every NPU is the default group
(``pg_name`` left out); a collective over one NPU is not written (1.0 issued none: "all dims
disabled").
"""

from __future__ import annotations

from enum import Enum


class Span(Enum):
    ALL = "all"
    MODEL = "model"  # a Transformer's model-parallel group: blocks of model_parallel_NPU_group NPUs
    DATA = "data"  # the NPUs at the same place in every model-parallel block
    FIRST = "first"  # the network's first dimension: blocks of --first-dim NPUs
    REST = "rest"  # the other dimensions


class Groups:
    """Communicator groups of ``npus`` NPUs cut in blocks of ``block`` (both MODEL/DATA and
    FIRST/REST: a workload uses one of the two pairs). Ids: block ``g`` is ``1 + g``, the ranks at
    offset ``j`` of every block ``1 + npus // block + j`` (ASTRA-sim reserves 0)."""

    def __init__(self, npus: int, block: int) -> None:
        if block < 1 or npus % block:
            raise ValueError(f"{block} NPUs per block do not divide the {npus} NPUs")
        self.npus = npus
        self.block = block
        self.used: set[int] = set()

    def pg_name(self, span: Span, rank: int) -> str | None:
        """The group of ``rank`` for a collective over ``span``: "" for every NPU, None for one."""
        if span is Span.ALL:
            return ""
        blocks = self.npus // self.block
        if span in (Span.MODEL, Span.FIRST):
            size, group = self.block, 1 + rank // self.block
        else:
            size, group = blocks, 1 + blocks + rank % self.block
        if size == 1:
            return None
        if size == self.npus:
            return ""
        self.used.add(group)
        return str(group)

    def members(self) -> dict[str, list[int]]:
        """The groups named so far, as ASTRA-sim's communicator group file: ``{"<id>": [ranks]}``."""
        blocks = self.npus // self.block
        found: dict[str, list[int]] = {}
        for group in sorted(self.used):
            if group <= blocks:
                start = (group - 1) * self.block
                found[str(group)] = list(range(start, start + self.block))
            else:
                found[str(group)] = list(range(group - 1 - blocks, self.npus, self.block))
        return found

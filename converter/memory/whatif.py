"""The memory of a scaled job: each new rank's from the captured rank it copies.

``scale`` keeps each rank's batch (``chakra-profile --batch-size`` is per rank, as the compute
``scale`` copies), its tensor- and pipeline-parallel split and its stage, and changes the
data-parallel degree; each new rank copies the captured rank of its stage and tensor-parallel
place, so:

* DDP (and a plain ``scale``, data-parallel): nothing changes: every rank holds the whole
  model, its gradients and optimizer state whatever the degree;
* FSDP: the sharded bytes (parameters, gradients, optimizer state, at the step's start and at
  its peak) scale by ``captured degree / new degree``; the all-gathered units (communication
  buffers) and the activations keep their size (a unit is gathered whole at any degree).

The timeline is shifted by the change of the bytes live throughout (its shape is the captured
rank's). ``compact`` changes no tensor: its job has the same memory.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable

from .profile import RankMemory, encode, read_sidecar, sidecar_path

SHARDED = ("parameters", "gradients", "optimizer")


def scaled(memory: RankMemory, rank: int, source: int, shards: tuple[int, int] | None) -> RankMemory:
    """Captured rank ``source``'s memory as new rank ``rank``; ``shards``: (captured, new)
    FSDP degree, None where data parallelism replicates (DDP)."""
    baseline, at_peak = dict(memory.baseline), dict(memory.at_peak)
    if shards is not None:
        old, new = shards
        for part in (baseline, at_peak):
            for cat in SHARDED:
                part[cat] = part.get(cat, 0) * old // new
    shift = sum(baseline.values()) - sum(memory.baseline.values())
    peak = memory.peak_bytes + sum(at_peak.values()) - sum(memory.at_peak.values())
    how = {"rank": source, "source": memory.source}
    if shards is not None:
        how["fsdp_degree"] = list(shards)
    return dataclasses.replace(
        memory,
        rank=rank,
        peak_bytes=peak,
        at_peak=at_peak,
        baseline=baseline,
        timeline=[(x, b + shift) for x, b in memory.timeline],
        scaled_from=how if memory.scaled_from is None else {**how, "earlier": memory.scaled_from},
    )


def scaled_sidecars(
    in_prefix: str, captured: int, ranks: int, source: Callable[[int], int], shards: tuple[int, int] | None
) -> list[tuple[int, bytes]] | None:
    """The new job's sidecars (rank, bytes), or None when the captured job has none."""
    paths = [sidecar_path(in_prefix, k) for k in range(captured)]
    if not all(os.path.isfile(p) for p in paths):
        return None
    found = [read_sidecar(p) for p in paths]
    return [(r, encode(scaled(found[source(r)], r, source(r), shards))) for r in range(ranks)]

"""Node id -> row: the lookup every dependency goes through, made once all rows are read.

Trace writers number nodes densely (PyTorch's observer counts them up from 1), so the index is
mostly an array over the ids' span, 8 bytes a slot, where a dict costs ~100 bytes an id (the
entry and two int objects). Ids spread wider than ``_DENSE_FACTOR`` times the node count
(hand-made traces, hashes as ids) get a dict instead.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from itertools import pairwise

_DENSE_FACTOR = 2  # an array over the ids' span while it is at most this many slots a node
_DENSE_SLACK = 1 << 16  # ... plus this many (small traces)
ABSENT = -2  # ``rows``: the id names no row


class DuplicateId(Exception):
    """Two rows with the same id: the row that had it first, and the first row that repeats it."""

    def __init__(self, node_id: int, first_row: int, row: int) -> None:
        super().__init__(node_id, first_row, row)
        self.node_id, self.first_row, self.row = node_id, first_row, row


class IdIndex:
    """The row of each id of ``ids`` (which must not repeat one: ``DuplicateId``); ``ascending``
    says they strictly increase, if the caller knows."""

    def __init__(self, ids: Sequence[int], ascending: bool | None = None) -> None:
        self._low = min(ids) if ids else 0
        span = max(ids) - self._low + 1 if ids else 0
        self._table: array[int] | None = None
        self._dict: dict[int, int] = {}
        if span <= _DENSE_FACTOR * len(ids) + _DENSE_SLACK:
            if ascending is None:
                ascending = all(a < b for a, b in pairwise(ids))
            self._table = _dense(ids, self._low, span, ascending)
        else:
            self._dict = _sparse(ids)

    def get(self, node_id: int, default: int = -1) -> int:
        """The row of ``node_id``, or ``default`` if no node has it."""
        table = self._table
        if table is None:
            return self._dict.get(node_id, default)
        slot = node_id - self._low
        if 0 <= slot < len(table):
            row: int = table[slot]
            if row >= 0:
                return row
        return default

    def __getitem__(self, node_id: int) -> int:
        row = self.get(node_id)
        if row < 0:
            raise KeyError(node_id)
        return row

    def rows(self, node_ids: Sequence[int], present: Sequence[int]) -> array[int]:
        """The row of each of ``node_ids`` whose ``present`` flag is set; -1 where it is not,
        ``ABSENT`` where the id names no row."""
        found = array("l", [-1]) * len(node_ids)
        table, low = self._table, self._low
        if table is None:
            lookup = self._dict.get
            for position, (node_id, flag) in enumerate(zip(node_ids, present, strict=True)):
                if flag:
                    found[position] = lookup(node_id, ABSENT)
            return found
        size = len(table)
        for position, (node_id, flag) in enumerate(zip(node_ids, present, strict=True)):
            if flag:
                slot = node_id - low
                row = table[slot] if 0 <= slot < size else -1
                found[position] = row if row >= 0 else ABSENT
        return found


def _dense(ids: Sequence[int], low: int, span: int, ascending: bool) -> array[int]:
    if ascending and len(ids) == span:  # every id once, in order
        return array("l", range(span))
    table = array("l", [-1]) * span
    if ascending:  # no id twice
        for row, node_id in enumerate(ids):
            table[node_id - low] = row
        return table
    for row, node_id in enumerate(ids):
        slot = node_id - low
        if table[slot] >= 0:
            raise DuplicateId(node_id, table[slot], row)
        table[slot] = row
    return table


def _sparse(ids: Sequence[int]) -> dict[int, int]:
    index = dict(zip(ids, range(len(ids)), strict=True))
    if len(index) < len(ids):
        index.clear()
        for row, node_id in enumerate(ids):
            first = index.setdefault(node_id, row)
            if first != row:
                raise DuplicateId(node_id, first, row)
    return index


__all__ = ["ABSENT", "DuplicateId", "IdIndex"]

"""``SortedKeys``: a sorted multiset of comparable keys, for the graph's searches over GPU op ends.

Kept as sorted runs of at most ``2 * LOAD`` keys, found by bisecting the runs' last keys (the design
of ``sortedcontainers.SortedList``, which the package does not depend on): adding or removing a key
costs two binary searches and a move of at most ``2 * LOAD`` references, so n operations take
about n log n, where one sorted list would move n keys per insertion.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections.abc import Iterator
from typing import Any

LOAD = 512


class SortedKeys:
    def __init__(self) -> None:
        self._runs: list[list[Any]] = []
        self._maxes: list[Any] = []  # each run's last key
        self.size = 0

    def __len__(self) -> int:
        return self.size

    def add(self, key: Any) -> None:
        runs, maxes = self._runs, self._maxes
        self.size += 1
        if not runs:
            runs.append([key])
            maxes.append(key)
            return
        at = bisect_left(maxes, key)
        if at == len(maxes):
            at -= 1
            runs[at].append(key)
            maxes[at] = key
        else:
            insort(runs[at], key)
        run = runs[at]
        if len(run) > 2 * LOAD:
            half = run[LOAD:]
            del run[LOAD:]
            maxes[at] = run[-1]
            runs.insert(at + 1, half)
            maxes.insert(at + 1, half[-1])

    def remove(self, key: Any) -> None:
        """Remove one ``key``; ``ValueError`` if there is none."""
        at = bisect_left(self._maxes, key)
        if at == len(self._maxes):
            raise ValueError(f"{key!r} is not in the keys")
        run = self._runs[at]
        i = bisect_left(run, key)
        if run[i] != key:
            raise ValueError(f"{key!r} is not in the keys")
        del run[i]
        self.size -= 1
        if not run:
            del self._runs[at]
            del self._maxes[at]
        elif i == len(run):
            self._maxes[at] = run[-1]

    def at_most(self, key: Any) -> Iterator[Any]:
        """The keys <= ``key``, largest first."""
        at = bisect_right(self._maxes, key)
        if at < len(self._runs):
            run = self._runs[at]
            yield from reversed(run[: bisect_right(run, key)])
        for index in range(at - 1, -1, -1):
            yield from reversed(self._runs[index])

    def between(self, low: Any, high: Any) -> Iterator[Any]:
        """The keys from ``low`` to ``high`` (both included), smallest first."""
        at = bisect_left(self._maxes, low)
        first = True
        for index in range(at, len(self._runs)):
            run = self._runs[index]
            for i in range(bisect_left(run, low) if first else 0, len(run)):
                if run[i] > high:
                    return
                yield run[i]
            first = False

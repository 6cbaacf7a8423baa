"""The other NPUs' files of a workload whose files differ only in their node ids.

``chakra_converter`` numbers the nodes of NPU ``r``'s file on from NPU ``r - 1``'s, and every
training pass after the first is the one before with its ids shifted (a node depends on nodes of
its own pass and of the pass before). So the first file's first passes are recorded as it is
encoded (each node's constant parts, its dependencies as positions), and a later file is made
pass by pass from them: the first pass, then every other pass from the second one's record, ids
taken from a window over the pass and the one before it. Where a window's ids all take the same
number of varint bytes, a run of nodes is one ``bytes`` template with a ``%b`` hole for each id,
filled in C (``template % ids``); elsewhere (ids straddling 128, 16,384, 2**21, ...) each node is
encoded from its record. Memory follows the size of a pass, not of a file.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from operator import itemgetter

from ..et.encode import TAG_DATA, TAG_ID
from ..et.wire import SMALL, varint

#: One recorded node: (name and type fields, the rest of the node), dependencies as positions.
Recorded = tuple[tuple[bytes, bytes], tuple[int, ...]]
#: Passes recorded: the first, the second (the pattern of every later one) and the third (checked
#: to be the second shifted by a pass).
RECORDED_PASSES = 3
_CHUNK = 8192  # nodes per template: bounds the bytes held at once
Pick = Callable[[Sequence[bytes]], tuple[bytes, ...]]
_Pass = list[Recorded]  # a pass's nodes, positions counted from the start of the pass before it


class Replay:
    def __init__(self, nodes: list[Recorded], pass_starts: list[int], passes: int) -> None:
        """``nodes``: the first file's recorded passes; ``pass_starts``: where each pass began."""
        self.passes = passes
        self._patterns: list[_Pass] | None = _patterns(nodes, pass_starts, passes)
        self.size = 0 if not pass_starts else (pass_starts[1] if len(pass_starts) > 1 else len(nodes))
        self._templates: dict[tuple[int, int], list[tuple[bytes, Pick]] | None] = {}

    def render(self, first_id: int) -> Iterator[bytes] | None:
        """The node records of a file whose ids start at ``first_id`` (None: not made here)."""
        if self._patterns is None or first_id == 0 or not self.passes or not self.size:
            return None
        return self._render(first_id)

    def _render(self, first_id: int) -> Iterator[bytes]:
        size = self.size
        window = list(map(varint, range(first_id, first_id + size)))  # pass 0's ids
        yield from self._pass(0, window)
        for number in range(1, self.passes):
            start = first_id + number * size
            window = window[-size:] + list(map(varint, range(start, start + size)))
            yield from self._pass(1, window)

    def _pass(self, pattern: int, ids: list[bytes]) -> Iterator[bytes]:
        width = len(ids[0])
        key = (pattern, width)
        if len(ids[-1]) == width and key not in self._templates:
            self._templates[key] = _templates(self._nodes(pattern), width, 0 if pattern == 0 else self.size)
        chunks = self._templates.get(key) if len(ids[-1]) == width else None
        if chunks is not None:
            for template, pick in chunks:
                yield template % pick(ids)
        else:
            yield _encode(self._nodes(pattern), ids, 0 if pattern == 0 else self.size)

    def _nodes(self, pattern: int) -> _Pass:
        assert self._patterns is not None
        return self._patterns[pattern]


def _patterns(nodes: list[Recorded], starts: list[int], passes: int) -> list[_Pass] | None:
    """The first pass and the pattern of the later ones, or None if the passes are not alike."""
    if not starts or passes < 1:
        return None
    size = (starts[1] if len(starts) > 1 else len(nodes)) - starts[0]
    recorded = min(passes, RECORDED_PASSES)
    if starts[0] != 0 or len(nodes) != recorded * size or starts[:recorded] != [k * size for k in range(recorded)]:
        return None
    first = nodes[:size]
    second = [(parts, deps) for parts, deps in nodes[size : 2 * size]]
    if passes >= RECORDED_PASSES:  # the third pass must be the second, shifted by one pass
        for (parts, deps), (later_parts, later_deps) in zip(second, nodes[2 * size : 3 * size], strict=True):
            if later_parts != parts or later_deps != tuple(d + size for d in deps):
                return None
    if any(d < 0 for _, deps in second for d in deps):
        return None
    return [first, second]


def _templates(nodes: _Pass, width: int, offset: int) -> list[tuple[bytes, Pick]] | None:
    """``bytes`` templates of ``nodes`` (the node at index k has position ``offset + k``) for ids
    of ``width`` varint bytes; None where a dependency list would need a longer length prefix."""
    chunks = []
    for start in range(0, len(nodes), _CHUNK):
        pieces: list[bytes] = []
        order: list[int] = []
        for position, ((head, rest), deps) in enumerate(nodes[start : start + _CHUNK], offset + start):
            listed = width * len(deps)
            if listed >= 128:
                return None
            size = len(TAG_ID) + width + len(head) + len(rest) + (len(TAG_DATA) + 1 + listed if deps else 0)
            pieces += (_escape(varint(size) + TAG_ID), b"%b", _escape(head))
            if deps:
                pieces += (_escape(TAG_DATA + SMALL[listed]), b"%b" * len(deps))
            pieces.append(_escape(rest))
            order.append(position)
            order.extend(deps)
        chunks.append((b"".join(pieces), itemgetter(*order) if len(order) > 1 else _one(order[0])))
    return chunks


def _encode(nodes: _Pass, ids: list[bytes], offset: int) -> bytes:
    """The records one by one (as ``encode.delimited_node``; ids here are never 0)."""
    out = []
    for position, ((head, rest), deps) in enumerate(nodes, offset):
        if deps:
            listed = b"".join([ids[d] for d in deps])
            body = b"".join((TAG_ID, ids[position], head, TAG_DATA, varint(len(listed)), listed, rest))
        else:
            body = b"".join((TAG_ID, ids[position], head, rest))
        out.append(varint(len(body)) + body)
    return b"".join(out)


def _escape(constant: bytes) -> bytes:
    return constant.replace(b"%", b"%%")


def _one(position: int) -> Pick:
    """A tuple of one id (``itemgetter(k)`` returns the item itself, not a tuple)."""
    return lambda ids: (ids[position],)

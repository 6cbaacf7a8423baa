"""The other NPUs' files of a workload whose files differ only in their node ids.

``chakra_converter`` numbers the nodes of NPU ``r``'s file on from NPU ``r - 1``'s, so for the
types it converts every file is the first one with its ids shifted. While the first file is
encoded, each node's constant parts and its dependencies (as positions in the file) are recorded;
for a later file whose ids all take the same number of varint bytes, each run of nodes is then one
``bytes`` template with a ``%b`` hole for every id, filled in C (``template % ids``). A file whose
ids straddle a varint width (128, 16,384, 2**21, ...) is encoded node by node instead.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from operator import itemgetter

from ..et.encode import TAG_DATA, TAG_ID
from ..et.wire import SMALL, varint

#: One recorded node: (name and type fields, the rest of the node), dependencies as positions.
Recorded = tuple[tuple[bytes, bytes], tuple[int, ...]]
_CHUNK = 8192  # nodes per template: bounds the bytes and the ids held at once
Pick = Callable[[Sequence[bytes]], tuple[bytes, ...]]


class Replay:
    def __init__(self, nodes: list[Recorded]) -> None:
        self.nodes = nodes
        self._templates: dict[int, list[tuple[bytes, Pick]] | None] = {}

    def render(self, first_id: int) -> Iterator[bytes] | None:
        """The records of a file whose ids start at ``first_id``, or None where a template cannot
        make them (ids of several widths, or id 0, which protobuf leaves out)."""
        count = len(self.nodes)
        if first_id == 0 or not count:
            return None
        width = len(varint(first_id))
        if len(varint(first_id + count - 1)) != width:
            return None
        if width not in self._templates:
            self._templates[width] = self._build(width)
        chunks = self._templates[width]
        if chunks is None:
            return None
        ids = SMALL[first_id:first_id + count] if first_id + count <= len(SMALL) else \
            list(map(varint, range(first_id, first_id + count)))
        return (template % pick(ids) for template, pick in chunks)

    def _build(self, width: int) -> list[tuple[bytes, Pick]] | None:
        chunks = []
        for start in range(0, len(self.nodes), _CHUNK):
            pieces: list[bytes] = []
            order: list[int] = []
            for position, ((head, rest), deps) in enumerate(self.nodes[start:start + _CHUNK], start):
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


def _escape(constant: bytes) -> bytes:
    return constant.replace(b"%", b"%%")


def _one(position: int) -> Pick:
    """A tuple of one id (``itemgetter(k)`` returns the item itself, not a tuple)."""
    return lambda ids: (ids[position],)

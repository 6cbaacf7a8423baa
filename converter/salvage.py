"""Salvage a host trace that was cut off: the job died before the observer closed its file.

The ``ExecutionTraceObserver`` writes each node when its op ends and closes the document
(``]``, ``finish_ts``, ``}``) when it is unregistered. A job killed in between (the out-of-memory
killer, a time limit) leaves a file that ends after some node in the middle of its ``nodes``
array, or inside one; the nodes still in the observer's buffer, and those of every op still
running (the ``ProfilerStep`` itself, the process node), are lost.

``salvage`` reads such a file node by node (each one decoded by the standard library from a
buffer refilled as needed, so memory stays at one node plus a chunk), copies the text of every
complete node, and closes the document: ``"finish_ts": null`` marks the missing end time, and a
``"cut_off"`` object records what was kept. The linker reads both (``link/cutoff.py``).
"""

from __future__ import annotations

import codecs
import json
from dataclasses import dataclass
from typing import IO, Any

from .errors import TraceFormatError
from .io.read import TraceFile

_CHUNK = 1 << 20
_BLANK = " \t\n\r"
CUT_OFF_KEY = "cut_off"  # the top-level record of a salvaged trace
_KINETO_CUT = (
    "a Kineto trace cut off before its end: repair salvages host traces; the profiler writes a Kineto trace "
    "whole at its export: export or copy it again"
)


@dataclass(frozen=True)
class Salvaged:
    """What a cut-off trace gave: its complete nodes, the bytes after them, the nodes whose parent
    was never written."""

    nodes: int
    start: int  # where the document starts (a byte offset) and its last node ends (characters after it)
    end: int
    bytes_dropped: int  # characters after the last complete node (a cut node)
    orphans: int  # nodes whose ctrl_deps names no node that was written

    def describe(self) -> str:
        return (
            f"the trace was cut off (its job ended before the observer closed it): kept its "
            f"{self.nodes:,} complete nodes, dropped the {self.bytes_dropped:,} characters of a cut node "
            f"after them; {self.orphans:,} nodes name a parent that was never written; "
            "finish_ts marked missing (null)"
        )


class _Text:
    """The decoded text of a trace, read a chunk at a time; ``buf[pos:]`` is what is left."""

    def __init__(self, stream: TraceFile) -> None:
        self.stream = stream
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="strict")
        self.buf = ""
        self.pos = 0
        self.base = 0  # characters dropped from the front of buf
        self.eof = False

    def more(self, at_least: int = _CHUNK) -> bool:
        """Append at least ``at_least`` more characters (fewer at the end); False at the end."""
        if self.eof:
            return False
        if self.pos > _CHUNK:
            self.base += self.pos
            self.buf, self.pos = self.buf[self.pos :], 0
        read = 0
        while read < at_least:
            data = self.stream.read(_CHUNK)
            if not data:
                self.buf += self.decoder.decode(b"", final=True)
                self.eof = True
                break
            text = self.decoder.decode(data)
            self.buf += text
            read += len(text)
        return True

    def skip_blank(self) -> str:
        """The next character that is not blank ("" at the end)."""
        while True:
            while self.pos < len(self.buf) and self.buf[self.pos] in _BLANK:
                self.pos += 1
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self.more():
                return ""

    def value(self) -> tuple[Any, int, int] | None:
        """The next JSON value, decoded, and its span in ``buf``; None if the text ends inside it."""
        decoder = json.JSONDecoder()
        want = _CHUNK
        while True:
            start = self.pos
            try:
                value, end = decoder.raw_decode(self.buf, start)
            except json.JSONDecodeError:
                if not self.more(want):
                    return None
                want *= 2  # a node larger than what was read: read more each time
                continue
            except RecursionError:  # the scanner recurses once per level: nested too deep for a node
                return None
            if end == len(self.buf) and not self.eof and isinstance(value, int | float):
                self.more()  # a number cut at the buffer's end may go on
                continue
            self.pos = end
            return value, start, end


def salvage(stream: TraceFile, start: int, out: IO[str]) -> Salvaged | None:
    """Copy the complete nodes of the unclosed document at byte ``start`` of ``stream`` to ``out``,
    closed; None (``out`` untouched) if it is not a host trace or has no complete node. A node that
    is not an object with an id ends the salvage there, as a cut would."""
    skipped = 0
    while skipped < start:
        data = stream.read(min(_CHUNK, start - skipped))
        if not data:
            return None
        skipped += len(data)
    text = _Text(stream)
    header: list[tuple[str, Any]] = []
    if text.skip_blank() != "{":
        return None
    text.pos += 1
    while True:  # the keys before "nodes"
        if text.skip_blank() == ",":
            text.pos += 1
            text.skip_blank()
        key = text.value()
        if key is None or not isinstance(key[0], str) or text.skip_blank() != ":":
            return None
        text.pos += 1
        text.skip_blank()
        if key[0] == "nodes":
            break
        if key[0] == "traceEvents":
            raise TraceFormatError(stream.path, _KINETO_CUT)
        value = text.value()
        if value is None:
            return None
        header.append((key[0], value[0]))
    if text.skip_blank() != "[":
        return None
    text.pos += 1
    count = 0
    ids: set[Any] = set()
    parents: list[tuple[Any, Any]] = []
    end = text.base + text.pos
    written = False
    while True:
        mark = text.skip_blank()
        if mark == ",":
            text.pos += 1
            mark = text.skip_blank()
        if mark in ("", "]"):  # the end, or the array was closed (cut after it: keep every node)
            break
        found = text.value()
        if found is None:
            break
        node, first, last = found
        if not isinstance(node, dict) or "id" not in node:
            break
        if not written:
            out.write("{" + "".join(f"{json.dumps(k)}: {json.dumps(v)}, " for k, v in header) + '"nodes": [\n')
            written = True
        else:
            out.write(",\n")
        out.write(text.buf[first:last])
        ids.add(_hashable(node["id"]))
        parents.append((_hashable(node["id"]), _hashable(node.get("ctrl_deps"))))
        end = text.base + last
        count += 1
    if not written:
        return None
    while text.more():
        pass
    dropped = text.base + len(text.buf.rstrip()) - end
    orphans = sum(1 for node_id, parent in parents if parent is not None and parent != node_id and parent not in ids)
    record = {"nodes_kept": count, "characters_dropped": max(dropped, 0), "orphans": orphans}
    out.write(f'\n],\n"finish_ts": null,\n"{CUT_OFF_KEY}": {json.dumps(record)}\n}}\n')
    return Salvaged(count, start, end, max(dropped, 0), orphans)


def _hashable(value: Any) -> Any:
    return value if isinstance(value, int | float | str | bool) or value is None else repr(value)

"""Many trace nodes decoded per call, exactly as ``json`` decodes them, or refused.

The standard library's scanner decodes one node per call and builds every value of it, ~9 us a
node, most of it for parts the converter turns straight back into text (inputs, outputs) or that
repeat from node to node (attrs). msgspec decodes a whole run of nodes per call into
``FastNode``\\ s that keep those parts as raw JSON (``msgspec.Raw``), ~2 us a node; the reader
caches what the raw parts encode to, keyed by their bytes. ``fastjson`` says when msgspec's
values are exactly ``json``'s; a run is decoded as ``[`` + run + ``]``, so it is accepted only if it
is a comma-separated sequence of complete values: then its end is an element boundary too, and
the next run starts at a known element start (see ``jsonstream``).
"""

from __future__ import annotations

import json
import re
from typing import Any

import msgspec

from ..fastjson import ExactDecoder

#: ``attrs`` absent (``Raw`` of nothing: no JSON value is empty).
ABSENT = msgspec.Raw(b"")


class FastNode(msgspec.Struct, gc=False):
    """A node as the fast decoder sees it: the fields the converter reads (``None``, ``0``, ``""``
    where absent, as ``effective_fields`` defaults them) and the bulky parts as raw JSON."""

    id: Any
    name: Any
    ctrl_deps: Any
    inputs: msgspec.Raw
    outputs: msgspec.Raw
    attrs: msgspec.Raw = ABSENT
    exclusive_dur: Any = 0
    inter_thread_dep: Any = None
    cat: Any = None
    stream: Any = 0
    pg_name: Any = ""


class RawIO(msgspec.Struct, gc=False):
    """``inputs``/``outputs``: the three lists the output holds as text (``strides`` is skipped)."""

    values: msgspec.Raw
    shapes: msgspec.Raw
    types: msgspec.Raw


_IO = msgspec.json.Decoder(RawIO)
_ANY = msgspec.json.Decoder()
#: The nodes of ``[`` + a run of nodes + ``]``, or None where ``json`` could differ.
decode_nodes = ExactDecoder(msgspec.json.Decoder(list[FastNode]))


def decode_io(raw: msgspec.Raw) -> RawIO | None:
    """The three raw lists of an ``inputs``/``outputs`` object, or None if it is not one."""
    try:
        return _IO.decode(raw)
    except (msgspec.DecodeError, RecursionError):
        return None


def value_text(raw: msgspec.Raw | bytes) -> str | None:
    """``str()`` of the decoded JSON value, or None where msgspec refuses it (NaN, ...)."""
    text = bytes(raw)
    if text[:1] == b"[":
        parts = text.split(b'"')
        if not (
            b"".join(parts[0::2]).translate(None, _LIST_OF_INTS)
            or b"-0" in text
            or b"".join(parts[1::2]).translate(None, _PLAIN_STRING)
        ):
            return text.translate(None, _BLANK).replace(b",", b", ").replace(b'"', b"'").decode("ascii")
    try:
        return str(_ANY.decode(text))
    except (msgspec.DecodeError, RecursionError):
        return None


#: ``value_text`` without decoding: a list of (lists of) integers and strings of these characters is
#: written by ``str()`` as its JSON text without blank space, with ", " between items and ' for ".
#: No "-0" (it is 0), no escape, no quote nor comma nor space in strings; integers past the digit
#: limit never get here (``fastjson.has_long_digit_run``).
_LIST_OF_INTS = b"0123456789-[], \t\n\r"
_PLAIN_STRING = bytes(c for c in range(0x21, 0x7F) if c not in b"\\'\",")
_BLANK = b" \t\n\r"


def loads(raw: msgspec.Raw | bytes) -> Any:
    """The standard library's decoding of one raw value (exact by construction)."""
    return json.loads(bytes(raw))


def as_dict(node: FastNode) -> dict[str, Any]:
    """The node as ``json`` decodes it, as far as the reader can tell: the keys it reads, with the
    defaults ``effective_fields`` gives absent ones (an absent key and its default read the same)."""
    out = {
        "id": node.id,
        "name": node.name,
        "ctrl_deps": node.ctrl_deps,
        "inputs": loads(node.inputs),
        "outputs": loads(node.outputs),
        "exclusive_dur": node.exclusive_dur,
        "inter_thread_dep": node.inter_thread_dep,
        "cat": node.cat,
        "stream": node.stream,
        "pg_name": node.pg_name,
    }
    if node.attrs is not ABSENT:
        out["attrs"] = loads(node.attrs)
    return out


# -- attrs: the three that change from node to node, and the cached rest ----------------------
_INT = rb"(-?(?:0|[1-9][0-9]*))"
_ENTRY = rb'\{\s*"name"\s*:\s*"%s"\s*,\s*"type"\s*:\s*"[a-z0-9]*"\s*,\s*"value"\s*:\s*' + _INT + rb"\s*\}"
#: rf_id, fw_parent and seq_id first, each ``{"name", "type", "value"}`` with an integer value (the
#: profiler's layout); the rest of the list, which repeats, is a cache key.
_LEADING_ATTRS = re.compile(
    rb"\[\s*"
    + (_ENTRY % b"rf_id")
    + rb"\s*,\s*"
    + (_ENTRY % b"fw_parent")
    + rb"\s*,\s*"
    + (_ENTRY % b"seq_id")
    + rb"(.*)",
    re.DOTALL,
)
_LAYOUTS_KEPT = 8


#: rf_id, fw_parent, seq_id, and the text after seq_id's entry (``]`` or ``, {...}, ... ]``, maybe
#: after blank space)
LeadingAttrs = tuple[int, int, int, bytes]


class AttrsLayouts:
    """Finds rf_id, fw_parent and seq_id in raw ``attrs``. The general pattern allows blank space
    anywhere and any type name, and is slow; each text it matches teaches a literal pattern (that
    text with the three numbers left open), which matches the next nodes of the same layout ~3x
    faster and finds the same numbers: everything around them is the same text."""

    def __init__(self) -> None:
        self._literal: list[re.Pattern[bytes]] = []

    def leading(self, raw: msgspec.Raw) -> LeadingAttrs | None:
        """rf_id, fw_parent, seq_id and the raw rest of ``attrs``, or None for another layout."""
        for pattern in self._literal:
            found = pattern.match(raw)
            if found is not None:
                break
        else:
            found = _LEADING_ATTRS.match(raw)
            if found is None:
                return None
            self._learn(found)
        rf_id, fw_parent, seq_id, rest = found.groups()
        return int(rf_id), int(fw_parent), int(seq_id), rest

    def _learn(self, found: re.Match[bytes]) -> None:
        text = bytes(found.string)
        pieces = [
            text[: found.start(1)],
            text[found.end(1) : found.start(2)],
            text[found.end(2) : found.start(3)],
            text[found.end(3) : found.start(4)],
        ]
        literal = re.compile(_INT.join(map(re.escape, pieces)) + rb"(.*)", re.DOTALL)
        self._literal = [literal, *self._literal[: _LAYOUTS_KEPT - 1]]


def rest_entries(rest: bytes) -> Any:
    """The entries after seq_id's (``rest``: ``]`` or ``, ...]``), decoded by the standard library."""
    rest = rest.lstrip(b" \t\n\r")
    if rest == b"]":
        return []
    if rest[:1] != b",":
        raise ValueError("not the rest of a list")
    return json.loads(b"[" + rest[1:])

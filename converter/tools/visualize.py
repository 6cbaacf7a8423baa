"""``visualize``: a ``.et`` file as a graph, streamed: DOT or GraphML written node by node (no
graph in memory), PDF/SVG through graphviz's ``dot`` where it is installed.

The graph is ``chakra_visualizer``'s: a node per record (its id; label = its name), an edge from
each dependency to its node (data: ``arrowhead=normal`` / ``dependency="data"``; control:
``arrowhead=tee`` / ``dependency="control"``). The DOT text is what the reference builds with the
``graphviz`` package (the same statements, quoting and label escaping) before it hands it to
``dot``; the GraphML is what networkx reads as the reference's graph: the same nodes, edges and
attributes (a dependency listed as both data and control is one edge, ``control``, as
networkx's ``add_edge`` leaves it), with elements in file order rather than networkx's.

Cuts, to make a large trace something a person can look at (each needs a first pass over the
file that keeps ids and dependencies in flat arrays, 8 bytes each):

* ``ids=(first, last)``: the nodes whose id is in the range, and the edges between them;
* ``around=(id, depth)``: the nodes within ``depth`` dependency hops of ``id``, either way;
* ``collectives=depth``: the collective (and send/receive) nodes, and the nodes that depend on
  them up to ``depth`` hops.
"""

from __future__ import annotations

import os
import re
import shutil
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import IO

from .._types import Progress
from ..children import run_child
from ..errors import ConverterError, OptionError, OutputError
from ..et.records import EtNode, EtRecords
from ..io.output import OutputTarget, atomic_output, check_output
from ..io.read import check_input
from ..io.spill import SpillFile
from ..schema.chakra import COMM_NODE_TYPES

FORMATS = ("dot", "graphml", "pdf", "svg")


@dataclass(frozen=True, slots=True)
class Cut:
    """Which part of the trace to draw (all of it by default); see the module."""

    ids: tuple[int, int] | None = None
    around: tuple[int, int] | None = None
    collectives: int | None = None

    @property
    def whole(self) -> bool:
        return self.ids is None and self.around is None and self.collectives is None


#: The largest node id (``uint64``), and the deepest neighbourhood a cut draws.
MAX_NODE_ID = (1 << 64) - 1
MAX_DEPTH = 1 << 20


@dataclass(frozen=True, slots=True)
class VisualizeResult:
    output_path: str
    format: str
    nodes: int
    edges: int
    total_nodes: int


# -- DOT, as the graphviz package writes it ----------------------------------------------------------
_ESCAPE_LABEL = re.compile(r"([{}()<>\[\]|&-])")  # chakra_visualizer's escape_label
_DOT_ID = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*|-?(\.[0-9]+|[0-9]+(\.[0-9]*)?))$")
_DOT_HTML = re.compile(r"<.*>$", re.DOTALL)
_DOT_KEYWORDS = frozenset({"node", "edge", "graph", "digraph", "subgraph", "strict"})
_UNESCAPED_QUOTE = re.compile(r'(?P<backslashes>(?:\\{2})*)\\?(?P<quote>")')


def dot_quote(identifier: str) -> str:
    """A DOT identifier, quoted where graphviz's ``quote`` quotes it."""
    if _DOT_HTML.match(identifier):
        return identifier
    if not _DOT_ID.match(identifier) or identifier.lower() in _DOT_KEYWORDS:
        return '"' + _UNESCAPED_QUOTE.sub(r"\g<backslashes>\\\g<quote>", identifier) + '"'
    return identifier


def _dot_node(node: EtNode) -> str:
    label = dot_quote(_ESCAPE_LABEL.sub(r"\\\1", node.name))
    lines = [f"\t{node.id} [label={label} id={node.id} shape=record]\n"]
    lines.extend(f"\t{dep} -> {node.id} [arrowhead=normal]\n" for dep in node.data_deps)
    lines.extend(f"\t{dep} -> {node.id} [arrowhead=tee]\n" for dep in node.ctrl_deps)
    return "".join(lines)


# -- GraphML, as networkx writes it ---------------------------------------------------------------------
_GRAPHML_HEAD = """<?xml version='1.0' encoding='utf-8'?>
<graphml xmlns="http://graphml.graphdrawing.org/xmlns" \
xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" \
xsi:schemaLocation="http://graphml.graphdrawing.org/xmlns http://graphml.graphdrawing.org/xmlns/1.0/graphml.xsd">
  <key id="d1" for="edge" attr.name="dependency" attr.type="string" />
  <key id="d0" for="node" attr.name="label" attr.type="string" />
  <graph edgedefault="directed">
"""
_GRAPHML_TAIL = "  </graph>\n</graphml>\n"
# characters XML 1.0 cannot hold at all: replaced by U+FFFD so that every reader can read the file
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _xml_text(text: str) -> str:
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _NOT_XML.sub("\ufffd", text)


def _graphml_node(node: EtNode, edges: dict[int, str]) -> str:
    parts = [f'    <node id="{node.id}">\n      <data key="d0">{_xml_text(node.name)}</data>\n    </node>\n']
    parts.extend(
        f'    <edge source="{dep}" target="{node.id}">\n      <data key="d1">{kind}</data>\n    </edge>\n'
        for dep, kind in edges.items()
    )
    return "".join(parts)


def _edges(node: EtNode) -> dict[int, str]:
    """Dependency -> kind, as networkx's DiGraph keeps them (one edge a pair; the last kind set)."""
    edges = dict.fromkeys(node.data_deps, "data")
    edges.update(dict.fromkeys(node.ctrl_deps, "control"))
    return edges


# -- cuts ----------------------------------------------------------------------------------------------
def _selection(path: str, cut: Cut, progress: Progress | None) -> set[int] | None:
    """The node ids to draw (None: all). ``ids`` needs no pass; the others a first one."""
    if cut.whole or cut.ids is not None:
        return None
    ids, types, starts, deps = array("Q"), bytearray(), array("Q", [0]), array("Q")
    with EtRecords(path) as records:
        for count, node in enumerate(records.nodes(), 1):
            ids.append(node.id)
            types.append(node.type if 0 <= node.type < 256 else 0)
            deps.extend(node.data_deps)
            deps.extend(node.ctrl_deps)
            starts.append(len(deps))
            if progress is not None and count % 65536 == 0:
                progress("scan", records.position, records.size)
    if cut.around is not None:
        center, depth = cut.around
        if center not in ids:  # a linear search in C over the array: no set of every id
            raise OptionError(f"{path}: no node has id {center} (`around`)")
        return _expand(ids, starts, deps, {center}, depth, upstream=True)
    seeds = {ids[row] for row in range(len(ids)) if types[row] in COMM_NODE_TYPES}
    return _expand(ids, starts, deps, seeds, cut.collectives or 0, upstream=False)


def _expand(
    ids: array[int], starts: array[int], deps: array[int], seeds: set[int], depth: int, upstream: bool
) -> set[int]:
    """``seeds`` and the nodes within ``depth`` hops: downstream (nodes that depend on a selected
    one) always, upstream (the dependencies of a selected one) with ``upstream``."""
    selected = set(seeds)
    for _ in range(depth):
        added: set[int] = set()
        for row, node_id in enumerate(ids):
            parents = deps[starts[row] : starts[row + 1]]
            if node_id in selected:
                if upstream:
                    added.update(p for p in parents if p not in selected)
            elif any(p in selected for p in parents):
                added.add(node_id)
        if not added:
            break
        selected |= added
    return selected


def _keep(node: EtNode, cut: Cut, selected: set[int] | None) -> Callable[[int], bool] | None:
    """Whether to draw ``node``: None if not, else which of its dependencies to draw."""
    if cut.ids is not None:
        first, last = cut.ids
        if not first <= node.id <= last:
            return None
        return lambda dep: first <= dep <= last
    if selected is None:
        return lambda dep: True
    if node.id not in selected:
        return None
    return selected.__contains__


def _drawn(
    path: str, cut: Cut, selected: set[int] | None, counts: list[int], progress: Progress | None
) -> Iterator[EtNode]:
    """The nodes to draw, each with only the dependencies to draw; ``counts`` = [drawn, total]."""
    with EtRecords(path) as records:
        for node in records.nodes():
            counts[1] += 1
            keep = _keep(node, cut, selected)
            if keep is None:
                continue
            if not cut.whole:
                node.data_deps = [d for d in node.data_deps if keep(d)]
                node.ctrl_deps = [d for d in node.ctrl_deps if keep(d)]
            counts[0] += 1
            if progress is not None and counts[1] % 65536 == 0:
                progress("read", records.position, records.size)
            yield node


def output_format(path: str) -> str:
    ext = os.path.splitext(path)[1].lower().lstrip(".")
    if ext not in FORMATS:
        raise OutputError(
            path, f"unknown graph format {ext or '(no extension)'!r}: name a .dot, .graphml, .pdf or .svg file"
        )
    return ext


def visualize(
    input_path: str,
    output_path: str,
    cut: Cut | None = None,
    progress: Progress | None = None,
    fmt: str | None = None,
    laid_out: bool = False,
) -> VisualizeResult:
    """Draw ``input_path`` (a ``.et``) as ``fmt`` (by default the output's extension); ``laid_out``:
    a ``.dot`` laid out by graphviz's ``dot -Tdot``, which is what ``chakra_visualizer`` writes."""
    cut = cut or Cut()
    fmt = fmt or output_format(output_path)
    if fmt not in FORMATS:
        raise OutputError(output_path, f"unknown graph format {fmt!r}: one of {', '.join(FORMATS)}")
    if laid_out and fmt != "dot":
        raise OptionError(
            f"`laid_out` is for .dot outputs (.{fmt} is {'always' if fmt != 'graphml' else 'never'} laid out)"
        )
    dot = None
    if fmt in ("pdf", "svg") or laid_out:
        dot = shutil.which("dot")
        if dot is None:
            what = "a laid-out .dot" if laid_out else f".{fmt}"
            raise ConverterError(
                f"writing {what} needs graphviz's dot, which is not installed (apt install "
                "graphviz, or conda install graphviz); .dot and .graphml need nothing"
            )
    check_input(input_path)
    target = check_output(output_path, input_path)
    selected = _selection(input_path, cut, progress)
    counts = [0, 0, 0]  # drawn nodes, all nodes, edges
    with atomic_output(target) as out:
        if fmt == "graphml":
            _write_graphml(out.write, _drawn(input_path, cut, selected, counts, progress), counts)
        elif dot is None:
            _write_dot(out.write, _drawn(input_path, cut, selected, counts, progress), counts)
        else:
            _render(dot, fmt, target, out, _drawn(input_path, cut, selected, counts, progress), counts)
    return VisualizeResult(output_path, fmt, counts[0], counts[2], counts[1])


_BATCH = 1 << 18


def _write_batched(write: Callable[[bytes], object], head: str, texts: Iterator[str], tail: str) -> None:
    batch, size = [head], 0
    for text in texts:
        batch.append(text)
        size += len(text)
        if size >= _BATCH:
            write("".join(batch).encode("utf-8", "surrogatepass"))
            batch, size = [], 0
    batch.append(tail)
    write("".join(batch).encode("utf-8", "surrogatepass"))


def _write_graphml(write: Callable[[bytes], object], nodes: Iterator[EtNode], counts: list[int]) -> None:
    def texts() -> Iterator[str]:
        for node in nodes:
            edges = _edges(node)
            counts[2] += len(edges)
            yield _graphml_node(node, edges)

    _write_batched(write, _GRAPHML_HEAD, texts(), _GRAPHML_TAIL)


def _write_dot(write: Callable[[bytes], object], nodes: Iterator[EtNode], counts: list[int]) -> None:
    def texts() -> Iterator[str]:
        for node in nodes:
            counts[2] += len(node.data_deps) + len(node.ctrl_deps)
            yield _dot_node(node)

    _write_batched(write, "digraph {\n", texts(), "}\n")


def _render(
    dot: str, fmt: str, target: OutputTarget, out: IO[bytes], nodes: Iterator[EtNode], counts: list[int]
) -> None:
    """The DOT text, in a spill file (freed on any exit), laid out by ``dot -T<fmt>`` into ``out``."""
    spill = SpillFile(target.work_dir)
    try:
        _write_dot(spill.write, nodes, counts)
        spill.flush()
        os.lseek(spill.fileno(), 0, os.SEEK_SET)
        try:
            done = run_child([dot, f"-T{fmt}"], stdin=spill.fileno())  # ended with us, and its children
        except OSError as exc:
            raise ConverterError(f"cannot run {dot}: {exc.strerror or exc}") from None
        if done.returncode != 0:
            message = done.stderr.decode(errors="replace").strip().splitlines()
            raise ConverterError(
                f"dot -T{fmt} failed (status {done.returncode}): {message[-1] if message else 'no message'}"
            )
        out.write(done.stdout)
    finally:
        spill.close()

"""The converter's floors, drawn from its imports: a package (or top-level module) imports only
from its own floor or those below, and no packages import each other in a loop. Every import
counts, those inside functions and under ``TYPE_CHECKING`` too. A loop or upward import that
has to stay a while is listed below with where it comes from (none now); the test fails on any
other, and on a listed one that is gone. ``docs/how-it-works.md`` draws the floors."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parent.parent / "converter"
PACKAGE = "chakra_convert_fast.converter"

#: Bottom first. A name is a subpackage or a top-level module of ``converter/``.
FLOORS: tuple[tuple[str, ...], ...] = (
    # the base: errors, the process, arguments, small algorithms
    (
        "_early",
        "_types",
        "errors",
        "lifecycle",
        "arguments",
        "overhead",
        "baseline",
        "gcpause",
        "fastjson",
        "children",
        "workers",
        "cycles",
        "plotlib",
    ),
    # files and formats: reading, writing, the trace schemas, the .et format, device profiles
    ("io", "jsonstream", "salvage", "repair", "schema", "et", "devices"),
    # the job on disk (rank files, what each records of the job); what ASTRA-sim would refuse
    ("job", "check"),
    # .et -> .et passes
    ("compact",),
    # the front ends: a trace -> .et (link feeds convert)
    ("link", "convert", "text", "kineto"),
    # drivers: many ranks, a job's memory
    ("ranks", "memory"),
    # ASTRA-sim, comparisons of runs, mlc-chakra's other tools
    ("simulate", "compare", "tools"),
    ("api",),
    ("cli", "__main__", "__init__"),
)

#: Loops allowed for a while, each a set of packages that import each other, and why.
KNOWN_LOOPS: dict[frozenset[str], str] = {}
#: Imports of a higher floor allowed for a while: (importer, imported) -> where.
KNOWN_UPWARD: dict[tuple[str, str], str] = {}


def _floor_of() -> dict[str, int]:
    return {name: level for level, names in enumerate(FLOORS) for name in names}


def _top(module: str) -> str:
    """The floor's name of a dotted module path inside the package ("" for the package itself)."""
    return module.split(".", 1)[0] if module else "__init__"


def package_imports() -> dict[tuple[str, str], list[str]]:
    """(importer, imported) -> the modules that import so, between different floors' names."""
    found: dict[tuple[str, str], list[str]] = defaultdict(list)
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        here = parts[:-1] if parts[-1] == "__init__" else parts  # the module's dotted path
        package = parts[:-1]  # what a relative import of level 1 starts from
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.level:
                base = package[: len(package) - (node.level - 1)]
                if node.module:
                    targets.append(".".join([*base, node.module]))
                else:
                    targets.extend(".".join([*base, alias.name]) for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(PACKAGE):
                targets.append(node.module.removeprefix(PACKAGE).lstrip("."))  # type: ignore[union-attr]
            elif isinstance(node, ast.Import):
                targets.extend(
                    a.name.removeprefix(PACKAGE).lstrip(".") for a in node.names if a.name.startswith(PACKAGE)
                )
            source = _top(".".join(here))
            for target in targets:
                if _top(target) != source:
                    found[(source, _top(target))].append(".".join(here) or "__init__")
    return found


def test_every_part_of_the_package_has_a_floor() -> None:
    names = {
        p.stem if p.is_file() else p.name for p in ROOT.iterdir() if p.suffix == ".py" or (p / "__init__.py").is_file()
    }
    floors = _floor_of()
    assert names - set(floors) == set(), "give each new package or module its floor in FLOORS"
    assert set(floors) - names == set(), "FLOORS names a package or module that is gone"


def test_no_import_reaches_up_a_floor() -> None:
    floor = _floor_of()
    upward = {
        edge: sorted(set(importers)) for edge, importers in package_imports().items() if floor[edge[0]] < floor[edge[1]]
    }
    new = {edge: importers for edge, importers in upward.items() if edge not in KNOWN_UPWARD}
    assert new == {}, "an import reaches up a floor: move the shared piece down instead"
    assert set(KNOWN_UPWARD) <= set(upward), "a known upward import is gone: take it off KNOWN_UPWARD"


def test_no_packages_import_each_other_in_a_loop() -> None:
    graph = nx.DiGraph(list(package_imports()))
    loops = {frozenset(c) for c in nx.strongly_connected_components(graph) if len(c) > 1}
    assert loops - set(KNOWN_LOOPS) == set(), "packages import each other: move the shared piece down"
    assert set(KNOWN_LOOPS) <= loops, "a known loop is gone (or changed): update KNOWN_LOOPS"


def test_the_graph_reader_sees_relative_and_late_imports() -> None:
    imports = package_imports()
    assert ("check", "cycles") in imports  # from ..cycles import (a top-level module)
    assert ("cli", "api") in imports  # from .. import api
    assert ("compact", "job") in imports
    assert ("check", "convert") not in imports and ("compact", "ranks") not in imports

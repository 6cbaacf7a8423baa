"""mlc-chakra's other tools against their replacements here, on the same input: the README's tool table.

    python -m bench.tools_table [--nodes 1000000] [--graph-nodes 250000] [--out bench/results/tools.md]

For each tool, both sides run in their own child process (``bench.measure``: wall time, CPU time
of the process and its workers, peak RSS), on a ``.et`` converted from a generated GPT-2 DDP trace
(``fixtures.generate``; cached in ``--cache``), and the outputs are compared:

* ``chakra_jsonizer`` vs ``jsonize --chakra-format`` (byte-identical, compared by SHA-256), with
  the default workers and with ``--jobs 1``; and the default one-document layout;
* ``chakra_visualizer`` to ``.graphml`` vs ``visualize`` (the same graph, read back with networkx
  where it fits in memory);
* ``chakra_generator`` (default options: 64 NPUs) vs ``generate`` (every file byte-identical).

The Text row (``chakra_converter Text`` vs ``text``) is measured by its own bench entry.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import sys
import tempfile
from pathlib import Path

from bench.measure import Run, measure
from bench.report import emit_table
from chakra_convert_fast.fixtures.generate import generate_merged, make_config

OURS = [sys.executable, "-m", "chakra_convert_fast.converter"]
GRAPH_CHECK_MAX_NODES = 300_000  # networkx reads both GraphML files back to compare them below this


def _exe(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise SystemExit(f"{name} not found: install the bench extra (mlc-chakra)")
    return found


def et_trace(nodes: int, cache: Path) -> tuple[Path, int]:
    """A ``.et`` of about ``nodes`` nodes (converted by this package, byte-identical to chakra_converter)."""
    cache.mkdir(parents=True, exist_ok=True)
    et, count_file = cache / f"tools_gpt2_{nodes}.et", cache / f"tools_gpt2_{nodes}.count"
    if not (et.exists() and count_file.exists()):
        src = cache / f"tools_gpt2_{nodes}.json"
        result = generate_merged(
            src, config=make_config("gpt2", layers=12, ranks=2, rank=0), nodes=nodes, seed=2, indent=None
        )
        run = measure([*OURS, str(src), str(et), "-q"])
        if run.returncode != 0:
            raise SystemExit(f"converting {src} failed: {run.stderr}")
        src.unlink()
        count_file.write_text(str(result.nodes - 1))
    return et, int(count_file.read_text())


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


def _ok(run: Run, who: str) -> Run:
    if run.returncode != 0:
        raise SystemExit(f"{who} failed ({run.returncode}): {run.stderr}")
    return run


def _cells(ref: Run | None, ours: Run) -> str:
    def side(run: Run) -> str:
        return f"{run.seconds:.1f} s ({run.cpu_seconds:.1f} s CPU), {run.peak_rss_bytes / 2**20:,.0f} MB"

    if ref is None:
        return f"| n/a | {side(ours)} | | |"
    return (
        f"| {side(ref)} | {side(ours)} | {ref.seconds / ours.seconds:.1f}x "
        f"({ref.cpu_seconds / max(ours.cpu_seconds, 1e-9):.1f}x CPU) | "
        f"{ref.peak_rss_bytes / ours.peak_rss_bytes:.1f}x |"
    )


def jsonize_rows(et: Path, nodes: int, tmp: Path) -> list[str]:
    ref = _ok(
        measure([_exe("chakra_jsonizer"), "--input_filename", str(et), "--output_filename", str(tmp / "ref.json")]),
        "chakra_jsonizer",
    )
    ref_digest = _digest(tmp / "ref.json")
    (tmp / "ref.json").unlink()
    rows = []
    for label, options in (("`jsonize --chakra-format`", []), ("`jsonize --chakra-format --jobs 1`", ["--jobs", "1"])):
        ours = _ok(
            measure([*OURS, "jsonize", str(et), str(tmp / "ours.json"), "--chakra-format", "-q", *options]), label
        )
        same = _digest(tmp / "ours.json") == ref_digest
        (tmp / "ours.json").unlink()
        parity = "byte-identical" if same else "**DIFFERS**"
        rows.append(f"| `chakra_jsonizer` | {label} | {parity} | {nodes:,}-node .et {_cells(ref, ours)}")
    ours = _ok(measure([*OURS, "jsonize", str(et), str(tmp / "doc.json"), "-q"]), "jsonize")
    (tmp / "doc.json").unlink()
    rows.append(
        f"| `chakra_jsonizer` | `jsonize` (one JSON document) | same records, one valid document "
        f"| {nodes:,}-node .et {_cells(ref, ours)}"
    )
    return rows


def visualize_rows(et: Path, nodes: int, tmp: Path) -> list[str]:
    ref = _ok(
        measure(
            [_exe("chakra_visualizer"), "--input_filename", str(et), "--output_filename", str(tmp / "ref.graphml")]
        ),
        "chakra_visualizer",
    )
    ours = _ok(measure([*OURS, "visualize", str(et), str(tmp / "ours.graphml"), "-q"]), "visualize")
    parity = "same graph (not compared: too large for networkx here)"
    if nodes <= GRAPH_CHECK_MAX_NODES:
        import networkx as nx

        a, b = nx.read_graphml(tmp / "ref.graphml"), nx.read_graphml(tmp / "ours.graphml")
        same = (
            type(a) is type(b)
            and dict(a.nodes(data=True)) == dict(b.nodes(data=True))
            and {(u, v): d for u, v, d in a.edges(data=True)} == {(u, v): d for u, v, d in b.edges(data=True)}
        )
        parity = "same nodes, edges and attributes (read back by networkx)" if same else "**DIFFERS**"
    rows = [f"| `chakra_visualizer` (.graphml) | `visualize` | {parity} | {nodes:,}-node .et {_cells(ref, ours)}"]
    dot = _ok(measure([*OURS, "visualize", str(et), str(tmp / "ours.dot"), "-q"]), "visualize .dot")
    reference_dot = "graphviz's `dot`" + (" (not installed here)" if shutil.which("dot") is None else "")
    rows.append(
        f"| `chakra_visualizer` (.dot/.pdf) | `visualize` (.dot; .pdf/.svg through dot) | the reference's "
        f"DOT statements, before {reference_dot} lays them out | {nodes:,}-node .et {_cells(None, dot)}"
    )
    for name in ("ref.graphml", "ours.graphml", "ours.dot"):
        (tmp / name).unlink()
    return rows


def generate_rows(tmp: Path) -> list[str]:
    (tmp / "ref").mkdir()
    ref = _ok(measure([_exe("chakra_generator")], cwd=tmp / "ref"), "chakra_generator")
    ours = _ok(measure([*OURS, "generate", str(tmp / "ours"), "-q"]), "generate")
    names = sorted(os.listdir(tmp / "ref"))
    same = names == sorted(os.listdir(tmp / "ours")) and all(
        (tmp / "ref" / n).read_bytes() == (tmp / "ours" / n).read_bytes() for n in names
    )
    parity = f"byte-identical ({len(names)} files)" if same else "**DIFFERS**"
    return [f"| `chakra_generator` | `generate` | {parity} | default options (64 NPUs) {_cells(ref, ours)}"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.tools_table", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=1_000_000, help="nodes of the jsonize trace (default 1M)")
    parser.add_argument(
        "--graph-nodes",
        type=int,
        default=250_000,
        help="nodes of the visualize trace (default 250k: networkx needs ~7 KB a node)",
    )
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "chakra-bench-traces")
    parser.add_argument("--out", type=Path, help="also write the table here")
    parser.add_argument(
        "--only", choices=("jsonize", "visualize", "generate"), action="append", help="only these tools (repeatable)"
    )
    args = parser.parse_args(argv)
    only = set(args.only or ("jsonize", "visualize", "generate"))
    lines = [
        "| mlc-chakra tool | here | parity | input | reference: time (CPU), peak RSS | ours: time (CPU), peak RSS "
        "| speed-up (CPU) | memory |",
        "|---|---|---|---|---:|---:|---:|---:|",
    ]
    with tempfile.TemporaryDirectory(prefix="tools-table-", dir=args.cache.parent) as name:
        tmp = Path(name)
        if "jsonize" in only:
            lines += jsonize_rows(*et_trace(args.nodes, args.cache), tmp)
            print("\n".join(lines[-3:]), file=sys.stderr)
        if "visualize" in only:
            lines += visualize_rows(*et_trace(args.graph_nodes, args.cache), tmp)
            print("\n".join(lines[-2:]), file=sys.stderr)
        if "generate" in only:
            lines += generate_rows(tmp)
            print(lines[-1], file=sys.stderr)
    return emit_table(lines, args.out)


if __name__ == "__main__":
    sys.exit(main())

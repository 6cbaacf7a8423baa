"""``scale`` against reality: a 2-rank capture scaled to 4 ranks next to the real 4-rank capture.

    python -m bench.scale_table CAPTURES [--out bench/results/scale.md] [--ranks 4096]

``CAPTURES`` holds ``{model}_small_np{2,4}/{model}_small_np{2,4}.<rank>.et`` and their
``.comm_group.json`` (``chakra-profile --model M --size small --nproc {2,4} --steps 4 --wait 1
--warmup 1 --active 1 --convert``, same per-rank batch). For each model: the 2-rank job is scaled
to 4, and each rank's collectives (kind, group, count, bytes, in order) are compared with the real
4-rank job's; then it is scaled to ``--ranks`` and timed (the outputs are removed afterwards).
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

from chakra_convert_fast.converter import api
from chakra_convert_fast.converter.et.decode import read_et
from chakra_convert_fast.converter.schema.chakra import CollectiveCommType, NodeType


def collectives(path: str) -> list[tuple[str, str, int]]:
    trace = read_et(path)
    return [
        (CollectiveCommType(a["comm_type"]).name, a.get("pg_name") or "0", a["comm_size"])
        for row, a in sorted(trace.comm.items())
        if trace.types[row] == NodeType.COMM_COLL_NODE
    ]


def summary(found: list[tuple[str, str, int]]) -> str:
    totals: dict[tuple[str, str], list[int]] = {}
    for kind, group, size in found:
        entry = totals.setdefault((kind, group), [0, 0])
        entry[0] += 1
        entry[1] += size
    return "; ".join(f"{k} x{c} {b:,} B (group {g})" for (k, g), (c, b) in totals.items())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("captures", type=Path)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--ranks", type=int, default=4096)
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()))
    args = parser.parse_args()
    lines = [
        "| model | rank | real 4-rank capture: collectives | 2-rank capture scaled to 4 | equal |",
        "|---|---|---|---|---|",
    ]
    timing = [
        "| model | captured ranks | nodes per rank | --ranks | seconds | GB written |",
        "|---|---|---|---|---|---|",
    ]
    for model in ("gpt2", "bert"):
        two = args.captures / f"{model}_small_np2" / f"{model}_small_np2"
        four = args.captures / f"{model}_small_np4" / f"{model}_small_np4"
        work = Path(tempfile.mkdtemp(dir=args.workdir, prefix="scale-table-"))
        try:
            result = api.scale(two, work / "s4", 4)
            real_groups = api.find_comm_groups(four)
            assert real_groups is not None
            groups_equal = result.comm_groups == json.loads(Path(real_groups).read_text())
            for rank in range(4):
                real, scaled = collectives(f"{four}.{rank}.et"), collectives(f"{work / 's4'}.{rank}.et")
                equal = "yes" if real == scaled and groups_equal else "**no**"
                lines.append(f"| {model} | {rank} | {summary(real)} | {summary(scaled)} | {equal} |")
            started = time.perf_counter()
            big = api.scale(two, work / "big", args.ranks)
            seconds = time.perf_counter() - started
            timing.append(
                f"| {model} | 2 | {big.nodes[0]:,} | {args.ranks:,} | {seconds:.1f} | {big.bytes_written / 1e9:.2f} |"
            )
        finally:
            shutil.rmtree(work, ignore_errors=True)
    text = "\n".join([*lines, "", *timing]) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()

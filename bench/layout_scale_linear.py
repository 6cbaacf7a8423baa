"""``scale`` of a layout job (TP 2 x FSDP, the committed capture) at growing N: seconds, peak memory
and the size of the layout and group files written, each in a fresh process (issue 40, problem
13: both grew with N^2 before, 1.7 GB at 8,192 ranks).

    python -m bench.layout_scale_linear [--ranks 1024,4096,8192] [--out bench/results/layout_scale_linear.md]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CAPTURE = Path(__file__).resolve().parent.parent / "tests" / "data" / "layouts" / "tp2fsdp_np4" / "job"


def one(ranks: int) -> dict[str, float]:
    """Run in a child: scale the capture to ``ranks`` ranks; its own peak RSS."""
    from chakra_convert_fast.converter import api

    with tempfile.TemporaryDirectory() as work:
        out = os.path.join(work, "job")
        started = time.perf_counter()
        api.scale(str(CAPTURE), out, ranks)
        seconds = time.perf_counter() - started
        layout = os.path.getsize(f"{out}.layout.json")
        groups = os.path.getsize(f"{out}.comm_group.json")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {
        "ranks": ranks,
        "seconds": seconds,
        "peak_mb": peak / 1e6,
        "layout_kb": layout / 1e3,
        "groups_kb": groups / 1e3,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", default="1024,4096,8192")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(one(args.child)))
        return
    rows = []
    for ranks in (int(r) for r in args.ranks.split(",")):
        done = subprocess.run(
            [sys.executable, "-m", "bench.layout_scale_linear", "--child", str(ranks)],
            check=True,
            capture_output=True,
            text=True,
        )
        rows.append(json.loads(done.stdout))
        print(rows[-1], file=sys.stderr)
    lines = [
        f"`python -m bench.layout_scale_linear --ranks {args.ranks}` (tests/data/layouts/tp2fsdp_np4: "
        "TP 2 x FSDP 2, 4 captured ranks, scaled to TP 2 x FSDP N/2; each N in a fresh process)",
        "",
        "| --ranks | seconds | peak RSS (MB) | layout file (KB) | KB a rank | group file (KB) |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {int(r['ranks']):,} | {r['seconds']:.1f} | {r['peak_mb']:.0f} | {r['layout_kb']:,.0f} | "
            f"{r['layout_kb'] / r['ranks']:.3f} | {r['groups_kb']:,.0f} |"
        )
    text = "\n".join(lines) + "\n"
    if args.out:
        args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()

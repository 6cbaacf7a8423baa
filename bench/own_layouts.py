"""The layout from the trace against reality: a user's own captures (no ``chakra-profile``, no layout
file) scaled to a bigger job, next to the real capture of that job, rank by rank.

    python -m bench.own_layouts [--out bench/results/own_layouts.md]

The user's own FSDP2 job (``tests/data/traces/own_fsdp2_np{2,4}``, ``tests/capture_own_fsdp.py``):
each through ``convert-all --astra-sim``, the 2-rank job scaled to 4 with no layout given (``scale``
recognises FSDP from the collectives), each rank's collectives (kind, group, bytes, in order)
compared with the real 4-rank job's; and the same job scaled as DDP (``layout="ddp"``, what
``scale`` did before it read the layout from the trace). ``chakra-profile``'s 2-D captures
(``tests/data/layouts``) without their layout files: refused, then scaled with ``layout``.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

from chakra_convert_fast.converter import api
from chakra_convert_fast.converter.errors import ConverterError

from .scale_table import collectives

ROOT = Path(__file__).resolve().parent.parent
OWN = ROOT / "tests" / "data" / "traces"
LAYOUTS = ROOT / "tests" / "data" / "layouts"


def _matches(scaled: Path, real: Path, ranks: int, tolerance: float = 0.0) -> tuple[int, int, int]:
    """(ranks equal, collectives compared, largest byte difference) of ``scaled`` against ``real``."""
    equal = compared = worst = 0
    for r in range(ranks):
        mine, theirs = collectives(f"{scaled}.{r}.et"), collectives(f"{real}.{r}.et")
        same_shape = [m[:1] for m in mine] == [t[:1] for t in theirs]
        diffs = [abs(m[2] - t[2]) for m, t in zip(mine, theirs, strict=False)]
        worst = max([worst, *diffs])
        equal += same_shape and all(d <= tolerance * t[2] for d, t in zip(diffs, theirs, strict=False))
        compared += len(theirs)
    return equal, compared, worst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="own-layouts-"))
    rows = [
        "| job | scaled | layout | what scale said | ranks equal to the real job | collectives "
        "| largest byte difference |",
        "|---|---|---|---|---|---|---|",
    ]
    try:
        jobs = {}
        for n in (2, 4):
            api.convert_all(OWN / f"own_fsdp2_np{n}", work / f"np{n}", api.ConvertOptions(astra_sim=True), jobs=1)
            jobs[n] = work / f"np{n}" / "trace"
        for layout in (None, "ddp"):
            result = api.scale(jobs[2], work / f"x{layout}" / "job", 4, layout=layout)
            equal, compared, worst = _matches(work / f"x{layout}" / "job", jobs[4], 4)
            note = result.note or ""
            said = "FSDP recognised" if note.startswith("layout recognised") else note.split(";")[0] + ")"
            rows.append(
                f"| own FSDP2 (gloo) | 2 -> 4 | {layout or '(from the trace)'} | {said} | {equal} of 4 | "
                f"{compared} | {worst:,} |"
            )
        for case, small, spec in (("tp2ddp", 4, "ddp,tp=2"), ("pp2", 4, "ddp,pp=2"), ("tp2fsdp", 4, "fsdp,tp=2")):
            job = work / case
            job.mkdir()
            for path in (LAYOUTS / f"{case}_np{small}").iterdir():
                if path.name != "job.layout.json":
                    shutil.copy(path, job / path.name)
            try:
                api.scale(job / "job", work / f"{case}_refused" / "job", 8)
                refused = "scaled"
            except ConverterError as exc:
                refused = "refused: " + str(exc).split(": ", 1)[1].split(";")[0]
            api.scale(job / "job", work / f"{case}_8" / "job", 8, layout=spec)
            equal, compared, worst = _matches(work / f"{case}_8" / "job", LAYOUTS / f"{case}_np8" / "job", 8, 0.001)
            rows.append(
                f"| chakra-profile {case}, no layout file | {small} -> 8 | {spec} | {refused} without it | "
                f"{equal} of 8 | {compared} | {worst:,} |"
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    text = "\n".join(rows) + "\n"
    print(text)
    if args.out is not None:
        args.out.write_text(text)


if __name__ == "__main__":
    main()

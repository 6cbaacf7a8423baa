"""The layout from the trace against reality: a user's own captures (no ``chakra-profile``, no layout
file) scaled to a bigger job, next to the real capture of that job, rank by rank.

    python -m bench.own_layouts [--out bench/results/own_layouts.md]
    python -m bench.own_layouts --summarise RAWDIR OUT.json   # a real capture's collectives, per rank

The user's own jobs (``tests/capture_own_fsdp.py``: FSDP2, DDP, tensor parallelism on a 2-D
``DeviceMesh`` with DDP over its ``dp`` dimension, TP x FSDP2, and HSDP (FSDP2 on a (replicate, shard)
mesh, its host traces alone); gloo, CPU): each captured job
through ``convert-all --astra-sim``, then ``scale`` to the bigger job, with no layout given first
(what ``scale`` recognises, or its refusal), then with ``layout`` where it refused. Each rank's
collectives (kind, the group's ranks, bytes, in order) are compared with the real capture of the
bigger job. The real 4-rank FSDP2 job is committed whole (``tests/data/traces/own_fsdp2_np4``);
the others (``tests/data/traces/own_layouts/real``) as their per-rank collectives, which
``--summarise`` writes from the raw capture.

The groups of a real gloo capture: what DTensor's tensor-parallel collectives name (their group
is an argument, a string), and for gloo's c10d collectives, which name none (DDP's and FSDP2's),
the rank's ``mesh_dp`` group from its Kineto ``distributedInfo`` (every rank where the job has no
mesh): the script puts them there, the trace cannot say so. ``chakra-profile``'s 2-D captures
(``tests/data/layouts``) without their layout files: refused, then scaled with ``layout``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from chakra_convert_fast.converter import api
from chakra_convert_fast.converter.errors import ConverterError
from chakra_convert_fast.converter.et.decode import read_et
from chakra_convert_fast.converter.schema.chakra import CollectiveCommType, NodeType

from .scale_table import collectives

ROOT = Path(__file__).resolve().parent.parent
OWN = ROOT / "tests" / "data" / "traces"
MINE = OWN / "own_layouts"
LAYOUTS = ROOT / "tests" / "data" / "layouts"

#: (job, captured dir, captured ranks, real job (a raw dir's name under OWN, or a summary), ranks, layout
#: to give where scale refuses)
JOBS = (
    ("own DDP", MINE / "ddp_np2", 2, MINE / "real" / "ddp_np4.json", 4, "ddp"),
    ("own TP (dp 1 x tp 2)", MINE / "tp_np2", 2, MINE / "real" / "tp_np4.json", 4, "ddp,tp=2"),
    ("own TP x DDP (dp 2 x tp 2)", MINE / "tp_np4", 4, MINE / "real" / "tp_np8.json", 8, "ddp,tp=2"),
    ("own TP x FSDP2 (dp 2 x tp 2)", MINE / "2d_np4", 4, MINE / "real" / "2d_np8.json", 8, "fsdp,tp=2"),
    (
        "own HSDP (replicate 2 x shard 2), host traces",
        MINE / "hsdp_np4",
        4,
        MINE / "real" / "hsdp_np8.json",
        8,
        "hsdp,shard=2",
    ),
)

#: One collective: (kind, its group's ranks, bytes)
Collective = tuple[str, tuple[int, ...], int]


def _kineto(raw: Path, rank: int) -> dict[str, Any]:
    for name in (f"rank{rank}_device.json", f"rank{rank}_device.json.gz"):
        path = raw / name
        if path.is_file():
            opener = gzip.open if path.suffix == ".gz" else open
            with opener(path, "rt") as f:
                found: dict[str, Any] = json.load(f)
                return found
    raise FileNotFoundError(f"{raw}: no Kineto trace of rank {rank}")


def per_rank(
    prefix: Path, ranks: int, unnamed: list[dict[str, tuple[int, ...]]] | None = None
) -> list[list[Collective]]:
    """Each rank's collectives of the job ``PREFIX.<rank>.et``, their groups as ranks (the group
    file's; ``"0"``: ``unnamed[rank]`` by kind where given, else every rank)."""
    group_file = Path(f"{prefix}.comm_group.json")
    listed = json.loads(group_file.read_text()) if group_file.is_file() else {}
    groups = {k: tuple(sorted(v)) for k, v in listed.items()}
    out = []
    for r in range(ranks):
        trace = read_et(f"{prefix}.{r}.et")
        found = []
        for row, a in sorted(trace.comm.items()):
            if trace.types[row] != NodeType.COMM_COLL_NODE:
                continue
            kind = CollectiveCommType(a["comm_type"]).name
            by_kind = unnamed[r] if unnamed is not None else {}
            everyone = by_kind.get(kind, by_kind.get("*", tuple(range(ranks))))
            found.append((kind, groups.get(a.get("pg_name") or "0", everyone), a["comm_size"]))
        out.append(found)
    return out


def truth(raw: Path, work: Path) -> list[list[Collective]]:
    """A real gloo capture's collectives per rank, gloo's unnamed ones on the rank's ``mesh_dp``
    (HSDP: all-gathers and reduce-scatters on its ``mesh_shard``, all-reduces on ``mesh_replicate``)."""
    ranks = len(list(raw.glob("rank*_host.json*")))
    api.convert_all(raw, work, api.ConvertOptions(astra_sim=True), jobs=1)
    unnamed = []
    for r in range(ranks):
        configs = _kineto(raw, r)["distributedInfo"]["pg_config"]
        mesh = {c.get("pg_desc"): tuple(sorted(c["ranks"])) for c in configs}
        if "mesh_shard" in mesh and "mesh_replicate" in mesh:
            shard, replicas = mesh["mesh_shard"], mesh["mesh_replicate"]
            unnamed.append({"ALL_GATHER": shard, "REDUCE_SCATTER": shard, "ALL_REDUCE": replicas})
        else:
            unnamed.append({"*": mesh.get("mesh_dp", tuple(range(ranks)))})
    return per_rank(work / "trace", ranks, unnamed)


def load(real: Path, work: Path) -> list[list[Collective]]:
    """The real job's collectives: a raw capture's, or a summary's (``--summarise``)."""
    if real.is_dir():
        return truth(real, work)
    raw = json.loads(real.read_text())
    return [[(k, tuple(m), int(b)) for k, m, b in rank] for rank in raw["ranks"]]


def compare(mine: list[list[Collective]], real: list[list[Collective]], tolerance: float = 0.0) -> tuple[int, int, int]:
    """(ranks equal in kinds, groups and bytes, collectives compared, largest byte difference)."""
    equal = compared = worst = 0
    for m, t in zip(mine, real, strict=True):
        same = [c[:2] for c in m] == [c[:2] for c in t]
        diffs = [abs(a[2] - b[2]) for a, b in zip(m, t, strict=False)]
        worst = max([worst, *diffs])
        equal += same and all(d <= tolerance * b[2] for d, b in zip(diffs, t, strict=False))
        compared += len(t)
    return equal, compared, worst


def scale_job(prefix: Path, out: Path, ranks: int, layout: str | None) -> tuple[str, str | None]:
    """Scale, first as the trace says: (what scale said, the layout given or None)."""
    try:
        result = api.scale(prefix, out / "plain" / "job", ranks)
        note = result.note or ""
        return ("scaled: " + note.split(":")[0] if note else "scaled as DDP (all-reduces over every rank)"), None
    except ConverterError as exc:
        said = "refused: " + str(exc).split(": ", 1)[1].split(";")[0]
    return said, layout


def _short(text: str, limit: int = 260) -> str:
    return text if len(text) <= limit else text[: limit - 3].rstrip() + "..."


def own_rows(work: Path) -> list[str]:
    rows = []
    jobs = {}
    for n in (2, 4):
        api.convert_all(OWN / f"own_fsdp2_np{n}", work / f"fsdp{n}", api.ConvertOptions(astra_sim=True), jobs=1)
        jobs[n] = work / f"fsdp{n}" / "trace"
    real = per_rank(jobs[4], 4)
    for layout in (None, "ddp"):
        result = api.scale(jobs[2], work / f"x{layout}" / "job", 4, layout=layout)
        equal, compared, worst = compare(per_rank(work / f"x{layout}" / "job", 4), real)
        note = result.note or ""
        said = "FSDP recognised" if note.startswith("layout recognised") else note.split(";")[0] + ")"
        rows.append(
            f"| own FSDP2 | 2 -> 4 | {layout or '(from the trace)'} | {said} | {equal} of 4 | {compared} | {worst:,} |"
        )
    for name, captured, small, real_job, big, spec in JOBS:
        job = work / captured.name
        api.convert_all(captured, job, api.ConvertOptions(astra_sim=True), jobs=1)
        said, layout = scale_job(job / "trace", job, big, spec)
        out = job / ("plain" if layout is None else "given") / "job"
        if layout is not None:
            try:
                api.scale(job / "trace", out, big, layout=layout)
            except ConverterError as exc:
                reason = _short(str(exc).split(": ", 1)[1])
                said = f"{_short(said)}; with it refused: {reason}"
                rows.append(f"| {name} | {small} -> {big} | {layout} | {said} | - | - | - |")
                continue
        equal, compared, worst = compare(per_rank(out, big), load(real_job, job / "real"))
        rows.append(
            f"| {name} | {small} -> {big} | {layout or '(from the trace)'} | {_short(said)} | {equal} of {big} | "
            f"{compared} | {worst:,} |"
        )
    return rows


def profile_rows(work: Path) -> list[str]:
    rows = []
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
        mine = [collectives(f"{work / f'{case}_8' / 'job'}.{r}.et") for r in range(8)]
        real = [collectives(f"{LAYOUTS / f'{case}_np8' / 'job'}.{r}.et") for r in range(8)]
        equal = compared = worst = 0
        for m, t in zip(mine, real, strict=True):
            diffs = [abs(a[2] - b[2]) for a, b in zip(m, t, strict=False)]
            worst = max([worst, *diffs])
            equal += [c[:1] for c in m] == [c[:1] for c in t] and all(
                d <= 0.001 * b[2] for d, b in zip(diffs, t, strict=False)
            )
            compared += len(t)
        rows.append(
            f"| chakra-profile {case}, no layout file | {small} -> 8 | {spec} | {refused} without it | "
            f"{equal} of 8 | {compared} | {worst:,} |"
        )
    return rows


def summarise(raw: Path, out: Path) -> None:
    """Write the real capture ``raw``'s collectives per rank (``truth``) to ``out``."""
    work = Path(tempfile.mkdtemp(prefix="own-layouts-"))
    try:
        found = truth(raw, work / "et")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    ranks = [[[k, list(m), b] for k, m, b in rank] for rank in found]
    text = json.dumps({"source": raw.name, "ranks": ranks}, separators=(",", ":"))
    out.write_text(text.replace("]],[[", "]],\n[[") + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--summarise", nargs=2, type=Path, metavar=("RAWDIR", "OUT"))
    args = parser.parse_args()
    if args.summarise is not None:
        summarise(*args.summarise)
        return
    work = Path(tempfile.mkdtemp(prefix="own-layouts-"))
    rows = [
        "| job | scaled | layout | what scale said | ranks equal to the real job | collectives "
        "| largest byte difference |",
        "|---|---|---|---|---|---|---|",
    ]
    try:
        rows += own_rows(work)
        rows += profile_rows(work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    text = "\n".join(rows) + "\n"
    print(text)
    if args.out is not None:
        args.out.write_text(text)


if __name__ == "__main__":
    main()

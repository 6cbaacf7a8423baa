"""``scale`` of data x tensor x pipeline layouts against reality: the smallest capture of a layout
scaled to the size of a real capture, rank by rank.

    python -m bench.layouts_proof CAPTURES [--out bench/results/layouts.md] [--capture]

``CAPTURES/<case>/job.<rank>.et`` (with ``job.comm_group.json`` and ``job.layout.json``) are
``chakra-profile --model gpt2 --size tiny --steps 3 --wait 1 --outdir CAPTURES/<case> --name job
--convert`` plus each case's layout options (``--capture`` makes the missing ones; each takes
minutes on a CPU). For each pair: the small job is scaled to the big one's ranks; per rank the
communication nodes in order (node type, collective, bytes, group members, send/receive peers and
tag) must equal the real capture's; both jobs must pass ``check`` and finish in ASTRA-sim
(``$ASTRA_SIM_HOME``), whose simulated steps are put side by side.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench import astrasim
from chakra_convert_fast.converter import api
from chakra_convert_fast.converter.et.decode import read_et
from chakra_convert_fast.converter.schema.chakra import CollectiveCommType, NodeType

#: case -> chakra-profile layout options
CASES = {
    "tp2fsdp_np4": ["--nproc", "4", "--tp", "2", "--dp", "fsdp"],
    "tp2fsdp_np8": ["--nproc", "8", "--tp", "2", "--dp", "fsdp"],
    "pp2_np4": ["--nproc", "4", "--pp", "2"],
    "pp2_np8": ["--nproc", "8", "--pp", "2"],
}
#: (small, big) pairs compared
PAIRS = [("tp2fsdp_np4", "tp2fsdp_np8"), ("pp2_np4", "pp2_np8")]
BASE = ["--model", "gpt2", "--size", "tiny", "--steps", "3", "--wait", "1", "--name", "job", "--convert"]


def capture(root: Path, case: str) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    subprocess.run(
        [sys.executable, "-m", "chakra_convert_fast.profiler.cli", *BASE, *CASES[case], "--outdir", str(root / case)],
        check=True,
        env=env,
    )


def ranks_of(prefix: Path) -> int:
    return len(list(prefix.parent.glob(f"{prefix.name}.*.et")))


def comm_sequence(path: Path, groups: dict[str, list[int]], world: int) -> list[tuple[Any, ...]]:
    """(type, collective, bytes, group members, src, dst, tag) of each communication node, in order."""
    trace = read_et(path)
    out = []
    for row in sorted(trace.comm):
        a, node_type = trace.comm[row], trace.types[row]
        name = str(a.get("pg_name") or "0")
        members = groups.get(name, list(range(world))) if node_type == NodeType.COMM_COLL_NODE else None
        kind = (
            CollectiveCommType(a["comm_type"]).name
            if node_type == NodeType.COMM_COLL_NODE
            else ("SEND" if node_type == NodeType.COMM_SEND_NODE else "RECV")
        )
        out.append((kind, a["comm_size"], members, a.get("comm_src"), a.get("comm_dst"), a.get("comm_tag")))
    return out


def groups_of(prefix: Path) -> dict[str, list[int]]:
    path = Path(f"{prefix}.comm_group.json")
    return dict(json.loads(path.read_text())) if path.exists() else {}


def simulated_step_ms(prefix: Path, ranks: int, work: Path) -> tuple[float | None, str]:
    """The simulated step (ms, the slowest rank) and its exposed communication, or None and why."""
    if astrasim.home() is None:
        return None, "ASTRA_SIM_HOME not set"
    sim = astrasim.simulate(prefix, ranks, comm_groups=Path(f"{prefix}.comm_group.json"), workdir=work)
    if sim.returncode or not sim.all_finished:
        return None, f"not every rank finished: {sim.output[:200]}"
    slowest = max(sim.ranks, key=lambda r: r.cycles)
    return slowest.cycles / 1e6, f"{slowest.exposed_comm_ns / 1e6:,.1f}"


def compare(root: Path, small: str, big: str, work: Path) -> dict[str, Any]:
    small_prefix, big_prefix = root / small / "job", root / big / "job"
    n = ranks_of(big_prefix)
    scaled = work / f"{small}_to_{n}" / "job"
    api.scale(small_prefix, scaled, n)
    scaled_groups, real_groups = groups_of(scaled), groups_of(big_prefix)
    mismatches = []
    counts = 0
    for rank in range(n):
        mine = comm_sequence(Path(f"{scaled}.{rank}.et"), scaled_groups, n)
        theirs = comm_sequence(Path(f"{big_prefix}.{rank}.et"), real_groups, n)
        counts += len(theirs)
        if mine != theirs:
            first = next(
                (i for i, (a, b) in enumerate(zip(mine, theirs, strict=False)) if a != b), min(len(mine), len(theirs))
            )
            mismatches.append(
                f"rank {rank}: node {first}: scaled {mine[first] if first < len(mine) else None}, "
                f"real {theirs[first] if first < len(theirs) else None}"
            )
    checks = {
        name: api.check([f"{p}.{r}.et" for r in range(n)]).ok for name, p in (("scaled", scaled), ("real", big_prefix))
    }
    steps = {
        name: simulated_step_ms(p, n, work / f"sim_{name}_{big}")
        for name, p in (("scaled", scaled), ("real", big_prefix))
    }
    return {
        "small": small,
        "big": big,
        "ranks": n,
        "comm_nodes": counts,
        "mismatches": mismatches,
        "check": checks,
        "steps": steps,
    }


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "# `scale` of tensor-, pipeline- and FSDP-parallel captures against real captures",
        "",
        "Made by `python -m bench.layouts_proof CAPTURES` (`bench/layouts_proof.py` says how the",
        "captures are made): tiny GPT-2 on CPU ranks (gloo), torch 2.13; each small capture is",
        "scaled to the real capture's ranks with `chakra-convert-fast scale`, and each rank's",
        "communication nodes in order (type, collective, bytes, group members, send/receive peers",
        "and tag) are compared with the real capture's. Simulated in ASTRA-sim (analytical,",
        "congestion-unaware, Ring at 50 GB/s and 500 ns, traced compute durations).",
        "",
        "| captured (small) | real (big) | ranks | comm nodes compared | equal, rank by rank | check scaled / real "
        "| simulated step scaled (ms; exposed comm) | simulated step real (ms; exposed comm) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        (s_ms, s_note), (r_ms, r_note) = r["steps"]["scaled"], r["steps"]["real"]
        equal = "yes" if not r["mismatches"] else f"no ({len(r['mismatches'])} ranks differ)"
        fmt = lambda ms, note: f"{ms:,.1f} ({note})" if ms is not None else note  # noqa: E731
        small, big = " ".join(CASES[r["small"]]), " ".join(CASES[r["big"]])
        lines.append(
            f"| `{small}` | `{big}` | {r['ranks']} | {r['comm_nodes']} | {equal} "
            f"| {'ok' if r['check']['scaled'] else 'FAILS'} / {'ok' if r['check']['real'] else 'FAILS'} "
            f"| {fmt(s_ms, s_note)} | {fmt(r_ms, r_note)} |"
        )
    for r in rows:
        for m in r["mismatches"][:4]:
            lines.append(f"\n- {r['small']} -> {r['big']}: {m}")
    lines += [
        "",
        "The simulated steps differ by the compute each rank replays (ASTRA-sim replays traced",
        "durations): the scaled job replays the small capture's, the real one its own, from another",
        "run on CPU ranks that share two cores with other work, whose step times vary by tens of",
        "percent from run to run. The communication, what `scale` writes, is equal node for node;",
        "the simulated steps are not a proof of timing, only that both jobs run to the end.",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("captures", type=Path)
    parser.add_argument("--out", type=Path, default=Path("bench/results/layouts.md"))
    parser.add_argument("--capture", action="store_true", help="capture the cases that are missing")
    args = parser.parse_args(argv)
    for case in CASES:
        if not (args.captures / case / "job.layout.json").exists():
            if not args.capture:
                parser.error(f"{args.captures / case}: no capture (run with --capture)")
            capture(args.captures, case)
    with tempfile.TemporaryDirectory() as work:
        rows = [compare(args.captures, small, big, Path(work)) for small, big in PAIRS]
    text = table(rows)
    args.out.write_text(text)
    print(text)
    return 0 if all(not r["mismatches"] and all(r["check"].values()) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

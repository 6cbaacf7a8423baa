"""Expert parallelism scaled against reality: ``chakra-profile --ep`` captures scaled to a bigger
job, next to the real capture of that job, rank by rank.

    python -m bench.ep_scale [--out bench/results/ep_scale.md]

The captures are the repository's (``tests/data/traces/moe_ep``, PROVENANCE.md there): the tiny
Mixtral (4 experts, top-2) on 2 and 4 CPU ranks, and its shape with 8 experts on 4 and 8. Each
smaller job is scaled to the bigger one with each expert load (``captured``, ``balanced``), and as
plain replicas (``--layout ddp``: what ``scale`` did before it knew experts), then compared with
the real job (and from the rank files alone, as a user's own capture without the layout file):
every collective's kind and group, the bytes of those that do not depend on the
routing (counts, dispatches, the combines' gradients, DDP), and the bytes of the all-to-alls that
return rows (combine, the dispatch's backward) per MoE layer, with the real job's own
step-to-step spread of its busiest rank beside them. Every scaled job is checked and run in
ASTRA-sim (``ASTRA_SIM_HOME``), as is the real one.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

from chakra_convert_fast.converter import api

from .scale_table import collectives

ROOT = Path(__file__).resolve().parent.parent
MOE = ROOT / "tests" / "data" / "traces" / "moe_ep"
CASES = (("mixtral_tiny_np2", "mixtral_tiny_np4"), ("mixtral_e8_np4", "mixtral_e8_np8"))
MODES: tuple[tuple[str, dict[str, str]], ...] = (
    ("captured (default)", {}),
    ("balanced", {"expert_load": "balanced"}),
    ("replicas (`--layout ddp`)", {"layout": "ddp"}),
    ("from the trace alone (no layout file)", {}),
)


def _moe(prefix: Path) -> dict[str, object]:
    moe: dict[str, object] = json.loads(Path(f"{prefix}.layout.json").read_text())["moe"]
    return moe


def _returns(prefix: Path) -> list[int]:
    """Positions of the all-to-alls that return rows (the second of each pair with splits)."""
    experts = int(str(_moe(prefix)["experts"]))
    found = collectives(f"{prefix}.0.et")
    return [i for i, c in enumerate(found) if c[0] == "ALL_TO_ALL" and c[2] != 8 * experts][1::2]


def _spread(prefix: Path) -> list[tuple[float, float, float]]:
    """Per MoE layer, the real run's busiest rank over the mean: (min, max, spread over the mean)."""
    forwards = _moe(prefix)["imbalance"]["per_forward"]  # type: ignore[index]
    out = []
    for layer in sorted({f["layer"] for f in forwards}):
        ratios = [f["rank_max_over_mean"] for f in forwards if f["layer"] == layer]
        out.append((min(ratios), max(ratios), (max(ratios) - min(ratios)) / (sum(ratios) / len(ratios))))
    return out


def _layer(pair: int, layers: int) -> int:
    q = pair % (2 * layers)
    return q if q < layers else 2 * layers - 1 - q


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ep-scale-"))
    rows = [
        "| job | scaled as | ranks with the real job's collectives (kind, group) | routing-free bytes equal "
        "| return bytes per pair: scaled / real (error) | within the real job's spread | check | ASTRA-sim ranks "
        "finished | simulated step (ms): scaled / real |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for captured, real in CASES:
        ranks = int(real.rsplit("np", 1)[1])
        returned, spread = _returns(MOE / real), _spread(MOE / real)
        real_step = api.simulate(MOE / real).step_ns / 1e6
        for label, options in MODES:
            out = work / f"{captured}-{label.split()[0]}" / "job"
            source = MOE / captured
            if label.startswith("from the trace"):  # a user's own capture: its ranks and nothing beside them
                source = work / "own" / captured
                source.parent.mkdir(exist_ok=True)
                for path in MOE.glob(f"{captured}.*.et"):
                    shutil.copy(path, source.parent)
            api.scale(source, out, ranks, **options)  # type: ignore[arg-type]
            same_kinds = same_bytes = compared = inside = 0
            pairs: list[str] = []
            for r in range(ranks):
                mine, theirs = collectives(f"{out}.{r}.et"), collectives(f"{MOE / real}.{r}.et")
                same_kinds += [c[:2] for c in mine] == [c[:2] for c in theirs]
                rest = [i for i in range(len(theirs)) if i not in returned]
                same_bytes += all(mine[i] == theirs[i] for i in rest)
                for n, i in enumerate(returned):
                    error = (mine[i][2] - theirs[i][2]) / theirs[i][2]
                    compared += 1
                    inside += abs(error) <= spread[_layer(n, len(spread))][2]
                    if r == 0:
                        pairs.append(f"{mine[i][2]:,} / {theirs[i][2]:,} ({error:+.1%})")
            report = api.check([f"{out}.{r}.et" for r in range(ranks)])
            simulated = api.simulate(out)
            rows.append(
                f"| {captured} -> {ranks} | {label} | {same_kinds}/{ranks} | {same_bytes}/{ranks} | "
                f"{'; '.join(pairs)} | {inside}/{compared} | {'passes' if report.ok else 'FAILS'} | "
                f"{len(simulated.ranks)}/{ranks} | {simulated.step_ns / 1e6:,.1f} / {real_step:,.1f} |"
            )
    spreads = []
    for _, real in CASES:
        shown = ", ".join(
            f"layer {n}: {lo:.3f}..{hi:.3f} ({s:.1%})" for n, (lo, hi, s) in enumerate(_spread(MOE / real))
        )
        spreads.append(f"- {real}: the busiest rank's rows over the mean, per forward of its run: {shown}")
    text = "\n".join(
        [
            "# Expert parallelism: scaled jobs against real captures",
            "",
            "`python -m bench.ep_scale` (the committed captures of `tests/data/traces/moe_ep`; CPU, gloo). "
            "Return bytes: the all-to-alls that send back what the rank's experts received (each layer's "
            "combine forward, its dispatch's gradient backward), in trace order: layer 0, layer 1, layer 1, "
            "layer 0. ASTRA-sim runs one size per all-to-all (the busiest rank's). A return is within the real "
            "job's spread when its bytes differ from the real traced step's by no more than that layer's "
            "busiest-rank load moves from step to step in the real run itself:",
            "",
            *spreads,
            "",
            *rows,
            "",
            "The simulated steps differ by their compute, not their communication: a scaled job's ranks compute "
            "as the captured ranks did (2 or 4 processes on the 2 shared cores), the real job's as its own "
            "ranks did (4 or 8 processes on the same 2 cores: each op took about twice as long). What "
            "expert parallelism changes with the ranks is in the bytes.",
            "",
        ]
    )
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()

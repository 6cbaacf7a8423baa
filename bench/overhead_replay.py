"""Every committed H200 capture replayed with the tracing's time taken out, against the step the
job runs untraced (issue 34; ``docs/overhead.md``).

    ASTRA_SIM_HOME=../shared/astra-sim python -m bench.overhead_replay [--out bench/results/overhead_replay.md]
    python -m bench.overhead_replay --from-json bench/results/overhead_replay.json   # re-render (JSON: not committed)

For each capture (``tests/data/traces/gpu_h200``): ``convert-all --astra-sim`` (the host + Kineto
pair through the host path, a Kineto trace alone through the Kineto front end), the one-GPU job
made two identical ranks (``scale --ranks 2``: ASTRA-sim's network needs two NPUs; a replay moves
nothing between them), ``simulate --replay``; against the median untraced step ``chakra-profile``
measured in the same run (its interquartile range beside it: the steps' own spread) and the traced
step. Columns: the traced durations (``--tracing-overhead none``, the replay before issue 34), the
defaults (``auto``: a Kineto trace's calibration beside it, the host path's default model), and the
default model alone (no calibration).

The default models' figures are **fitted to these captures**: the second table is the grid each
was chosen from, and each capture's error under the figure fitted to the *other* captures of its
kind (leave one out), the honest estimate for a trace that is not one of these.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from chakra_convert_fast.converter import api, overhead

ROOT = Path(__file__).resolve().parent.parent
CAPTURES = ROOT / "tests" / "data" / "traces" / "gpu_h200"
#: the per-op figures (us) each default model is chosen from
GRIDS = {
    "host": (17.0, 20.0, 23.0, 26.0),
    "kineto": (2.0, 2.3, 2.6),
}


@dataclass
class Capture:
    name: str
    kind: str  # "host" (host + Kineto) or "kineto" (Kineto alone)
    tracing: str
    untraced_ms: float
    quartiles_ms: tuple[float, float]
    traced_ms: float
    replays: dict[str, float] = field(default_factory=dict)  # setting -> simulated ms
    sources: dict[str, str] = field(default_factory=dict)  # setting -> the correction's line

    def error(self, setting: str) -> float:
        return (self.replays[setting] - self.untraced_ms) / self.untraced_ms * 100


def load(folder: Path) -> Capture:
    summary = json.loads(next(folder.glob("*_summary.json")).read_text())
    rank = summary["ranks"][0]
    untraced = [
        t * 1e3
        for i, (t, p) in enumerate(zip(rank["step_times_s"], rank["phases"], strict=True))
        if i and p in ("wait", "untraced")
    ]
    q1, _, q3 = statistics.quantiles(untraced, n=4)
    host = summary.get("host_trace", True)
    shapes = summary.get("record_shapes", True)
    tracing = ("host + Kineto" if host else "Kineto alone") + (", shapes" if shapes else "")
    return Capture(
        summary["name"],
        "host" if host else "kineto",
        tracing,
        summary["step_time_s"]["untraced_median"] * 1e3,
        (q1, q3),
        summary["step_time_s"]["traced_median"] * 1e3,
    )


def replay(capture: Capture, key: str, work: Path) -> float:
    """``convert-all --astra-sim`` (``--tracing-overhead`` from ``key``), two ranks,
    ``simulate --replay``: ms. ``model``: the default model (the traces alone, renamed so that no
    calibration is found beside them)."""
    out = work / f"{capture.name}-{key}"
    folder = CAPTURES / capture.name
    setting: str | float = key if key in ("none", "auto") else float(key) if key != "model" else "auto"
    if key == "model":
        folder = out / "in"
        folder.mkdir(parents=True)
        for trace in (CAPTURES / capture.name).glob("*_rank0_*.json.gz"):
            (folder / trace.name.replace("_rank0_", "_r0_")).symlink_to(trace)
    result = api.convert_all(folder, out / "one", api.ConvertOptions(astra_sim=True, tracing_overhead=setting), jobs=1)
    assert not result.failed, [o.message for o in result.outcomes]
    outcome = result.outcomes[0]
    capture.sources[key] = outcome.overhead.line() if outcome.overhead is not None else "kept"
    api.scale(out / "one" / result.prefix, out / "two" / result.prefix, 2)
    simulated = api.simulate(out / "two" / result.prefix, api.SimulateOptions(replay=True))
    return simulated.step_ns / 1e6


def _median_abs(errors: list[float]) -> float:
    return statistics.median(abs(e) for e in errors)


def leave_one_out(captures: list[Capture], kind: str) -> dict[str, tuple[float, float]]:
    """name -> (the grid figure with the least median |error| on the other captures of ``kind``,
    this capture's error under it)."""
    group = [c for c in captures if c.kind == kind]
    out = {}
    for held in group:
        others = [c for c in group if c is not held]
        best = min(GRIDS[kind], key=lambda v: (_median_abs([c.error(str(v)) for c in others]), v))
        out[held.name] = (best, held.error(str(best)))
    return out


def markdown(captures: list[Capture]) -> str:
    lines = [
        "Every committed H200 capture (`tests/data/traces/gpu_h200`, NVIDIA H200, torch 2.11.0+cu130): "
        "`convert-all --astra-sim`, two identical ranks, `simulate --replay`, against the median untraced "
        "step of the same run (ms; the untraced steps' interquartile range beside it). "
        "Written by `python -m bench.overhead_replay`.",
        "",
        "| capture | tracing | untraced (IQR) | traced | replay, traced durations | replay, defaults | error "
        "| replay, default model | error | what the defaults removed |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for c in captures:
        lines.append(
            f"| `{c.name}` | {c.tracing} | {c.untraced_ms:.1f} ({c.quartiles_ms[0]:.1f}-{c.quartiles_ms[1]:.1f}) "
            f"| {c.traced_ms:.1f} | {c.replays['none']:.1f} ({c.error('none'):+.1f}%) | {c.replays['auto']:.1f} "
            f"| {c.error('auto'):+.1f}% | {c.replays['model']:.1f} | {c.error('model'):+.1f}% "
            f"| {c.sources['auto'].removeprefix('tracing overhead: ').split('; --tracing')[0]} |"
        )
    for setting, label in (("none", "traced durations"), ("auto", "defaults"), ("model", "default model")):
        errors = [c.error(setting) for c in captures]
        lines.append("")
        lines.append(
            f"{label}: median |error| {_median_abs(errors):.1f}%, worst {max(errors, key=abs):+.1f}%, "
            f"{sum(abs(e) <= 5 for e in errors)} of {len(errors)} within 5%."
        )
    lines += [
        "",
        "The default models' figures (us per recorded op) and where they come from: for each kind, each "
        "figure of the grid, every capture's error; the figure each capture gets when it is left out of the "
        "choice (least median |error| on the others) and its error then.",
        "",
    ]
    lines.append("| capture | kind | figures tried: error | left out: figure | left out: error |")
    lines.append("|---|---|---|---:|---:|")
    for kind in ("host", "kineto"):
        loo = leave_one_out(captures, kind)
        for c in (c for c in captures if c.kind == kind):
            tried = ", ".join(f"{v:g}: {c.error(str(v)):+.1f}%" for v in GRIDS[kind])
            figure, error = loo[c.name]
            lines.append(f"| `{c.name}` | {kind} | {tried} | {figure:g} | {error:+.1f}% |")
    for kind, default in (("host", overhead.HOST_PER_OP_US), ("kineto", overhead.KINETO_PER_OP_US)):
        group = [c for c in captures if c.kind == kind]
        best = min(GRIDS[kind], key=lambda v: (_median_abs([c.error(str(v)) for c in group]), v))
        minimax = min(GRIDS[kind], key=lambda v: (max(abs(c.error(str(v))) for c in group), v))
        loo_errors = [e for _, e in leave_one_out(captures, kind).values()]
        lines.append("")
        lines.append(
            f"{kind}: the default model's figure {default:g} us per op (on all of them, least median |error|: "
            f"{best:g}, least worst |error|: {minimax:g}); left out, median |error| {_median_abs(loo_errors):.1f}%, "
            f"worst {max(loo_errors, key=abs):+.1f}%."
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "overhead_replay.md")
    parser.add_argument(
        "--from-json", type=Path, default=None, help="render the replays saved beside --out instead of running them"
    )
    args = parser.parse_args(argv)
    captures = [load(folder) for folder in sorted(p for p in CAPTURES.iterdir() if p.is_dir())]
    saved = args.out.with_suffix(".json")
    if args.from_json is not None:
        runs = json.loads(args.from_json.read_text())
        for c in captures:
            c.replays, c.sources = runs[c.name]["replays"], runs[c.name]["sources"]
        args.out.write_text(markdown(captures), encoding="utf-8")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        for c in captures:
            for key in ("none", "auto", "model", *map(str, GRIDS[c.kind])):
                if key == "model" and c.kind == "host":  # the host path uses no calibration
                    c.replays[key], c.sources[key] = c.replays["auto"], c.sources["auto"]
                    continue
                c.replays[key] = replay(c, key, Path(tmp))
                print(f"{c.name} {key}: {c.replays[key]:.1f} ms ({c.error(key):+.1f}%)", file=sys.stderr, flush=True)
    runs = {c.name: {"replays": c.replays, "sources": c.sources} for c in captures}
    saved.write_text(json.dumps(runs, indent=1) + "\n", encoding="utf-8")
    args.out.write_text(markdown(captures), encoding="utf-8")
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

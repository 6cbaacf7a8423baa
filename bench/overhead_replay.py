"""Every committed H200 capture replayed with the tracing's time taken out, against the step the
job runs untraced (issue 34; ``docs/overhead.md``).

    ASTRA_SIM_HOME=../shared/astra-sim python -m bench.overhead_replay [--captures DIR ...] [--out FILE.md]
    python -m bench.overhead_replay --from-json bench/results/overhead_replay.json   # re-render (JSON: not committed)

For each capture of each folder (default: ``tests/data/traces/gpu_h200`` then ``gpu_h100``, the
same ten configurations on two GPUs): ``convert-all --astra-sim`` (the host + Kineto
pair through the host path, a Kineto trace alone through the Kineto front end), the one-GPU job
made two identical ranks (``scale --ranks 2``: ASTRA-sim's network needs two NPUs; a replay moves
nothing between them), ``simulate --replay``; against the median untraced step ``chakra-profile``
measured in the same run (its interquartile range beside it: the steps' own spread) and the traced
step. Columns: the traced durations (``--tracing-overhead none``, the replay before issue 34), the
defaults (``auto``: the calibration beside the trace), and no calibration (the traces alone: the
host path's figure measured in the trace itself, by thread; a Kineto trace's default model).

The measured figure's factor and the Kineto default model's figure were **chosen on the H200
captures**: for the H200 the second table is the grid of fixed figures per op, and each capture's
error under the figure fitted to the *other* captures of its kind (leave one out); the H100
captures were never used to choose anything, so their "no calibration" column is held out.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from chakra_convert_fast.converter import api, overhead

ROOT = Path(__file__).resolve().parent.parent
TRACES = ROOT / "tests" / "data" / "traces"
#: the folders the table covers by default, each one GPU's captures
CAPTURES = (TRACES / "gpu_h200", TRACES / "gpu_h100")
#: the folder whose captures the default models were fitted to
FITTED = "gpu_h200"
#: the per-op figures (us) each default model is chosen from
GRIDS = {
    "host": (11.0, 14.0, 17.0, 20.0, 23.0, 26.0),
    "kineto": (2.0, 2.3, 2.6),
}


@dataclass
class Capture:
    folder: Path
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
        folder,
        summary["name"],
        "host" if host else "kineto",
        tracing,
        summary["step_time_s"]["untraced_median"] * 1e3,
        (q1, q3),
        summary["step_time_s"]["traced_median"] * 1e3,
    )


def replay(capture: Capture, key: str, work: Path) -> float:
    """``convert-all --astra-sim`` (``--tracing-overhead`` from ``key``), two ranks,
    ``simulate --replay``: ms. ``model``: no calibration (the traces alone, linked into a folder
    without it)."""
    out = work / f"{capture.folder.parent.name}-{capture.name}-{key}"
    folder = capture.folder
    named = {"none": "none", "auto": "auto", "model": "auto"}  # "model": auto without the calibration
    setting: str | float = named[key] if key in named else float(key)
    if key == "model":
        folder = out / "in"
        folder.mkdir(parents=True)
        for trace in capture.folder.glob("*_rank0_*.json.gz"):  # the traces without their calibration
            (folder / trace.name).symlink_to(trace)
    result = api.convert_all(folder, out / "one", api.ConvertOptions(astra_sim=True, tracing_overhead=setting), jobs=1)
    assert not result.failed, [o.message for o in result.outcomes]
    outcome = result.outcomes[0]
    capture.sources[key] = outcome.overhead.line() if outcome.overhead is not None else "kept"
    api.scale(out / "one" / result.prefix, out / "two" / result.prefix, 2)
    simulated = api.simulate(out / "two" / result.prefix, api.SimulateOptions(replay=True))
    return simulated.step_ns / 1e6


def _held_out(captures: list[Capture]) -> list[str]:
    """No calibration on captures nothing was chosen on, by kind."""
    lines = []
    for kind, label in (("host", "host + Kineto, measured in the trace"), ("kineto", "Kineto alone, default model")):
        errors = [c.error("model") for c in captures if c.kind == kind]
        if errors:
            lines += [
                "",
                f"no calibration, {label}, held out: median |error| {_median_abs(errors):.1f}%, worst "
                f"{max(errors, key=abs):+.1f}%, {sum(abs(e) <= 5 for e in errors)} of {len(errors)} within 5%.",
            ]
    return lines


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


def gpu_name(captures: list[Capture]) -> str:
    summary = json.loads(next(captures[0].folder.glob("*_summary.json")).read_text())
    return str(summary.get("gpu", captures[0].folder.parent.name))


def markdown(groups: list[list[Capture]]) -> str:
    """Each folder's tables, one after the other (``<!-- results: overhead_replay.md#N -->``: the
    fitted folder's replay and grid tables are 1 and 2, the next folder's replay table 3)."""
    return "\n".join(_folder_markdown(captures, fitted=is_fitted(captures[0])) for captures in groups)


#: the range a conversion without a calibration gives where its step is uncertain (``Removed.line``)
_RANGE = re.compile(r"uncertain: the step comes to [\d,.]+ ms, (?P<least>[\d,.]+)-(?P<most>[\d,.]+) ms")


def said_range(capture: Capture) -> tuple[float, float] | None:
    """The range (ms) the conversion without a calibration said its step is uncertain within."""
    found = _RANGE.search(capture.sources.get("model", ""))
    return None if found is None else (float(found["least"].replace(",", "")), float(found["most"].replace(",", "")))


def said(capture: Capture) -> str:
    """What the conversion without a calibration said of its step: the range, and whether the
    untraced step is in it; or that it was sure."""
    found = said_range(capture)
    if found is None:
        return "sure"
    least, most = found
    inside = "holds it" if least <= capture.untraced_ms <= most else "misses it"
    return f"uncertain, {least:.1f}-{most:.1f}: {inside}"


def is_fitted(capture: Capture) -> bool:
    """Whether the default models were fitted to the captures of this one's folder (the grid is
    run there)."""
    return capture.folder.parent.name == FITTED


def _folder_markdown(captures: list[Capture], fitted: bool) -> str:
    folder = captures[0].folder.parent
    lines = [
        f"## {gpu_name(captures)}",
        "",
        f"Every committed capture of `{folder.relative_to(ROOT)}` ({gpu_name(captures)}, torch 2.11.0+cu130): "
        "`convert-all --astra-sim`, two identical ranks, `simulate --replay`, against the median untraced "
        "step of the same run (ms; the untraced steps' interquartile range beside it). "
        "Written by `python -m bench.overhead_replay`."
        + (
            ""
            if fitted
            else " The measured figure's factor and the Kineto default model were chosen on the captures of "
            f"`{FITTED}`, never these: the no-calibration column is held out."
        ),
        "",
        "| capture | tracing | untraced (IQR) | traced | replay, traced durations | replay, defaults | error "
        "| replay, no calibration | error | said, no calibration | what the defaults removed |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for c in captures:
        lines.append(
            f"| `{c.name}` | {c.tracing} | {c.untraced_ms:.1f} ({c.quartiles_ms[0]:.1f}-{c.quartiles_ms[1]:.1f}) "
            f"| {c.traced_ms:.1f} | {c.replays['none']:.1f} ({c.error('none'):+.1f}%) | {c.replays['auto']:.1f} "
            f"| {c.error('auto'):+.1f}% | {c.replays['model']:.1f} | {c.error('model'):+.1f}% | {said(c)} "
            f"| {c.sources['auto'].removeprefix('tracing overhead: ').split('; --tracing')[0]} |"
        )
    for setting, label in (("none", "traced durations"), ("auto", "defaults"), ("model", "no calibration")):
        errors = [c.error(setting) for c in captures]
        lines.append("")
        lines.append(
            f"{label}: median |error| {_median_abs(errors):.1f}%, worst {max(errors, key=abs):+.1f}%, "
            f"{sum(abs(e) <= 5 for e in errors)} of {len(errors)} within 5%."
        )
    uncertain = [c for c in captures if said_range(c) is not None]
    sure = [c for c in captures if said_range(c) is None]
    holds = sum(1 for c in uncertain if said(c).endswith("holds it"))
    lines += [
        "",
        f"no calibration, what the conversion said: {len(uncertain)} uncertain, the range holding the untraced step "
        f"in {holds}; {len(sure)} sure"
        + (f", within {max(abs(c.error('model')) for c in sure):.1f}%." if sure else "."),
    ]
    if not fitted:
        return "\n".join(lines + _held_out(captures)) + "\n"
    lines += [
        "",
        "Fixed figures per recorded op (the default models' figures, where a trace measures nothing of its own) "
        "and where they come from: for each kind, each figure of the grid, every capture's error; the figure each "
        "capture gets when it is left out of the choice (least median |error| on the others) and its error then.",
        "",
    ]
    lines.append("| capture | kind | figures tried: error | left out: figure | left out: error |")
    lines.append("|---|---|---|---:|---:|")
    #: a leave-one-out choice needs two captures of the kind at least (``--select`` may leave fewer)
    kinds = [kind for kind in ("host", "kineto") if sum(c.kind == kind for c in captures) >= 2]
    for kind in kinds:
        loo = leave_one_out(captures, kind)
        for c in (c for c in captures if c.kind == kind):
            tried = ", ".join(f"{v:g}: {c.error(str(v)):+.1f}%" for v in GRIDS[kind])
            figure, error = loo[c.name]
            lines.append(f"| `{c.name}` | {kind} | {tried} | {figure:g} | {error:+.1f}% |")
    for kind, default in (("host", overhead.HOST_PER_OP_US), ("kineto", overhead.KINETO_PER_OP_US)):
        if kind not in kinds:
            continue
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
    parser.add_argument(
        "--captures",
        type=Path,
        action="append",
        default=None,
        help="a folder of captures, one GPU's (repeat it; default: gpu_h200 then gpu_h100)",
    )
    parser.add_argument(
        "--select", default="*", help="replay only the captures whose folder name matches this pattern (default: all)"
    )
    parser.add_argument(
        "--keys",
        choices=("all", "main", "grid"),
        default="all",
        help="the replays to run: all; main (traced, defaults, no calibration); grid (the fixed figures' grid, "
        "on the captures they were fitted to)",
    )
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "overhead_replay.md")
    parser.add_argument(
        "--from-json", type=Path, default=None, help="render the replays saved beside --out instead of running them"
    )
    args = parser.parse_args(argv)
    folders = [f.resolve() for f in (args.captures or CAPTURES)]
    groups = [[load(p) for p in sorted(folder.glob(args.select)) if p.is_dir()] for folder in folders]
    saved = args.out.with_suffix(".json")
    if args.from_json is not None:
        runs = json.loads(args.from_json.read_text())
        for c in (c for captures in groups for c in captures):
            run = runs[f"{c.folder.parent.name}/{c.name}"]
            c.replays, c.sources = run["replays"], run["sources"]
        args.out.write_text(markdown(groups), encoding="utf-8")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        for c in (c for captures in groups for c in captures):
            grid = tuple(map(str, GRIDS[c.kind])) if is_fitted(c) else ()
            keys = {"all": ("none", "auto", "model", *grid), "main": ("none", "auto", "model"), "grid": grid}
            for key in keys[args.keys]:
                c.replays[key] = replay(c, key, Path(tmp))
                print(
                    f"{c.folder.parent.name}/{c.name} {key}: {c.replays[key]:.1f} ms ({c.error(key):+.1f}%)",
                    file=sys.stderr,
                    flush=True,
                )
    runs = {
        f"{c.folder.parent.name}/{c.name}": {"replays": c.replays, "sources": c.sources}
        for captures in groups
        for c in captures
    }
    saved.write_text(json.dumps(runs, indent=1) + "\n", encoding="utf-8")
    if args.keys != "all":
        print(f"{saved} (part of the replays: render the merged JSON with --from-json)")
        return 0
    args.out.write_text(markdown(groups), encoding="utf-8")
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

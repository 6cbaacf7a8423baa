"""CPU captures (GPT-2 and BERT, DDP and FSDP, 2 gloo ranks) replayed with the tracing's time taken
out, against the step the job runs untraced in the same run (issue 34; ``docs/overhead.md``).

    ASTRA_SIM_HOME=../shared/astra-sim python -m bench.overhead_replay_cpu [--out bench/results/overhead_replay_cpu.md]
        [--captures DIR]       # keep the captures there (default: a temporary folder)
    python -m bench.overhead_replay_cpu --from-captures tests/data/traces/cpu_overhead   # replay these
    python -m bench.overhead_replay_cpu --from-json bench/results/overhead_replay_cpu.json   # re-render
    ... --append: add this run's table to --out under a heading, instead of replacing it
    ... --no-host-trace: capture the Kineto trace alone (the replays go through the Kineto front end)

Each configuration is captured with ``chakra-profile --size tiny --nproc 2 --threads 1`` (host trace
+ Kineto with ``record_shapes``, chakra-profile's default; ``--steps 20 --wait 8 --warmup 1 --active
1``: 17 untraced steps besides the first, timed in the same run, and each rank's calibration
``{name}_rank{N}_overhead.json`` beside its traces). With ``--no-host-trace`` the capture is the
Kineto trace alone (``chakra-profile --no-host-trace``), and ``convert-all`` converts it through the
Kineto front end. Then ``convert-all --astra-sim`` and ``simulate --replay``, with defaults
(``auto``: the rank's calibration, and each collective's least traced duration across the ranks;
the host path gives its CPU ops the untraced step outside the collectives, ``converter/convert/
untrace.py``; the Kineto front end finds the cost per recorded event at which its step estimate
comes down to the untraced step, ``converter/kineto/untrace.py``), with the traced
durations (``none``) and with the default model alone (the traces renamed so that no calibration is
found beside them: what a CPU trace from another tracer gets; the collectives as with the defaults).
The defaults' replay lands on each rank's untraced step nearly by construction (the calibration is
the untraced step); the default model's is the check that uses no figure of the run.
Each replay is held against the median untraced step of the whole job (both ranks' steps; their
interquartile range beside it: the machine's own noise; "load": the machine's 1-minute load
average right after the capture). "Waits in collectives": in the traced replay, the most time a
rank's gloo collectives took beyond the least any rank's took (ms): waiting for the peer
while traced, which ``replay-only`` replays as transfer unless it is taken out (the defaults and
the default model do: ``converter/ranks/collwaits.py``). In a Kineto trace alone the collective's
node runs beside the host timeline, which holds the host's wait for it too (the collective's slot,
or the gaps while it ran): evening the node leaves that wait in the host's time, where the
calibration takes it out with the profiler's (it lands the rank's step on its untraced one) and the
default model does not.

Timings on a shared machine are noisy: capture on a quiet one, with one thread per rank, and judge
each replay against the untraced steps of its own run, never another run's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from chakra_convert_fast.converter import api, overhead

ROOT = Path(__file__).resolve().parent.parent
#: (model, data parallelism) of each capture
CONFIGS = (("gpt2", "ddp"), ("bert", "ddp"), ("gpt2", "fsdp"), ("bert", "fsdp"))
PROFILE = ["--size", "tiny", "--nproc", "2", "--threads", "1", "--steps", "20", "--wait", "8", "--warmup", "1"]
SETTINGS = ("none", "auto", "model")


@dataclass
class Capture:
    name: str
    model: str
    dp: str
    untraced_ms: float
    quartiles_ms: tuple[float, float]
    traced_ms: float
    torch: str
    load: float | None = None  # the machine's 1-minute load average right after the capture
    replays: dict[str, float] = field(default_factory=dict)  # setting -> simulated ms
    sources: dict[str, str] = field(default_factory=dict)  # setting -> rank 0's correction line
    #: setting -> the most ms a rank's collectives took beyond the least any rank's took
    waits: dict[str, float] = field(default_factory=dict)
    #: whether the capture holds a host trace beside the Kineto trace (chakra-profile's default)
    host_trace: bool = True

    def error(self, setting: str) -> float:
        return (self.replays[setting] - self.untraced_ms) / self.untraced_ms * 100


def capture(model: str, dp: str, where: Path, host_trace: bool = True) -> Path:
    """``chakra-profile`` of one configuration into ``where/{model}_{dp}`` (``--no-host-trace``
    where ``host_trace`` is false: the Kineto trace alone)."""
    name = f"{model}_{dp}"
    folder = where / name
    command = ["chakra-profile", "--model", model, "--dp", dp, *PROFILE, "--active", "1"]
    if not host_trace:
        command.append("--no-host-trace")
    command += ["--outdir", str(folder), "--name", name]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    subprocess.run(command, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    return folder


def load(folder: Path) -> Capture:
    summary = json.loads(next(folder.glob("*_summary.json")).read_text())
    untraced = [
        t * 1e3
        for rank in summary["ranks"]
        for i, (t, p) in enumerate(zip(rank["step_times_s"], rank["phases"], strict=True))
        if i and p in ("wait", "untraced")
    ]
    q1, _, q3 = statistics.quantiles(untraced, n=4)
    model, dp = summary["name"].split("_", 1)
    return Capture(
        summary["name"],
        model,
        dp,
        summary["step_time_s"]["untraced_median"] * 1e3,
        (q1, q3),
        summary["step_time_s"]["traced_median"] * 1e3,
        summary.get("torch", ""),
        host_trace=bool(summary.get("host_trace", True)),
    )


def replay(capture: Capture, folder: Path, key: str, work: Path) -> float:
    """``convert-all --astra-sim`` (``--tracing-overhead`` from ``key``), ``simulate --replay``: ms.
    ``model``: the traces under another name, so that no calibration is found beside them."""
    out = work / f"{capture.name}-{key}"
    source = folder
    if key == "model":
        source = out / "in"
        source.mkdir(parents=True)
        for trace in folder.glob(f"{capture.name}_rank*_*.json*"):
            if not trace.name.endswith(overhead.CALIBRATION_SUFFIX):
                (source / trace.name.replace(capture.name, "uncalibrated", 1)).symlink_to(trace.resolve())
    setting = "auto" if key == "model" else key
    options = api.ConvertOptions(astra_sim=True, tracing_overhead=setting)
    result = api.convert_all(source, out / "et", options, jobs=1, prefix=capture.name)
    assert not result.failed, [o.message for o in result.outcomes]
    first = result.outcomes[0].overhead
    capture.sources[key] = first.line() if first is not None else "kept"
    simulated = api.simulate(out / "et" / result.prefix, api.SimulateOptions(replay=True))
    least = min(r.transfer_ns for r in simulated.ranks)
    capture.waits[key] = (max(r.transfer_ns for r in simulated.ranks) - least) / 1e6
    return simulated.step_ns / 1e6


def _median_abs(errors: list[float]) -> float:
    return statistics.median(abs(e) for e in errors)


def markdown(captures: list[Capture]) -> str:
    torch = captures[0].torch if captures else ""
    kinds = {c.host_trace for c in captures}
    tracing = (
        "host trace + Kineto with record_shapes"
        if kinds == {True}
        else "`--no-host-trace`: Kineto alone with record_shapes, through the Kineto front end"
        if kinds == {False}
        else "host trace + Kineto or Kineto alone, with record_shapes"
    )
    lines = [
        f"CPU captures (`chakra-profile --size tiny --nproc 2 --threads 1`, gloo, torch {torch}, {tracing}): "
        "`convert-all --astra-sim`, `simulate --replay`, against the median untraced "
        "step of the same run (ms, both ranks' steps; their interquartile range beside it). "
        "Written by `python -m bench.overhead_replay_cpu`.",
        "",
        "| capture | untraced (IQR) | traced | replay, traced durations | replay, defaults | error "
        "| replay, default model | error | waits in collectives | load | what the defaults removed (rank 0) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for c in captures:
        said = c.sources["auto"].removeprefix("tracing overhead: ").split("; --tracing")[0]
        lines.append(
            f"| `{c.name}` | {c.untraced_ms:.1f} ({c.quartiles_ms[0]:.1f}-{c.quartiles_ms[1]:.1f}) "
            f"| {c.traced_ms:.1f} | {c.replays['none']:.1f} ({c.error('none'):+.1f}%) | {c.replays['auto']:.1f} "
            f"| {c.error('auto'):+.1f}% | {c.replays['model']:.1f} | {c.error('model'):+.1f}% | {c.waits['none']:.1f} "
            f"| {'' if c.load is None else f'{c.load:.1f}'} | {said} |"
        )
    for setting, label in (("none", "traced durations"), ("auto", "defaults"), ("model", "default model")):
        errors = [c.error(setting) for c in captures]
        lines.append("")
        lines.append(
            f"{label}: median |error| {_median_abs(errors):.1f}%, worst {max(errors, key=abs):+.1f}%, "
            f"{sum(abs(e) <= 10 for e in errors)} of {len(errors)} within 10%, "
            f"{sum(abs(e) <= 5 for e in errors)} within 5%."
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "overhead_replay_cpu.md")
    parser.add_argument("--captures", type=Path, default=None, help="keep the captures here (default: temporary)")
    parser.add_argument(
        "--from-captures", type=Path, default=None, help="replay the captures in DIR/{model}_{dp} instead of capturing"
    )
    parser.add_argument("--append", metavar="HEADING", default=None, help="append this run under ## HEADING")
    parser.add_argument(
        "--no-host-trace",
        action="store_true",
        help="capture the Kineto trace alone (chakra-profile --no-host-trace): the Kineto front end converts it",
    )
    parser.add_argument(
        "--from-json", type=Path, default=None, help="render the replays saved beside --out instead of running them"
    )
    args = parser.parse_args(argv)
    saved = args.out.with_suffix(".json")
    if args.append is not None:
        slug = "-".join("".join(ch if ch.isalnum() else " " for ch in args.append.lower()).split()[:2])
        saved = args.out.with_name(f"{args.out.stem}.{slug}.json")
    if args.from_json is not None:
        runs = json.loads(args.from_json.read_text())
        captures = []
        for run in runs.values():
            run["quartiles_ms"] = tuple(run["quartiles_ms"])
            captures.append(Capture(**run))
        write(args.out, markdown(captures), args.append)
        return 0
    captures = []
    with tempfile.TemporaryDirectory() as tmp:
        where = args.captures or Path(tmp) / "captures"
        for model, dp in CONFIGS:
            if args.from_captures is not None:
                folder, busy = args.from_captures / f"{model}_{dp}", None
                if not folder.is_dir():
                    continue
            else:
                print(f"capturing {model} {dp} ...", file=sys.stderr, flush=True)
                folder = capture(model, dp, where, host_trace=not args.no_host_trace)
                busy = os.getloadavg()[0]
            c = load(folder)
            c.load = busy
            for key in SETTINGS:
                c.replays[key] = replay(c, folder, key, Path(tmp))
                print(f"{c.name} {key}: {c.replays[key]:.1f} ms ({c.error(key):+.1f}%)", file=sys.stderr, flush=True)
            captures.append(c)
    runs = {c.name: vars(c) for c in captures}
    saved.write_text(json.dumps(runs, indent=1) + "\n", encoding="utf-8")
    write(args.out, markdown(captures), args.append)
    print(args.out)
    return 0


def write(out: Path, table: str, heading: str | None) -> None:
    if heading is None:
        out.write_text(table, encoding="utf-8")
        return
    before = out.read_text(encoding="utf-8") if out.exists() else ""
    out.write_text(f"{before}{chr(10) if before else ''}## {heading}\n\n{table}", encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main())

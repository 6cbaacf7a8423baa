"""The cross-GPU what-if (issue 35): each H200 capture predicted on the H100, and each H100 capture on the H200.

    ASTRA_SIM_HOME=../shared/astra-sim python -m bench.gpu.whatif_cross_gpu [--out bench/results/whatif_cross_gpu.md]

The same ten configurations were captured on an H200 and an H100 (``tests/data/traces/gpu_h200``,
``gpu_h100``: same torch, CUDA and NCCL). Each capture on GPU A is converted ``convert --kineto``
with a what-if for GPU B, simulated (the one-GPU job as two identical ranks, as in
``whatif_profile``), and set against **B's** measured untraced step of the same configuration
(its ``*_summary.json``), which the what-if never saw. The ways (``VARIANTS``):

* ``profile``: ``--device-profile B``, the shipped profile: each kernel timed from B's points by
  its launching op's shape. B's points come from B's captures, this configuration's among them:
  each op finds B's own time at its shape (circular; the ``held out`` columns are not).
* ``scaled``: ``--source-profile A --device-profile B``, both shipped: each kernel's traced time on
  A scaled by B's over A's time at its shape (circular in the same way).
* ``held out``: the same, the configuration (model, batch) left out of both profiles' points
  (the host costs stay the shipped ones: one fitted number per GPU).
* ``grid``: the two GPUs' micro-benchmark grids alone (``device_profile.json``:
  ``chakra-profile device-profile``), which never saw these models: the NeuSight question.
  ``grid, profile`` times each kernel from B's grid; ``grid, scaled`` scales by B's grid over A's;
  both take the grid's host costs (measured in a loop). ``grid kernels, fitted host`` scales by the
  grids and takes the shipped profile's host costs: the kernels' part of the difference alone.

The captures without shapes get the scaled ways only (by class, else by device: no shape to look up).
The report also says how far the grid's keys cover the traced ops, and how the grid interpolates,
on each GPU, the traced ops it has no point for (per class, against their CUPTI times).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

from bench.gpu.whatif_profile import WITH_SHAPES, WITHOUT_SHAPES, config, untraced_spread, whatif_step
from chakra_convert_fast.converter.devices import profile as dp
from chakra_convert_fast.converter.kineto import convert_kineto
from chakra_convert_fast.converter.kineto.events import read_events
from chakra_convert_fast.converter.kineto.measure import Launched, launched_ops, points_json

ROOT = Path("tests/data/traces")
SHIPPED_DIR = Path("converter/devices/data")
DIRECTIONS = (("h200", "h100"), ("h100", "h200"))
NAMES = {"h200": "H200", "h100": "H100"}
#: label -> (source profile, target profile): "shipped", "held" (this configuration left out), "grid";
#: the target's host costs: from that profile, or "fitted" (the shipped profile's)
VARIANTS: dict[str, tuple[str | None, str, str]] = {
    "profile": (None, "shipped", ""),
    "profile, held out": (None, "held", ""),
    "scaled": ("shipped", "shipped", ""),
    "scaled, held out": ("held", "held", ""),
    "grid, profile": (None, "grid", ""),
    "grid, scaled": ("grid", "grid", ""),
    "grid kernels, fitted host": ("grid", "grid", "fitted"),
}
PLAIN_VARIANTS = ("scaled", "grid, scaled", "grid kernels, fitted host")
FLOATING = ("bf16", "fp32", "fp16")


def capture_file(gpu: str, name: str, pattern: str) -> Path:
    return next((ROOT / f"gpu_{gpu}" / name).glob(pattern))


def measured_ms(gpu: str, name: str) -> float:
    summary = json.loads(capture_file(gpu, name, "*_summary.json").read_text())
    return float(summary["step_time_s"]["untraced_median"]) * 1e3


class Profiles:
    """Each GPU's shipped profile, its grid, and its profile with one configuration held out."""

    def __init__(self) -> None:
        self.text = {g: json.loads((SHIPPED_DIR / f"{g}.json").read_text()) for g in NAMES}
        self.grid = {g: json.loads((ROOT / f"gpu_{g}" / "device_profile.json").read_text()) for g in NAMES}
        self.launched: dict[tuple[str, str], list[Launched]] = {
            (g, n): launched_ops(read_events(str(capture_file(g, n, "*_device.json*"))))
            for g in NAMES
            for n in WITH_SHAPES
        }

    def get(self, gpu: str, kind: str, name: str, host: str = "") -> dp.DeviceProfile:
        if kind == "grid":
            fields = dict(self.grid[gpu])
            if host == "fitted":
                fields["host"] = self.text[gpu]["host"]
                if "gpu" in self.text[gpu]:  # the GPU's time between queued kernels, made with the host costs
                    fields["gpu"] = self.text[gpu]["gpu"]
        elif kind == "held":
            others = [o for n in WITH_SHAPES if config(n) != config(name) for o in self.launched[gpu, n]]
            fields = dict(self.text[gpu]) | {"ops": points_json(others)}
        else:
            fields = self.text[gpu]
        return dp.parse(json.loads(dp.to_json(fields)), f"{gpu}-{kind}-{host or 'own'}-host")


def target_classes(gpu: str, name: str, profiles: Profiles, work: Path) -> dict[str, float]:
    """The target capture's kernel time per class (CUPTI, us), classed as the what-if classes them."""
    device = capture_file(gpu, name, "*_device.json*")
    out = work / f"target-{gpu}-{name}" / "x.0.et"
    out.parent.mkdir(parents=True, exist_ok=True)
    summary = convert_kineto(device, str(out), device_profile=profiles.get(gpu, "shipped", name)).whatif
    assert summary is not None
    return {cls: sum(t.traced_us for t in models.values()) for cls, models in summary.classes.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="bench/results/whatif_cross_gpu.md")
    args = parser.parse_args(argv)
    profiles = Profiles()
    rows: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    classes: dict[tuple[str, str, str], dict[str, list[float]]] = {}
    with tempfile.TemporaryDirectory(prefix="whatif-cross-") as tmp:
        work = Path(tmp)
        for src, tgt in DIRECTIONS:
            for name in (*WITH_SHAPES, *WITHOUT_SHAPES):
                shapes = name in WITH_SHAPES
                row: dict[str, Any] = {
                    "capture": name,
                    "source": measured_ms(src, name),
                    "measured": measured_ms(tgt, name),
                    "spread": untraced_spread(ROOT / f"gpu_{tgt}" / name),
                    "steps": {},
                }
                target = (
                    target_classes(tgt, name, profiles, work) if shapes and name.startswith(("bert", "gpt2")) else {}
                )
                for label, (source_kind, target_kind, host) in VARIANTS.items():
                    if not shapes and label not in PLAIN_VARIANTS:
                        continue
                    device = capture_file(src, name, "*_device.json*")
                    tag = f"{src}-{tgt}-{name}-{label.replace(' ', '_').replace(',', '')}"
                    tgt_profile = profiles.get(tgt, target_kind, name, host)
                    src_profile = None if source_kind is None else profiles.get(src, source_kind, name)
                    step, summary = whatif_step(device, tgt_profile, work, tag, src_profile)
                    row["steps"][label] = step
                    if target:
                        table = classes.setdefault((src, tgt, label), defaultdict(lambda: [0.0, 0.0, 0.0]))
                        for cls, models in summary.classes.items():
                            entry = table[cls]
                            entry[0] += sum(t.traced_us for t in models.values())
                            entry[1] += sum(t.whatif_us for t in models.values())
                        for cls, us in target.items():
                            table[cls][2] += us
                    print(f"{tag}: {step:.1f} ms (measured {row['measured']:.1f})", file=sys.stderr)
                rows[src, tgt].append(row)
    text = "\n".join((report(rows, classes), merged(profiles), coverage(profiles)))
    Path(args.out).write_text(text)
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


def _diff(a: float, b: float) -> str:
    return f"{(a - b) / b:+.1%}"


def report(rows: dict[tuple[str, str], list[dict[str, Any]]], classes: dict[tuple[str, str, str], Any]) -> str:
    lines = [
        "# What-if on the other GPU: H200 captures predicted on the H100, and back (issue 35)",
        "",
        "Made by `python -m bench.gpu.whatif_cross_gpu` (ASTRA-sim analytical backend, the one-GPU job as two "
        "identical ranks). Each capture on GPU A, `convert --kineto` with a what-if for GPU B, simulated, against "
        "**B's** measured untraced step of the same configuration (the median of its run's untraced steps), "
        "which the what-if never saw. The ways:",
        "",
        "- **profile**: `--device-profile B` (shipped): each kernel from B's points by its launching op's shape.",
        "- **scaled**: `--source-profile A --device-profile B` (shipped): each kernel's traced time on A scaled by "
        "B's over A's time at its shape.",
        "- The shipped profiles hold each configuration's own points (made from the captures): those two columns "
        "are circular for the kernels. **held out**: the configuration (model, batch) left out of both profiles' "
        "points; the host costs stay the shipped ones (one fitted pair per GPU).",
        "- **grid**: the micro-benchmark grids alone (`device_profile.json`, `chakra-profile device-profile`), "
        "which never saw these models, host costs from the grid's loop; **grid kernels, fitted host**: the grids' "
        "kernel scaling with the shipped profile's host costs.",
        "",
        "A what-if's difference from the measured step is not an error of the same kind as a replay's: the "
        "measured step is the median of steps that vary (the min - max column), most where the host bounds them.",
        "",
    ]
    for (src, tgt), table in rows.items():
        labels = list(VARIANTS)
        lines += [
            f"## {NAMES[src]} captures, what-if for the {NAMES[tgt]}",
            "",
            f"| capture | {NAMES[src]} measured (ms) | {NAMES[tgt]} measured (ms) | {NAMES[tgt]} min - max (ms) | "
            + " | ".join(labels)
            + " |",
            "|---|---:|---:|---:|" + "---:|" * len(labels),
        ]
        for r in table:
            cells = [
                f"{r['steps'][v]:.1f} ({_diff(r['steps'][v], r['measured'])})" if v in r["steps"] else "-"
                for v in labels
            ]
            lines.append(
                f"| `{r['capture']}` | {r['source']:.1f} | {r['measured']:.1f} | "
                f"{r['spread'][0]:.1f} - {r['spread'][1]:.1f} | " + " | ".join(cells) + " |"
            )
        lines += ["", "|difference| against the measured step:", ""]
        for groupname, names in (("with shapes", WITH_SHAPES), ("without shapes", WITHOUT_SHAPES)):
            for v in labels:
                diffs = [
                    abs(r["steps"][v] - r["measured"]) / r["measured"]
                    for r in table
                    if r["capture"] in names and v in r["steps"]
                ]
                if diffs:
                    within = sum(d <= 0.10 for d in diffs)
                    lines.append(
                        f"- {groupname}, {v}: median {statistics.median(diffs):.1%}, max {max(diffs):.1%}, "
                        f"{within} of {len(diffs)} within 10%"
                    )
        lines += [""]
        lines += [
            f"Kernel time per class, summed over the four host + Kineto captures ({NAMES[src]} traced -> what-if, "
            f"against the {NAMES[tgt]}'s own CUPTI time for the same configurations):",
            "",
            "| class | " + " | ".join(f"{v}: {NAMES[src]} -> what-if vs {NAMES[tgt]}" for v in labels) + " |",
            "|---|" + "---:|" * len(labels),
        ]
        order = sorted(classes[src, tgt, "scaled"], key=lambda c: -classes[src, tgt, "scaled"][c][2])
        for cls in order:
            cells = []
            for v in labels:
                a, b, t = classes[src, tgt, v].get(cls, [0.0, 0.0, 0.0])
                cells.append(f"{a / 1e3:.1f} -> {b / 1e3:.1f} vs {t / 1e3:.1f} ({_diff(b, t) if t else '-'})")
            lines.append(f"| {cls} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def merged(profiles: Profiles) -> str:
    """Should a shipped profile hold its GPU's grid beside the captures' points? Each configuration's
    kernels, held out, timed from the other configurations' points alone, with the grid added, and
    from the grid alone, against their CUPTI sum (kernels with no point keep their traced time)."""
    lines = [
        "## The grid beside the captures' points?",
        "",
        "Each host + Kineto capture's kernels (those with a launching op with shapes) on its own GPU, timed "
        "from a profile that never saw its configuration: the other configurations' points (**captures**), "
        "those and the GPU's grid (**captures + grid**), the grid alone (**grid**); the sum against their "
        "traced (CUPTI) sum. Kernels with no point of their class and dtype keep their traced time.",
        "",
        "| GPU | capture | traced (ms) | captures | captures + grid | grid |",
        "|---|---|---:|---:|---:|---:|",
    ]
    worse = []
    for gpu in NAMES:
        grid = profiles.grid[gpu]["ops"]
        for name in WITH_SHAPES:
            if not name.startswith(("bert", "gpt2")):
                continue
            others = [o for n in WITH_SHAPES if config(n) != config(name) for o in profiles.launched[gpu, n]]
            points = points_json(others)
            both = {c: points.get(c, []) + grid.get(c, []) for c in set(points) | set(grid)}
            cells, traced = [], 0.0
            diffs = []
            for ops in (points, both, grid):
                fields = {"format": dp.FORMAT, "version": dp.VERSION, "device": gpu, "backend": "cuda", "ops": ops}
                profile = dp.parse(fields, gpu)
                traced, total = 0.0, 0.0
                for op in profiles.launched[gpu, name]:
                    if isinstance(op.key, dp.OpKey):
                        found = profile.predict(op.key)
                        traced += op.us
                        total += op.us if found is None else found
                diffs.append(abs(total - traced) / traced)
                cells.append(f"{total / 1e3:.1f} ({_diff(total, traced)})")
            worse.append(diffs[1] - diffs[0])
            lines.append(f"| {NAMES[gpu]} | `{name}` | {traced / 1e3:.1f} | " + " | ".join(cells) + " |")
    lines += [
        "",
        f"Adding the grid moves |difference| by {min(worse):+.1%} to {max(worse):+.1%} (median "
        f"{statistics.median(worse):+.1%}): the shipped profiles hold the captures' points alone.",
        "",
    ]
    return "\n".join(lines)


def coverage(profiles: Profiles) -> str:
    """How the grid's keys meet the traced ops, and how it interpolates those it has no point for."""
    lines = [
        "## The grid against the traced ops",
        "",
        "Each launching op of the four host + Kineto captures (per GPU), looked up in that GPU's grid: "
        "**named**, the grid has points of the op itself (`mm`, `clone`, ...) in its dtype; **class**, only "
        "other ops of its class in its dtype (the what-if reads those); **none**, no point of its class in its "
        "dtype (the grid is bf16 alone: under autocast, norms, softmax, embeddings and the optimizer run in "
        "fp32). Then the grid's time for the ops it covers, against their traced (CUPTI) time on the same GPU.",
        "",
        "| GPU | class | traced (ms) | named | class | none | grid's time for the covered ops vs traced |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for gpu in NAMES:
        grid = profiles.get(gpu, "grid", "")
        by: dict[str, list[float]] = defaultdict(lambda: [0.0] * 6)
        for name in WITH_SHAPES:
            if not name.startswith(("bert", "gpt2")):
                continue
            for op in profiles.launched[gpu, name]:
                if not isinstance(op.key, dp.OpKey):
                    continue
                key, row = op.key, by[op.key.op_class]
                row[0] += op.us
                points = [p for p in grid.ops.get(key.op_class, ()) if p.dtype == key.dtype]
                if not points:
                    row[3] += op.us
                    continue
                row[1 if any(p.op == key.op for p in points) else 2] += op.us
                predicted = grid.predict(key)
                if predicted is not None:
                    row[4] += predicted
                    row[5] += op.us
        for cls, (total, named, klass, none, predicted, covered) in sorted(by.items(), key=lambda kv: -kv[1][0]):
            share = [f"{v / total:.0%}" if total else "-" for v in (named, klass, none)]
            vs = _diff(predicted, covered) if covered else "-"
            lines.append(f"| {NAMES[gpu]} | {cls} | {total / 1e3:.1f} | {' | '.join(share)} | {vs} |")
    lines += [""]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())

"""ASTRA-sim's own memory tracker against ``memory`` and the truth, on captures with a host trace.

    ASTRA_SIM_HOME=../shared/astra-sim python -m bench.astra_memory CAPTURES [CAPTURES ...] \
        [--out bench/results/astra_memory.md]

Each ``CAPTURES`` holds one folder per capture (``NAME/NAME_rank<r>_{host,device}.json[.gz]``,
``NAME_summary.json``; as for ``bench.memory_table``); a capture without its host trace is left out
(the fields come from the host trace's tensors, carried by the ``.et``). Per capture: ``convert-all
--astra-sim`` (unless ``NAME/NAME.<r>.et`` are there), ``memory PREFIX --astra-sim-fields``, then
ASTRA-sim (``$ASTRA_SIM_HOME/simulate.sh``, the analytical congestion-unaware backend) with
``"track-local-mem": 1`` added to its bundled system config; a 1-rank job runs as 2 copies of its
rank (the analytical network needs 2 NPUs, and the rank has no collective). The peak is read from
the tracker's own timeline (``local-mem-trace-filename``, its ``GPU Memory Usage (MB)`` counter, MB
being 2^20 bytes), checked against its log line ``sys[R] peak memory usage``. Compared with
``memory`` (``kineto``: Kineto's events; ``host``: the host trace's tensors alone) and the capture's
truth (``bench.memory_table``'s docstring).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from chakra_convert_fast.converter.memory.job import from_folder

from .memory_table import host_trace, is_gpu, truths

_MIB = 1 << 20
_PEAK = re.compile(r"sys\[(\d+)\] peak memory usage: ([0-9.]+) (B|KB|MB|GB|TB)")
_UNIT = {"B": 1, "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30, "TB": 1 << 40}


def _cli(*args: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "chakra_convert_fast.converter", *args, "-q"], capture_output=True, text=True
    )
    if done.returncode:
        raise SystemExit(f"chakra-convert-fast {' '.join(args)}: {done.stderr.strip()}")


def tracker_peaks(folder: Path, work: Path, home: Path) -> dict[int, dict[str, float]]:
    """Each rank's peak by ASTRA-sim's tracker: {"timeline": bytes, "log": bytes (2 decimals)}."""
    name = folder.name
    ets = sorted(folder.glob(f"{name}.*.et"))
    prefix = str(folder / name)
    if not ets:
        _cli("convert-all", str(folder), str(work / "et"), "--astra-sim")
        prefix = str(work / "et" / name)
    ranks = len(list(Path(prefix).parent.glob(f"{name}.*.et")))
    fields = str(work / "fields")
    _cli("memory", prefix, "--astra-sim-fields", fields)
    npus = ranks
    if ranks == 1:
        shutil.copy(f"{fields}.0.et", f"{fields}.1.et")
        npus = 2
    system = json.loads((home / "configs" / "system.json").read_text())
    system.update({"track-local-mem": 1, "local-mem-trace-filename": str(work / "localmem")})
    (work / "system.json").write_text(json.dumps(system))
    env = {**os.environ, "SYSTEM": str(work / "system.json"), "LOGDIR": str(work / "log")}
    groups = Path(f"{prefix}.comm_group.json")
    if groups.is_file() and json.loads(groups.read_text()):
        env["COMM_GROUPS"] = str(groups)
    done = subprocess.run(
        [str(home / "simulate.sh"), fields, str(npus)], capture_output=True, text=True, env=env, timeout=1800
    )
    logged = {int(r): float(v) * _UNIT[u] for r, v, u in _PEAK.findall(done.stdout + done.stderr)}
    if done.returncode or len(logged) != npus:
        raise SystemExit(f"{name}: ASTRA-sim did not report every rank's peak (exit {done.returncode})")
    out = {}
    for r in range(ranks):
        events = json.loads((work / f"localmem.{r}.json").read_text())["traceEvents"]
        peak = max(e["args"]["Memory_MB"] for e in events if e.get("ph") == "C")
        out[r] = {"timeline": peak * _MIB, "log": logged[r]}
    return out


def rows_of(folder: Path, home: Path) -> list[dict[str, Any]]:
    summary = json.loads(next(folder.glob("*_summary.json")).read_text())
    if host_trace(folder, 0) is None:
        return []
    with tempfile.TemporaryDirectory() as tmp:
        peaks = tracker_peaks(folder, Path(tmp), home)
    memories = {m.rank: m for m in from_folder(str(folder))}
    if is_gpu(folder):
        truth = [int((r.get("memory") or {}).get("cuda_max_allocated", 0)) or None for r in summary["ranks"]]
    else:
        truth = truths(folder)
    rows = []
    for r, peak in peaks.items():
        m = memories.get(r)
        rows.append(
            {
                "capture": folder.name,
                "device": summary.get("gpu") or "CPU",
                "rank": r,
                "astra": peak["timeline"],
                "astra_log": peak["log"],
                "kineto": m.peak_bytes if m is not None and m.source == "kineto" else None,
                "truth": truth[r] if r < len(truth) else None,
            }
        )
    return rows


def _err(value: float | None, truth: float | None) -> str:
    return "" if value is None or not truth else f"{100 * (value - truth) / truth:+.2f}%"


def _mib(value: float | None) -> str:
    return "" if value is None else f"{value / _MIB:,.2f}"


def render(rows: list[dict[str, Any]]) -> str:
    lines = [
        "# ASTRA-sim's memory tracker (`track-local-mem`) against `memory` and the truth",
        "",
        "Generated by `python -m bench.astra_memory CAPTURES --out bench/results/astra_memory.md` (the script's "
        "docstring; docs/memory.md). astra: the peak of ASTRA-sim's own tracker over the copies `memory PREFIX "
        "--astra-sim-fields` writes (its timeline's highest point; its log line, 2 decimals, agrees). kineto: "
        "`memory` from Kineto's memory events. truth: `max_memory_allocated` (GPU) or the CPU truth "
        "(`bench.memory_table`). MiB = 2^20 bytes.",
        "",
        "| capture | device | rank | truth (MiB) | astra (MiB) | error | kineto (MiB) | error | astra - kineto |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        astra, kineto, truth = row["astra"], row["kineto"], row["truth"]
        lines.append(
            f"| {row['capture']} | {row['device']} | {row['rank']} | {_mib(truth)} | {_mib(astra)} | "
            f"{_err(astra, truth)} | {_mib(kineto)} | {_err(kineto, truth)} | {_err(astra, kineto)} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("captures", type=Path, nargs="+")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    home = Path(os.environ.get("ASTRA_SIM_HOME", ""))
    if not (home / "simulate.sh").is_file():
        raise SystemExit("set ASTRA_SIM_HOME to the folder of ASTRA-sim's simulate.sh")
    folders = [
        p for root in args.captures for p in sorted(root.iterdir()) if p.is_dir() and any(p.glob("*_summary.json"))
    ]
    rows = [row for folder in folders for row in rows_of(folder, home)]
    text = render(rows)
    if args.out:
        args.out.write_text(text)
    print(text, end="")


if __name__ == "__main__":
    main()

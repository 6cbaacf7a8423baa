"""Run one converter in its own child process and read its wall time and peak RSS from the kernel.

The peak is the larger of the child's ``ru_maxrss`` from ``wait4`` (the operating system's
accounting, not tracemalloc) and the sum of ``VmRSS`` over the child and its own children,
sampled every 20 ms from /proc: ``ru_maxrss`` covers only the largest single process, and our
converter reads large files with several. Summed RSS counts a page shared by forked processes
once per process, so the peak of the summed ``Pss`` (proportional set size, from
``/proc/PID/smaps_rollup``: each shared page split between its sharers) is recorded too: the
physical memory the run held. Reading ``smaps_rollup`` walks a process's page tables (tens of ms
for a 10 GB process), so it is read every 0.2 s and only while the run has several processes;
with one, its RSS is taken (the reference converter is one process throughout).
Linux folds the RSS of the process that spawned the child
(at the moment of ``exec``) into ``ru_maxrss``, so the child is spawned by a tiny trampoline
interpreter rather than by the (large) pytest process; the trampoline's ~10 MB is the floor.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

# argv: stderr_file timeout_s cmd... ; prints {"seconds", "maxrss_kb", "maxpss_kb", "status"} as JSON.
TRAMPOLINE = r"""
import json, os, sys, time
err, timeout, cmd = sys.argv[1], float(sys.argv[2]), sys.argv[3:]
actions = [(os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
           (os.POSIX_SPAWN_OPEN, 2, err, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)]
def proc_kb(p, name, key):
    try:
        with open(f"/proc/{p}/{name}") as fh:
            return next((int(line.split()[1]) for line in fh if line.startswith(key)), 0)
    except OSError:
        return 0
def tree(p):
    try:
        with open(f"/proc/{p}/task/{p}/children") as fh:
            kids = [int(k) for k in fh.read().split()]
    except OSError:
        kids = []
    return [p] + [q for k in kids for q in tree(k)]
start = time.perf_counter()
pid = os.posix_spawnp(cmd[0], cmd, os.environ, file_actions=actions)
deadline = start + timeout if timeout > 0 else None
tree_peak = pss_peak = tick = 0
while True:
    got, status, usage = os.wait4(pid, os.WNOHANG)
    if got:
        break
    if deadline is not None and time.perf_counter() > deadline:
        os.kill(pid, 9)
        got, status, usage = os.wait4(pid, 0)
        break
    procs = tree(pid)
    rss = sum(proc_kb(p, "status", "VmRSS:") for p in procs)
    tree_peak = max(tree_peak, rss)
    if len(procs) == 1:  # nothing shared with another process of the run: PSS would be RSS less libraries
        pss_peak = max(pss_peak, rss)
    elif tick % 10 == 0:  # reading smaps_rollup walks the page tables: every 0.2 s, not to slow the run
        pss_peak = max(pss_peak, sum(proc_kb(p, "smaps_rollup", "Pss:") for p in procs))
    tick += 1
    time.sleep(0.02)
print(json.dumps({"seconds": time.perf_counter() - start, "maxrss_kb": max(usage.ru_maxrss, tree_peak),
                  "maxpss_kb": pss_peak, "status": os.waitstatus_to_exitcode(status),
                  "cpu_s": usage.ru_utime + usage.ru_stime}))
"""


@dataclass(frozen=True, slots=True)
class Run:
    """One measured conversion."""

    seconds: float
    peak_rss_bytes: int  # the summed RSS: shared pages counted once per process
    peak_pss_bytes: int  # the summed PSS: the physical memory held (sampled, so 0 for very short runs)
    returncode: int
    stderr: str
    cpu_seconds: float = 0.0  # user + system time of the child and the processes it waited for


def ours_command(src: Path, dst: Path, *options: str) -> list[str]:
    """``chakra-convert-fast INPUT OUTPUT [options]`` (the installed script, or else the module)."""
    return [*_ours(), str(src), str(dst), *options]


def convert_all_command(directory: Path, outdir: Path, *options: str) -> list[str]:
    """``chakra-convert-fast convert-all DIRECTORY OUTDIR [options]``."""
    return [*_ours(), "convert-all", str(directory), str(outdir), *options]


def _ours() -> list[str]:
    exe = shutil.which("chakra-convert-fast")
    return [exe] if exe else [sys.executable, "-m", "chakra_convert_fast.converter"]


_SUMMARY = re.compile(r"nodes/s; (\d+) reading, (\d+)% in sequential stages\)")
_RANK_ROW = re.compile(r"^\s*(\d+)\s+(ok|FAILED)\s+([\d,]+)\s+([\d.]+)\s", re.M)


def summary_figures(stderr: str) -> dict[str, float]:
    """Processes reading and the share of sequential stages, from a conversion's summary line."""
    found = _SUMMARY.search(stderr)
    if found is None:
        return {}
    return {"processes": int(found.group(1)), "sequential_fraction": int(found.group(2)) / 100}


def rank_seconds(stderr: str) -> dict[int, float]:
    """Seconds of each rank that converted, from convert-all's table."""
    return {int(m.group(1)): float(m.group(4)) for m in _RANK_ROW.finditer(stderr) if m.group(2) == "ok"}


#: The reference's peak RSS per node (11,838 MB on the generated 1,003,894-node trace, 2026-11-23).
REFERENCE_BYTES_PER_NODE = 12_000


def reference_memory_problem(nodes: int) -> str | None:
    """Why the reference cannot convert ``nodes`` here (not enough memory available), or None."""
    try:
        with open("/proc/meminfo") as fh:
            available = next(int(line.split()[1]) * 1024 for line in fh if line.startswith("MemAvailable:"))
    except (OSError, StopIteration):
        return None  # not Linux: let it try
    needed = nodes * REFERENCE_BYTES_PER_NODE
    if needed * 1.1 <= available:
        return None
    return f"the reference needs ~{needed / 1e9:.1f} GB, {available / 1e9:.1f} GB available"


def reference_command(src: Path, dst: Path) -> list[str]:
    """mlc-chakra's converter with a big stack (``fixtures.reference``), on plain JSON."""
    return [sys.executable, "-m", "chakra_convert_fast.fixtures.reference", str(src), str(dst)]


def measure(cmd: list[str], cwd: Path | None = None, timeout: float | None = None) -> Run:
    """Run ``cmd``; return its wall time, its own peak RSS and exit code (killed past ``timeout``)."""
    with tempfile.TemporaryDirectory(prefix="chakra-measure-") as tmp:
        err = Path(tmp) / "stderr"
        out = subprocess.run(
            [sys.executable, "-S", "-c", TRAMPOLINE, str(err), str(timeout or 0), *cmd],
            cwd=cwd,
            capture_output=True,
            text=True,
            check=True,
        )
        result = json.loads(out.stdout)
        tail = err.read_bytes()[-4000:].decode(errors="replace") if err.exists() else ""
    return Run(
        result["seconds"],
        result["maxrss_kb"] * 1024,
        result["maxpss_kb"] * 1024,
        result["status"],
        tail,
        result.get("cpu_s", 0.0),
    )

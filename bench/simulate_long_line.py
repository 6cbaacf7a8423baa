"""``simulate`` reading a log with one very long line: wall time and peak memory (issue 29).

    python -m bench.simulate_long_line [--mb 100] [--python OTHER_ENV/bin/python]

A stand-in simulator writes ``--mb`` MiB of one line without a newline into its log pipe, then
the two ``finished`` lines of the tiny two-rank job (``tests/data/astra_sim``), and exits.
``simulate`` runs it (``--no-check --json /dev/null``) under ``/usr/bin/time``; with ``--python``,
another environment's interpreter runs the same command (an older checkout: the reading then
re-copied the held line on every read). Prints a Markdown row per interpreter.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "astra_sim"
_FAKE = """
import re, sys
arg = dict(a[2:].split("=", 1) for a in sys.argv[1:])
log = re.search(r'filename = "(.*)"', open(arg["logging-configuration"]).read()).group(1)
with open(log, "w") as out:
    block = "x" * (1 << 20)
    for _ in range({mb}):
        out.write(block)
    out.write("\\n")
    for rank in range(2):
        out.write(f"[0] [workload] [info] sys[{{rank}}] finished, {{1000 + rank}} cycles, "
                  "exposed communication 0 cycles\\n")
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=100, help="MiB of the one long line (default 100)")
    parser.add_argument("--python", action="append", default=[], help="another interpreter to run it with")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="long-line-") as work:
        where = Path(work)
        for rank in range(2):
            shutil.copy(DATA / f"tiny.{rank}.et", where / f"job.{rank}.et")
        fake = where / "fake" / "bin" / "AstraSim_Analytical_Congestion_Unaware"
        fake.parent.mkdir(parents=True)
        fake.write_text(f"#!{sys.executable}\n" + _FAKE.format(mb=args.mb))
        fake.chmod(0o755)
        print(f"one log line of {args.mb} MiB without a newline, then 2 finished lines")
        print("| interpreter | exit | wall s | max RSS MB |\n|---|---:|---:|---:|")
        for python in [sys.executable, *args.python]:
            command = ["/usr/bin/time", "-f", "%e %M", python, "-m", "chakra_convert_fast.converter", "simulate"]
            done = subprocess.run(
                [*command, "job", "--astra-sim-bin", str(where / "fake"), "--no-check", "--json", "/dev/null"],
                cwd=where,
                capture_output=True,
                text=True,
                check=False,
            )
            wall, rss = done.stderr.split()[-2:]
            print(f"| {python} | {done.returncode} | {float(wall):.1f} | {int(rss) / 1024:.0f} |")


if __name__ == "__main__":
    main()

"""The tracing-overhead calibration ``chakra-profile`` now writes beside each rank's traces
(``{name}_rank{N}_overhead.json``: the traced step's time and the median of the untraced ones,
``converter/overhead.py``), made from the summary of a capture taken before it did so.

    python -m bench.gpu.calibrate tests/data/traces/gpu_h200

Each capture folder's ``{name}_summary.json`` holds every rank's step times and phases, the same
figures ``chakra-profile`` stores; nothing else is read.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from chakra_convert_fast.converter import overhead


def calibrate(folder: Path) -> list[Path]:
    written = []
    for summary_path in sorted(folder.rglob("*_summary.json")):
        summary = json.loads(summary_path.read_text(encoding="utf-8"))
        for rank in summary["ranks"]:
            found = overhead.calibration(
                rank["rank"],
                rank["step_times_s"],
                rank["phases"],
                torch=summary["torch"],
                host_trace=summary.get("host_trace", True),
                record_shapes=summary.get("record_shapes", True),
            )
            if found is None:
                continue
            out = summary_path.with_name(f"{summary['name']}_rank{rank['rank']}{overhead.CALIBRATION_SUFFIX}")
            out.write_text(json.dumps(found, indent=1) + "\n", encoding="utf-8")
            written.append(out)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path)
    args = parser.parse_args(argv)
    for path in calibrate(args.folder):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())

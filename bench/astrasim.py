"""Running converted traces in the real ASTRA-sim (``$ASTRA_SIM_HOME/simulate.sh``) and reading its logs.

ASTRA-sim's exit status is not enough: a node it cannot issue after the first tick is dropped
with a logged warning, that rank never finishes, and the process still exits 0. So a run is read
from its log: each rank's ``sys[R] finished, C cycles, exposed communication E cycles.`` line, and,
with ``trace-enabled`` in the system configuration (set here), one ``issue`` and one
``callback`` line per node, from which the communication nodes simulated per rank and the ticks
they took are counted.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

ENV = "ASTRA_SIM_HOME"
_FINISHED = re.compile(r"sys\[(\d+)\] finished, (\d+) cycles, exposed communication (\d+) cycles")
# NCCL kernel names contain commas: anchor on the line's end.
_EVENT = re.compile(r"\[workload\] \[debug\] (issue|callback),sys->id=(\d+), tick=(\d+), node->id=(\d+), "
                    r"node->name=.*, node->type=(\d+)$")
COMM_TYPES = {5: "send", 6: "recv", 7: "collective"}


@dataclass
class RankRun:
    rank: int
    finished: bool = False
    cycles: int = 0
    exposed_communication: int = 0
    nodes_done: int = 0
    comm_done: dict[str, int] = field(default_factory=dict)  # "collective"/"send"/"recv" -> count
    comm_cycles: int = 0  # sum over communication nodes of callback tick - issue tick


@dataclass
class Simulation:
    returncode: int
    ranks: list[RankRun]
    output: str
    logdir: Path

    @property
    def all_finished(self) -> bool:
        return all(r.finished for r in self.ranks)


def home() -> Path | None:
    value = os.environ.get(ENV)
    return Path(value) if value else None


def simulate(
    prefix: Path, npus: int, *, backend: str = "unaware", comm_groups: Path | None = None, workdir: Path,
    timeout: float = 600, system_overrides: dict[str, object] | None = None,
) -> Simulation:
    """Run ``simulate.sh PREFIX NPUS BACKEND`` with traced workload events; ``workdir`` receives
    the system configuration and the logs."""
    root = home()
    if root is None:
        raise RuntimeError(f"{ENV} is not set")
    workdir.mkdir(parents=True, exist_ok=True)
    system = json.loads((root / "configs" / "system.json").read_text())
    system["trace-enabled"] = 1
    system.update(system_overrides or {})  # e.g. the roofline: roofline-enabled, peak-perf, local-mem-bw
    (workdir / "system.json").write_text(json.dumps(system))
    env = dict(os.environ, SYSTEM=str(workdir / "system.json"), LOGDIR=str(workdir / "logs"))
    if backend == "aware" and npus == 2:  # the aware backend refuses a ring of two
        env["NETWORK"] = str(root / "configs" / "Switch_2npus.yml")
    if comm_groups is not None:
        env["COMM_GROUPS"] = str(comm_groups)
    done = subprocess.run([str(root / "simulate.sh"), str(prefix), str(npus), backend], env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)
    ranks = [RankRun(r) for r in range(npus)]
    for match in _FINISHED.finditer(done.stdout):
        rank = ranks[int(match.group(1))]
        rank.finished, rank.cycles, rank.exposed_communication = True, int(match.group(2)), int(match.group(3))
    _read_events(workdir / "logs", ranks)
    return Simulation(done.returncode, ranks, done.stdout + done.stderr, workdir / "logs")


def _read_events(logdir: Path, ranks: list[RankRun]) -> None:
    issued: dict[tuple[int, int], int] = {}
    for log in sorted(logdir.glob("log*.log"), key=_age, reverse=True):  # oldest first: log.N.log ... log.log
        for line in log.read_text(errors="replace").splitlines():
            match = _EVENT.search(line)
            if match is None:
                continue
            event, rank, tick, node, node_type = match.group(1), *map(int, match.group(2, 3, 4, 5))
            if event == "issue":
                issued[(rank, node)] = tick
                continue
            run = ranks[rank]
            run.nodes_done += 1
            kind = COMM_TYPES.get(node_type)
            if kind is not None:
                run.comm_done[kind] = run.comm_done.get(kind, 0) + 1
                run.comm_cycles += tick - issued.get((rank, node), tick)


def _age(log: Path) -> int:
    """Rotation index: log.log is 0, log.1.log 1 (older), ..."""
    middle = log.name[len("log"):-len(".log")].strip(".")
    return int(middle) if middle.isdigit() else 0

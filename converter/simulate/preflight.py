"""What ``simulate`` checks in a job's files before ASTRA-sim runs, each refusal naming its fix.

ASTRA-sim's own failures on a file it cannot take are an abort deep in its feeder ("Node 0 in
ctrl_dep graph, but not found in index", SIGABRT), a rank that silently never finishes, or a
what-if that changes nothing. Before a run:

* the files are read and checked as ``check`` does (``check/rules.py``): every rank of a job of up
  to ``WHOLE_JOB`` ranks, with the checks across ranks (collectives in the same order, sends
  matched); past that, ``SAMPLE`` ranks spread over the job, each alone. The first fatal problem
  is the error, with what to do (a default conversion, not ``--astra-sim``, is the usual cause);
* every other rank's records are walked without decoding them (``count_nodes``): a truncated
  file, whose cut node ASTRA-sim would drop without a word, is refused whatever rank it is (it
  used to be found only where the progress bar happened to count it: on a terminal);
* a roofline (``--accelerator``, ``--peak-tflops``, ``--mem-bandwidth``) times non-CPU compute
  nodes only (a node without ``is_cpu_op`` is a CPU op to ASTRA-sim's feeder): on a job whose
  checked ranks have none it would change nothing, so it is refused;
* a roofline on a device-profile what-if (``kineto-whatif`` files) is refused: its kernels'
  durations are the what-if, with no ``num_ops`` for a roofline;
* a job of one rank names ``scale`` (ASTRA-sim's network needs two NPUs or more).
"""

from __future__ import annotations

import os

from ..check.rules import Problem, check, check_file
from ..errors import JobCheckError
from ..et.decode import CPU_OP_FALSE, EtTrace, count_nodes, read_et
from ..ranks import commgroups
from ..schema.chakra import NodeType
from .configs import Accelerator
from .job import Job
from .notes import WHATIF_SCHEMA_PREFIX

#: Reading a file dominates (about 0.1 ms a node in read_et): a DDP capture's 2-8 ranks are checked
#: whole; a larger job (usually scaled, its ranks copies of the captured ones) by a sample.
WHOLE_JOB = 8  # ranks checked together, with the checks across ranks
SAMPLE = 4  # ranks checked, each alone, in a larger job

#: The usual cause of each fatal problem ``check`` finds in a file, and its fix.
_ASTRA_SIM = (
    "converted without `astra_sim`? convert again with it (convert/convert-all `astra_sim`; "
    "chakra-profile --convert writes it)"
)
_FIXES = (
    ("METADATA", _ASTRA_SIM),
    ("dependencies name no node", _ASTRA_SIM),
    ("marked is_cpu_op", _ASTRA_SIM),
    ("group", "give the job's communicator group file with `comm_groups`"),
)


def one_rank(job: Job) -> None:
    """A one-rank job cannot be simulated on a network: say how to make the job it stands for."""
    if job.ranks == 1:
        raise JobCheckError(
            f"{job.prefix}: a job of 1 rank ({job.rank_file(0)}): ASTRA-sim's network needs 2 NPUs or more; "
            f"simulate the job of N ranks it stands for: `ranks` N here, or scale {job.prefix} to N ranks and "
            "simulate that"
        )


def sampled_ranks(ranks: int) -> list[int]:
    """The ranks checked: all of a job of up to ``WHOLE_JOB``, else ``SAMPLE`` spread from 0 to the last."""
    if ranks <= WHOLE_JOB:
        return list(range(ranks))
    return sorted({round(k * (ranks - 1) / (SAMPLE - 1)) for k in range(SAMPLE)})


def check_job(job: Job, roofline: Accelerator | None, roofline_option: str = "`accelerator`") -> None:
    """Raise a ``JobCheckError`` naming the first thing ASTRA-sim would abort or stall on, and its
    fix; or a roofline on a job without accelerator compute nodes."""
    picks = sampled_ranks(job.ranks)
    traces = [read_et(job.rank_file(r), ("num_ops",) if roofline is not None else ()) for r in picks]
    picked = set(picks)
    for rank in range(job.ranks):
        if rank not in picked:
            count_nodes(job.rank_file(rank))  # a truncated or undelimited file: its TraceFormatError
    if len(picks) == job.ranks:
        report = check(
            traces,
            None if job.comm_groups is None else commgroups.read(job.comm_groups, "communicator group file"),
            picks if job.files else None,  # files not named by their rank: the job's order
        )
        problems = report.problems
    else:
        problems = [p for trace, rank in zip(traces, picks, strict=True) for p in check_file(trace, rank)[1]]
    fatal = [p for p in problems if p.fatal]
    if fatal:
        raise JobCheckError(_message(job, fatal))
    if roofline is not None and any(str(t.metadata.get("schema", "")).startswith(WHATIF_SCHEMA_PREFIX) for t in traces):
        raise JobCheckError(
            f"{roofline_option}: {job.prefix} is a device-profile what-if (convert with `device_profile`): "
            "its kernels' durations are the what-if and carry no num_ops for a roofline; simulate it without "
            "the roofline"
        )
    if roofline is not None and not any(_accelerator_nodes(t) for t in traces):
        checked = "its" if len(picks) == job.ranks else f"{len(picks)} of its"
        raise JobCheckError(
            f"{roofline_option}: {job.prefix} has no accelerator (non-CPU) compute node in {checked} ranks: every "
            "compute node is a CPU op, replayed for its traced duration, so the roofline would change nothing; "
            "convert with `roofline` and `target` accelerator (chakra-profile --convert --roofline --target "
            "accelerator), or simulate without it"
        )
    bare = [(r, t, _without_num_ops(t)) for r, t in zip(picks, traces, strict=True)] if roofline is not None else []
    bare = [b for b in bare if b[2]]
    if bare:
        rank, trace, rows = bare[0]
        raise JobCheckError(
            f"{roofline_option}: rank {rank} node {trace.ids[rows[0]]} {trace.names[rows[0]]!r} is an accelerator "
            f"compute node without num_ops ({len(rows)} of the rank's {_accelerator_nodes(trace)}), which ASTRA-sim's "
            "roofline needs on each (it drops such a node and the rank never finishes): convert with `roofline`, or "
            "simulate without the roofline"
        )


def _without_num_ops(trace: EtTrace) -> list[int]:
    """Rows of the accelerator compute nodes that carry no ``num_ops``."""
    found = trace.int_attrs.get("num_ops", {})
    return [
        row
        for row, (t, cpu) in enumerate(zip(trace.types, trace.cpu_ops, strict=True))
        if t == NodeType.COMP_NODE and cpu == CPU_OP_FALSE and row not in found
    ]


def _accelerator_nodes(trace: EtTrace) -> int:
    return sum(
        1 for t, cpu in zip(trace.types, trace.cpu_ops, strict=True) if t == NodeType.COMP_NODE and cpu == CPU_OP_FALSE
    )


def _message(job: Job, fatal: list[Problem]) -> str:
    first = fatal[0]
    text = first.message
    fix = next((f for key, f in _FIXES if key in text), None)
    where = os.path.basename(first.path) if first.path else job.prefix
    more = f" (and {len(fatal) - 1} more problem(s))" if len(fatal) > 1 else ""
    tail = f"; {fix}" if fix else ""
    return (
        f"{where}: {text}{more}; ASTRA-sim would not run it{tail}; "
        f"`chakra-convert-fast check {job.prefix}.*.et` lists every problem"
    )

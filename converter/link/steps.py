"""Which ``ProfilerStep#N`` of a host trace to link: by default the ones its Kineto trace covers.

Users' tracers often start the ``ExecutionTraceObserver`` by hand before the profiler's schedule
begins (and hand it to ``torch.profiler.profile`` as well): the host trace then holds the steps
of the schedule's wait and warmup too, while the Kineto trace holds only the active ones. Linked
as they are, the ops of the steps without device data end up in the same graph as the traced
step, and simulate as one long "step". Here each step's subtree in the host trace (its node and
everything under it) is kept or left out, whole:

* default (``None``): the steps the Kineto trace covers, when the host trace holds others; a host
  trace whose steps the Kineto trace all covers (or that has at most one, or a Kineto trace
  without steps) is linked whole, as ``chakra_trace_link`` does;
* ``N``: ProfilerStep#N alone (it must be in the host trace);
* ``ALL_STEPS``: every step, with a warning naming the steps that have no device data.

Ops outside every step (the process group's setup, say) are kept in every case.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from ..errors import TraceContentError
from ..schema.kineto import STEP_PREFIX as STEP_PREFIX
from ..schema.kineto import step_number
from .hostindex import HostIndex
from .kineto import KinetoTrace

ALL_STEPS = "all"
#: ``None`` (the steps the Kineto trace covers), a step number, or ``ALL_STEPS``.
StepChoice = int | str | None


@dataclass(frozen=True)
class StepSelection:
    """The steps each trace holds, the ones linked, and the host nodes left out."""

    host_steps: tuple[int, ...] = ()
    device_steps: tuple[int, ...] = ()
    kept: tuple[int, ...] = ()
    left_out: frozenset[int] = field(default_factory=frozenset, repr=False)  # host node ids (whole step subtrees)
    warnings: tuple[str, ...] = ()

    @property
    def host_only(self) -> bool:
        """Whether every step linked lacks device data (chosen so: nothing is expected to link)."""
        return bool(self.kept and self.device_steps) and not set(self.kept) & set(self.device_steps)

    @property
    def chosen(self) -> bool:
        """Whether some step of the host trace was left out."""
        return bool(self.left_out)

    def describe(self) -> str:
        """The summary's words for the steps linked ("" when the trace holds none)."""
        if not self.kept:
            return ""
        kept = _names(self.kept)
        if not self.chosen:
            return kept
        dropped = [s for s in self.host_steps if s not in self.kept]
        return f"{kept} ({_names(dropped)} left out: {len(self.left_out):,} host nodes)"


def _names(steps: Iterable[int]) -> str:
    return ", ".join(f"{STEP_PREFIX}{s}" for s in steps)


def choose_steps(
    index: HostIndex, trace: KinetoTrace, choice: StepChoice = None, *, cut_off: bool = False
) -> StepSelection:
    """The steps to link from ``index`` given ``trace``'s; raises ``TraceContentError`` for a step the
    host trace does not hold, or when the two traces' steps have none in common. ``cut_off``: the
    host trace was cut off (``cutoff.py``), so a step of the Kineto trace that it lacks lost its node
    (its ops, whose parents were lost, are adopted later): such a step counts as held."""
    roots: dict[int, list[int]] = {}  # step number -> its host node ids (one per thread, usually one)
    for node_id, name in zip(index.ids, index.names, strict=True):
        number = step_number(name)
        if number is not None:
            roots.setdefault(number, []).append(node_id)
    device_steps = tuple(sorted(trace.steps))
    lost = [s for s in device_steps if s not in roots] if cut_off else []
    host_steps = tuple(sorted([*roots, *lost]))
    uncovered = [s for s in host_steps if device_steps and s not in device_steps]
    warnings: tuple[str, ...] = ()
    nothing_to_choose = not uncovered or (len(host_steps) <= 1 and not cut_off)
    if choice == ALL_STEPS or (choice is None and nothing_to_choose):
        if uncovered:
            warnings = (
                f"{_names(uncovered)} of the host trace {'has' if len(uncovered) == 1 else 'have'} no "
                "device data in the Kineto trace (it covers "
                f"{_names(device_steps)}): linked with host data only, in the same graph",
            )
        return StepSelection(host_steps, device_steps, host_steps, frozenset(), warnings)
    if choice is None:
        kept = tuple(s for s in host_steps if s in device_steps)
        if not kept:
            raise TraceContentError(
                index.path,
                f"holds {_names(host_steps)}, its Kineto trace {_names(device_steps)}: no step in "
                "common (traces of different runs?)",
                hint="`steps` links the steps it names anyway",
            )
    else:
        if not isinstance(choice, int) or isinstance(choice, bool) or choice not in host_steps:
            held = _names(host_steps) if host_steps else "no ProfilerStep"
            raise TraceContentError(index.path, f"has no {STEP_PREFIX}{choice} (it holds {held})")
        kept = (choice,)
        if device_steps and choice not in device_steps:
            warnings = (
                f"{STEP_PREFIX}{choice} has no device data in the Kineto trace (it covers "
                f"{_names(device_steps)}): linked with host data only",
            )
    left_out = index.subtrees([i for s in host_steps if s not in kept for i in roots.get(s, ())])
    return StepSelection(host_steps, device_steps, kept, frozenset(left_out), warnings)

"""Messages for people: stderr and the log file (``Reporter``), progress bars (``ProgressBars``)."""

from __future__ import annotations

import argparse
import errno
import logging
import os
import re
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import suppress
from typing import IO, TYPE_CHECKING, Any, NoReturn

from .._early import standard_descriptors
from ..errors import PARAMETER, ConverterError, shown
from ..io.log import open_log
from ..jsonstream import C_SCANNER
from .common import PROG

if TYPE_CHECKING:  # the results it describes; the commands that make them import the API
    from .. import api


def standard_streams() -> None:
    """``sys.stdin/stdout/stderr`` usable whatever the caller closed: a closed descriptor is opened
    on /dev/null (``2>&-`` then works and exits by its result), names that are not UTF-8 are
    written escaped."""
    standard_descriptors()
    for name, fd in (("stdout", 1), ("stderr", 2)):
        if getattr(sys, name) is None:
            with suppress(OSError, ValueError):
                stream = open(fd, "w", buffering=1, encoding="utf-8", errors="backslashreplace", closefd=False)  # noqa: SIM115
                setattr(sys, name, stream)
    if sys.stdout is not None and sys.stdout is sys.__stdout__:  # this process's own stdout (not a caller's)
        sys.stdout = _NamedStdout(sys.stdout)


class _NamedStdout:
    """The process's stdout, for every writer (``print`` included): a write or flush that fails
    (``> /dev/full``, a closed pipe) is the command's one line naming standard output, not a bare
    "No space left on device"."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            written: int = self._stream.write(text)
        except OSError as exc:
            _stdout_failed(exc)
        return written

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as exc:
            _stdout_failed(exc)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def write_stdout(text: str) -> None:
    """A command's data on stdout; a failure to write it is the command's error (one line)."""
    try:
        sys.stdout.write(text)
    except (OSError, ValueError) as exc:
        _stdout_failed(exc)
    flush_stdout()


def flush_stdout() -> None:
    """Flush the data written on stdout; a failure (a full device, a closed pipe) is an error of
    the command, and what is left is dropped so that exiting does not fail again."""
    try:
        sys.stdout.flush()
    except (OSError, ValueError) as exc:
        _stdout_failed(exc)


def _stdout_failed(exc: BaseException) -> NoReturn:
    with suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    raise ConverterError(f"cannot write to standard output: {getattr(exc, 'strerror', None) or exc}") from None


def with_flags(text: str, flags: Mapping[str, str]) -> str:
    """``text`` (a message or hint in the API's terms) with each parameter it names in backticks
    (```ranks```) written as the command line's flag for it (``--ranks``); a name no command
    takes stays as it is."""
    return PARAMETER.sub(lambda found: flags.get(found.group(1), found.group(0)), text)


#: The API's parameters that the command line spells otherwise than by their own name.
_OTHER_NAMES = {
    "steps": "--step N or --all-steps",
    "ray_address": "--ray",
    "json_output": "--json",
    "out_prefix": "--out",
}


def flags_of(parser: argparse.ArgumentParser, command: str | None) -> dict[str, str]:
    """Each parameter's flag, as ``with_flags`` writes it: the running ``command``'s own options
    first, then any other command's (a message may name an option of the command to run first)."""
    flags: dict[str, str] = dict(_OTHER_NAMES)
    chosen: list[argparse.ArgumentParser] = []
    others: list[argparse.ArgumentParser] = []
    for action in parser._actions:  # argparse has no public walk of its subparsers
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                (chosen if name == command else others).append(sub)
    for each in [*chosen, *others, parser]:
        for action in each._actions:
            long = [option for option in action.option_strings if option.startswith("--")]
            if long and action.dest != argparse.SUPPRESS:
                flags.setdefault(action.dest, long[0])
    return flags


class Flags(Mapping[str, str]):
    """``flags_of`` of the running command's grammar, and of every command's when a message names
    a parameter that command does not take (built then, so a command imports only its own module
    until a message needs another's flag)."""

    def __init__(self, own: Mapping[str, str], every: Callable[[], Mapping[str, str]]) -> None:
        self._own = own
        self._every = every
        self._all: Mapping[str, str] | None = None

    def _whole(self) -> Mapping[str, str]:
        if self._all is None:
            self._all = self._every()
        return self._all

    def __getitem__(self, name: str) -> str:
        return self._own[name] if name in self._own else self._whole()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._whole())

    def __len__(self) -> int:
        return len(self._whole())


def describe_failure(exc: BaseException) -> str:
    """One line for what the system refused the command (memory, processes, files, a number too
    long to convert) or, last resort, for a bug: never a traceback."""
    text = " ".join(str(exc).split())
    if isinstance(exc, MemoryError):
        return "out of memory (a memory limit such as ulimit -v?)"
    if isinstance(exc, RecursionError):
        return "data nested too deeply to process"
    if isinstance(exc, ValueError) and "integer string conversion" in text:
        return "an integer literal of more than 4,300 digits (Python's limit on converting numbers)"
    if isinstance(exc, OSError):
        reason = exc.strerror or text or type(exc).__name__
        if exc.errno == errno.EMFILE or exc.errno == errno.ENFILE:
            reason += " (a limit on open files such as ulimit -n?)"
        elif exc.errno == errno.EAGAIN:
            reason += " (a limit on processes or threads such as ulimit -u?)"
        return f"{shown(exc.filename)}: {reason}" if isinstance(exc.filename, str) else reason
    if isinstance(exc, RuntimeError) and "thread" in text:
        return f"{text} (a limit on processes or threads such as ulimit -u?)"
    return f"internal error: {type(exc).__name__}: {shown(text)}"


class _Console(logging.StreamHandler):  # type: ignore[type-arg]
    """stderr: a message that cannot be written there (closed, full) is dropped without logging's
    own traceback."""

    def handleError(self, record: logging.LogRecord) -> None:
        pass


class _HumanFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        if record.levelno >= logging.ERROR:
            return f"{PROG}: error: {message}"
        if record.levelno >= logging.WARNING:
            return f"{PROG}: warning: {message}"
        return message


class _LogFile(logging.StreamHandler):  # type: ignore[type-arg]
    """The ``--log-filename`` handler: a write that fails is kept in ``failure`` (for the reporter
    to say once) instead of logging's own traceback on stderr."""

    def __init__(self, stream: IO[str]) -> None:
        super().__init__(stream)
        self.failure: BaseException | None = None

    def handleError(self, record: logging.LogRecord) -> None:
        self.failure = sys.exc_info()[1]

    def close_stream(self) -> None:
        with suppress(ConverterError, OSError, ValueError):
            self.stream.close()


class Reporter:
    """Messages for people: stderr, and the log file if asked for, filtered by level."""

    def __init__(self, level: str) -> None:
        self._logger = logging.getLogger("chakra_convert_fast")
        self._logger.handlers.clear()
        self._logger.propagate = False
        self._logger.setLevel(level)
        console = _Console(sys.stderr)
        console.setFormatter(_HumanFormatter())
        self._logger.addHandler(console)
        self._log_file: _LogFile | None = None
        #: The log file could not be written (said once, as a warning, on stderr). The log is a copy
        #: of the messages: the command's exit status stays that of its work.
        self.log_failed = False
        #: Each parameter's flag (``flags_of``): messages name parameters, people read flags.
        self.flags: Mapping[str, str] = {}

    @property
    def shows_progress(self) -> bool:
        return self._logger.isEnabledFor(logging.INFO) and sys.stderr.isatty()

    def open_log(self, path: str | None, conflict: str | None) -> None:
        """Append messages to ``path`` too; it must not be one of the command's files (``conflict``
        names the one it is), and it is never truncated (a user's file is never lost)."""
        if not path:
            return
        if conflict:
            raise ConverterError(f"{path}: the log file would overwrite {conflict}; choose another path")
        self._log_file = _LogFile(open_log(path))
        self._log_file.setFormatter(logging.Formatter("%(levelname)s [%(asctime)s] %(message)s"))
        self._logger.addHandler(self._log_file)

    def close(self) -> None:
        for handler in self._logger.handlers:
            handler.close()
        self._logger.handlers.clear()
        if self._log_file is not None:
            self._log_file.close_stream()

    def info(self, message: str) -> None:
        self._log(logging.INFO, message)

    def warning(self, message: str) -> None:
        self._log(logging.WARNING, message)

    def error(self, message: str) -> None:
        self._log(logging.ERROR, shown(message))  # one line, whatever a name in it holds

    def _log(self, level: int, message: str) -> None:
        message = with_flags(message, self.flags)
        # names that are not UTF-8 (surrogates) as \xNN, the way errors show them
        message = message.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        self._logger.log(level, message)
        log_file = self._log_file
        if log_file is not None and log_file.failure is not None:  # the log cannot be written: say so once
            self._logger.removeHandler(log_file)
            log_file.close_stream()
            self._log_file = None
            self.log_failed = True
            self._logger.warning(f"{log_file.failure}; messages go to stderr only")

    def warn_slow_scanner(self) -> None:
        if not C_SCANNER:
            self.warning("Python's json C accelerator is missing; parsing will be several times slower")

    def link(self, result: api.LinkResult) -> None:
        for warning in result.warnings:
            self.warning(warning)
        s = result.stats
        steps = result.steps.describe()
        self.info(
            f"linked {s.linked:,} of {s.host_ops:,} host ops and {s.gpu_linked:,} device ops"
            + (f" of {steps}" if steps else "")
        )
        if result.cut_off is not None:
            self.info(result.cut_off.describe())

    def compaction(self, result: api.CompactResult, lead: str = "") -> None:
        self.info(
            f"{lead}wrote {result.output_path}: {result.nodes_written:,} nodes from {result.nodes_read:,} "
            f"({result.merged_nodes:,} merged into runs), {result.dependencies_written:,} dependencies from "
            f"{result.dependencies_read:,} ({result.redundant_dependencies:,} redundant) "
            f"in {result.seconds:.2f} s"
        )

    def kineto(self, result: api.KinetoConversion) -> None:
        for warning in result.warnings:
            self.warning(warning)
        rank = "" if result.rank is None else f" rank {result.rank},"
        if result.rank is not None and result.world_size is not None:
            rank = f" rank {result.rank} of a {result.world_size}-rank job,"
        self.info(
            f"wrote {result.output_path}:{rank} ProfilerStep#{result.step}: {result.nodes:,} nodes "
            f"({result.gpu_ops:,} GPU ops, {result.comm_nodes:,} communication) from {result.events:,} events "
            f"in {result.seconds:.2f} s ({result.events / max(result.seconds, 1e-9):,.0f} events/s)"
        )
        if result.roofline is not None:
            r = result.roofline
            self.info(
                f"--roofline: {r.costed:,} of {r.kernels:,} GPU compute node(s) given num_ops/tensor_size from their "
                f"launching ops ({r.flops:,} FLOPs, {r.bytes:,} bytes; {r.from_profiler:,} from the profiler's flops)"
            )
        if result.compaction is not None:
            self.compaction(result.compaction, "--compact: ")
        if result.overlap is not None:
            self.info(result.overlap + " (--serial-streams: as traced)")
        if result.overhead is not None:
            self.info(result.overhead.line())
        if result.whatif is not None:
            w = result.whatif
            total = w.totals()
            source = f", scaled from {w.source}" if w.source else ""
            host = (
                "kept its traced time"
                if w.host_whatif_us is None
                else f"{w.host_events:,} ops and launches: {w.host_traced_us / 1e3:,.3f} ms traced -> "
                f"{w.host_whatif_us / 1e3:,.3f} ms"
            )
            gap = (
                f"; the GPU {w.kernel_gap_us:g} us between queued kernels ({w.gpu_ops:,} GPU ops: "
                f"{w.kernel_gap_us * w.gpu_ops / 1e3:,.3f} ms)"
                if w.kernel_gap_us
                else ""
            )
            self.info(
                f"--device-profile {w.profile}{source}: {total.kernels:,} kernel(s), traced "
                f"{total.traced_us / 1e3:,.3f} ms -> {total.whatif_us / 1e3:,.3f} ms; host {host}{gap}; per class:"
            )
            for line in w.class_lines():
                self.info(line)
            self.info(
                f"what-if for {w.device}: simulate PREFIX (no --accelerator: the durations are the what-if); "
                "compare with the untraced step, not the traced one"
            )
            return
        model = result.overhead.model if result.overhead is not None else None
        untraced = (
            f"; untraced {model.untraced_us / 1000:,.3f} ms (the calibration's), which the replay is held against"
            if model is not None and model.untraced_us
            else ""
        )
        self.info(
            f"measured step {result.measured_us / 1000:,.3f} ms (the CPU span "
            f"{result.cpu_span_us / 1000:,.3f} ms to the end of its GPU work, tracing included){untraced}; replay it: "
            f"{PROG} simulate {_job_prefix(result.output_path)} --replay"
        )

    def conversion(self, result: api.ConversionResult) -> None:
        for warning in result.warnings:
            self.warning(warning)
        for e in result.removed_edges:
            inter = " (inter-thread)" if e.inter_thread else ""
            self.info(
                f"removed dependency {e.node_id} '{e.node_name}' -> {e.dependency_id} '{e.dependency_name}'{inter}"
            )
        if result.removed_edges:
            self.info(
                f"--break-cycles removed {len(result.removed_edges)} dependency edge(s) to make the graph acyclic"
            )
        self.info(
            f"wrote {result.output_path}: {result.nodes_written:,} nodes ({result.dangling_removed:,} dangling "
            f"removed, {result.comm_nodes:,} comm nodes, {result.data_deps:,} data deps) from {result.nodes_read:,} "
            f"in {result.seconds:.2f} s ({result.nodes_read / max(result.seconds, 1e-9):,.0f} nodes/s; "
            f"{result.processes} reading, {result.sequential_fraction:.0%} in sequential stages)"
        )
        if result.simulation is not None:
            self.info(
                f"simulated execution: {result.simulation.end_time_us:,} us for {len(result.simulation.issued):,} ops"
            )
        changes = result.astra_changes
        if changes is not None:
            self.info(
                f"--astra-sim: {changes.metadata_removed} METADATA node(s) removed, "
                f"{changes.ctrl_deps_dropped} ctrl_deps naming no node dropped, "
                f"{changes.host_collectives} host-side collective(s) made communication nodes"
            )
        if result.overhead is not None:
            self.info(result.overhead.line())
        if result.compaction is not None:
            self.compaction(result.compaction, "--compact: ")
        costs = result.roofline
        if costs is not None:  # its warnings are among the conversion's
            classes = ", ".join(
                f"{name} {c.nodes:,}" for name, c in sorted(costs.classes.items(), key=lambda kv: -kv[1].flops)
            )
            target = ""
            if costs.accelerator:
                host = "with" if costs.host_time else "without"
                target = (
                    f"; those that do work written as accelerator (non-CPU) ops, the "
                    f"{costs.no_work_nodes:,} that do none as CPU ops {host} their captured duration"
                )
            self.info(
                f"--roofline: {costs.nodes:,} compute nodes, {costs.flops / 1e9:,.2f} GFLOP, "
                f"{costs.bytes / 1e9:,.2f} GB ({classes}){target}"
            )
        if result.simulator_problems:
            self.info(
                f"note: ASTRA-sim would refuse this output ({'; '.join(result.simulator_problems)}); "
                "--astra-sim writes one it runs"
            )


def _job_prefix(output: str) -> str:
    """PREFIX of an output named ``PREFIX.<rank>.et`` (what ``simulate`` takes), else ``PREFIX``."""
    match = re.fullmatch(r"(.+)\.(0|[1-9][0-9]*)\.et", output)
    return match.group(1) if match else "PREFIX"

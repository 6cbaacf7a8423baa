"""The command line: one argparse grammar for every subcommand, and printing for people.

All work is done by ``api``. Human output (progress bars, summaries, warnings, errors) goes to
stderr, and to ``--log-filename`` when given; stdout carries only what a command produces as data.
Forms accepted (the last one is ``chakra_converter``'s, so its scripts only swap the executable)::

    chakra-convert-fast [convert] INPUT OUTPUT [--jobs N] [options]
    chakra-convert-fast convert --host HOST --device DEVICE OUTPUT [options]
    chakra-convert-fast link --host HOST --device DEVICE OUTPUT
    chakra-convert-fast convert-all DIRECTORY OUTDIR [options]
    chakra-convert-fast repair INPUT OUTPUT
    chakra-convert-fast check FILE.et ... [--comm-groups F] [--json]
    chakra-convert-fast [--log-filename F] PyTorch --input INPUT --output OUTPUT [--simulate]
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
from collections.abc import Callable, Sequence
from contextlib import suppress
from types import FrameType
from typing import IO, Any

from tqdm import tqdm

from . import api
from .errors import ConverterError
from .jsonstream import C_SCANNER

PROG = "chakra-convert-fast"
COMMANDS = ("convert", "link", "convert-all", "repair", "check", "PyTorch")
_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
_DESCRIPTION = """\
Convert PyTorch execution traces (host traces, or host+device traces merged by chakra_trace_link)
into Chakra execution traces (.et) for simulators such as ASTRA-sim. The output is byte-identical
to `chakra_converter PyTorch` (mlc-chakra 1.0.0), but the input is streamed (.json or .json.gz),
memory stays near a few hundred bytes per node, and nothing recurses.
"""
_EPILOG = f"""\
examples:
  {PROG} merged.json.gz out.et
  {PROG} convert --host rank0_host.json --device rank0_device.json out.0.et
  {PROG} convert-all outputs/ et/ --jobs 4
  {PROG} convert-all /shared/outputs/ /shared/et/ --ray head-node:6379
  {PROG} PyTorch --input merged.json --output out.et      (chakra_converter's form)

exit status: 0 on success, 1 when an input cannot be converted (one line on stderr, no output
file written), 2 on a usage error, 130/143 when interrupted or terminated; convert-all: the
number of ranks that failed.
"""


class _Terminated(BaseException):
    """SIGTERM or SIGHUP: unwinds like KeyboardInterrupt, so partial outputs are removed."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _on_signal(signum: int, _frame: FrameType | None) -> None:
    _ignore_stop_signals()  # a second signal must not cut the clean-up of the first short
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise _Terminated(signum)


def _ignore_stop_signals() -> None:
    for signum in _STOP_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)


def _install_signal_handlers() -> dict[int, Any]:
    """SIGINT, SIGTERM and SIGHUP unwind the command (outputs removed, workers stopped) and end it
    with one line; a file-size limit (SIGXFSZ) makes the write fail with EFBIG, reported as an
    error, instead of killing the process halfway through a file. Returns the handlers replaced."""
    signums = [*_STOP_SIGNALS, *([signal.SIGXFSZ] if hasattr(signal, "SIGXFSZ") else [])]
    previous: dict[int, Any] = {signum: signal.getsignal(signum) for signum in signums}
    for signum in signums:
        signal.signal(signum, _on_signal if signum in _STOP_SIGNALS else signal.SIG_IGN)
    return previous


# -- the grammar ----------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, description=_DESCRIPTION, epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--log-filename", metavar="F", help="also write messages to this file (appended)")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    _add_convert(commands)
    _add_link(commands)
    _add_convert_all(commands)
    _add_repair(commands)
    _add_check(commands)
    _add_reference_form(commands)
    return parser


def _subcommand(commands: Any, name: str, summary: str, examples: str) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = commands.add_parser(
        name, help=summary, description=summary, epilog=f"examples:\n{examples}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.set_defaults(usage_error=parser.error)  # prints the subcommand's usage, exits 2
    return parser


def _add_output_options(parser: argparse.ArgumentParser) -> None:
    """Where messages go: the same options on every subcommand."""
    group = parser.add_argument_group("messages")
    group.add_argument("-q", "--quiet", action="store_true", help="no progress bars and no summary (warnings only)")
    group.add_argument("--log-level", type=str.upper, choices=_LEVELS, metavar="LEVEL",
                       help="least important message to show: DEBUG, INFO (default), WARNING, ERROR")
    group.add_argument("--log-filename", metavar="F", default=argparse.SUPPRESS,
                       help="also write messages to this file (appended)")


def _add_conversion_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("conversion (the defaults give chakra_converter's bytes)")
    group.add_argument("--simulate", action="store_true",
                       help="after writing, run the reference's simple execution model and print the simulated time")
    group.add_argument("--break-cycles", action="store_true",
                       help="instead of failing on dependency cycles, remove the edges that close them "
                            "(inter-thread edges first) and list every removed edge")
    group.add_argument("--allow-missing-parents", action="store_true",
                       help="accept ctrl_deps that point at no node, as chakra_converter does "
                            "(those ops and everything under them are dropped); an error by default")
    group.add_argument("--astra-sim", action="store_true",
                       help="write what ASTRA-sim runs instead of chakra_converter's bytes: no METADATA "
                            "node, no dependency on a node that is not in the file, host-side (gloo) "
                            "collectives as communication nodes (see README)")


def _add_pair_options(parser: argparse.ArgumentParser, *, required: bool) -> None:
    group = parser.add_argument_group("host + device pair")
    group.add_argument("--host", "--chakra-host-trace", dest="host", metavar="HOST", required=required,
                       help="host trace (ExecutionTraceObserver), .json or .json.gz")
    group.add_argument("--device", "--chakra-device-trace", dest="device", metavar="DEVICE", required=required,
                       help="the Kineto trace of the same rank and run")
    group.add_argument("--rank", type=int, help="rank of the trace (checked against the Kineto trace; with "
                       "--astra-sim, the own end of sends and receives)")
    group.add_argument("--allow-mismatch", action="store_true", help="link a pair even if it looks like two runs")


def _add_convert(commands: Any) -> None:
    parser = _subcommand(
        commands, "convert", "convert a merged or host trace, or a host + device pair, into a .et file",
        f"  {PROG} convert merged.json.gz out.et --break-cycles\n"
        f"  {PROG} convert --host rank0_host.json --device rank0_device.json out.0.et\n",
    )
    parser.add_argument("paths", nargs="+", metavar="[INPUT] OUTPUT",
                        help="INPUT OUTPUT, or only OUTPUT with --host and --device")
    _add_pair_options(parser, required=False)
    parser.add_argument("--keep-merged", metavar="PATH", help="with --host/--device: also write the merged JSON")
    _add_jobs_option(parser)
    _add_conversion_options(parser)
    _add_output_options(parser)
    parser.set_defaults(run=_run_convert)


def _add_jobs_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-j", "--jobs", dest="read_jobs", type=_positive, metavar="N",
                        help="processes reading a large plain-JSON input, a byte range each (default: CPU count)")


def _add_link(commands: Any) -> None:
    parser = _subcommand(
        commands, "link", "merge a host trace with its Kineto trace (what chakra_trace_link writes)",
        f"  {PROG} link --host rank0_host.json --device rank0_device.json merged.json.gz\n"
        f"  {PROG} link --chakra-host-trace H --chakra-device-trace D --output-file M  (its own form)\n",
    )
    parser.add_argument("output", nargs="?", metavar="OUTPUT", help="merged JSON to write (.gz: gzipped)")
    parser.add_argument("--output-file", dest="output_file", metavar="OUTPUT", help=argparse.SUPPRESS)
    _add_pair_options(parser, required=True)
    _add_output_options(parser)
    parser.set_defaults(run=_run_link)


def _add_convert_all(commands: Any) -> None:
    parser = _subcommand(
        commands, "convert-all", "link and convert every rank whose traces are in a directory",
        f"  {PROG} convert-all outputs/ et/ --jobs 4      # -> et/trace.<rank>.et, et/comm_group.json\n",
    )
    parser.add_argument("directory", metavar="DIRECTORY", help="each rank's host and Kineto traces")
    parser.add_argument("outdir", metavar="OUTDIR", help="where <prefix>.<rank>.et files go (created if missing)")
    parser.add_argument("-j", "--jobs", type=_positive, help="ranks converted at once (default: CPU count)")
    parser.add_argument("--ray", nargs="?", const="auto", metavar="ADDRESS",
                        help="run each rank as a task on this Ray cluster (default: the one this machine is "
                             "part of) instead of local processes; paths must be the same on every node")
    parser.add_argument("--prefix", default="trace", help="output name prefix (default: trace)")
    parser.add_argument("--allow-mismatch", action="store_true", help="link pairs even if they look like two runs")
    _add_conversion_options(parser)
    _add_output_options(parser)
    parser.set_defaults(run=_run_convert_all)


def _add_repair(commands: Any) -> None:
    parser = _subcommand(
        commands, "repair", "keep the last complete JSON object of a host trace that holds several",
        f"  {PROG} repair rank0_host.json rank0_host.fixed.json\n",
    )
    parser.add_argument("input", metavar="INPUT")
    parser.add_argument("output", metavar="OUTPUT", help="repaired trace (.gz: gzipped)")
    _add_output_options(parser)
    parser.set_defaults(run=_run_repair)


def _add_check(commands: Any) -> None:
    parser = _subcommand(
        commands, "check", "read .et files (one per rank) and check them against what ASTRA-sim accepts",
        f"  {PROG} check et/trace.*.et --comm-groups et/comm_group.json\n"
        f"  {PROG} check out.et --json > report.json\n",
    )
    parser.add_argument("files", nargs="+", metavar="FILE.et", help="Chakra traces, one per rank (<prefix>.<rank>.et)")
    parser.add_argument("--comm-groups", metavar="F", help="the --comm-group-configuration file to check with them")
    parser.add_argument("--json", action="store_true", help="print the report as JSON on stdout")
    _add_output_options(parser)
    parser.set_defaults(run=_run_check)


def _add_reference_form(commands: Any) -> None:
    parser = _subcommand(
        commands, "PyTorch", "chakra_converter's own command line, accepted as is",
        f"  {PROG} --log-filename convert.log PyTorch --input merged.json --output out.et\n",
    )
    parser.add_argument("--input", required=True, metavar="INPUT", help="merged or host trace, .json or .json.gz")
    parser.add_argument("--output", required=True, metavar="OUTPUT", help="Chakra trace to write (.et)")
    _add_jobs_option(parser)
    _add_conversion_options(parser)
    _add_output_options(parser)
    parser.set_defaults(run=_run_reference_form)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _with_default_command(argv: list[str], commands: Sequence[str]) -> list[str]:
    """``chakra-convert-fast IN OUT ...`` means ``convert IN OUT ...``: insert the command after the
    leading top-level options when the first positional argument names no command."""
    position = 0
    while position < len(argv) and argv[position].startswith("--log-filename"):
        position += 1 if "=" in argv[position] else 2
    first = next((a for a in argv[position:] if not a.startswith("-")), None)
    if first is None or first in commands or any(a in ("-h", "--help") for a in argv[:position + 1]):
        return argv
    return [*argv[:position], "convert", *argv[position:]]


# -- running --------------------------------------------------------------------------------------
def main(argv: Sequence[str] | None = None) -> int:
    previous_handlers = _install_signal_handlers()
    reporter: Reporter | None = None
    try:
        parser = build_parser()
        args = parser.parse_args(_with_default_command(list(sys.argv[1:] if argv is None else argv), COMMANDS))
        run: Callable[[argparse.Namespace, Reporter], int] = args.run
        reporter = Reporter(args.log_level or ("WARNING" if args.quiet else "INFO"))
        reporter.open_log(args.log_filename, _log_conflict(args, args.log_filename))
        status = run(args, reporter)
        return 1 if reporter.log_failed else status
    except ConverterError as exc:
        return _fail(reporter, str(exc), 1)
    except KeyboardInterrupt:
        return _fail(reporter, "interrupted; no output written", 130)
    except _Terminated as exc:
        return _fail(reporter, f"terminated by {signal.Signals(exc.signum).name}; no output written",
                     128 + exc.signum)
    finally:
        _ignore_stop_signals()  # the command is over: nothing left to clean up
        if reporter is not None:
            reporter.close()
        for signum, handler in previous_handlers.items():
            signal.signal(signum, handler)


def _fail(reporter: Reporter | None, message: str, status: int) -> int:
    if reporter is None:  # before the options were read: plain stderr
        print(f"{PROG}: error: {message}", file=sys.stderr)
    else:
        reporter.error(message)
    return status


def _log_conflict(args: argparse.Namespace, log: str | None) -> str | None:
    """The file of the command that the log file would be (it must be none of them), if any."""
    if not log:
        return None
    named = [getattr(args, a, None) for a in ("input", "output", "output_file", "host", "device", "keep_merged",
                                              "comm_groups")]
    for name in [str(n) for n in [*named, *getattr(args, "paths", []), *getattr(args, "files", [])] if n]:
        if api.same_file(name, log):
            return name
    if args.command == "convert-all" and api.convert_all_uses(log, args.directory, args.outdir, args.prefix):
        return "a trace or an output of convert-all"
    return None



def _run_convert(args: argparse.Namespace, reporter: Reporter) -> int:
    pair = args.host is not None or args.device is not None
    if pair and (args.host is None or args.device is None):
        args.usage_error("--host and --device go together")
    if len(args.paths) != (1 if pair else 2):
        args.usage_error("give INPUT OUTPUT, or OUTPUT with --host and --device")
    if args.keep_merged and not pair:
        args.usage_error("--keep-merged needs --host and --device")
    options = _options(args)
    with ProgressBars(reporter.shows_progress) as bars:
        if not pair:
            reporter.warn_slow_scanner()
            result = api.convert(args.paths[0], args.paths[1], options, progress=bars.progress)
            reporter.conversion(result)
            return 0
        paired = api.convert_pair(args.host, args.device, args.paths[0], options, rank=args.rank,
                                  keep_merged=args.keep_merged, allow_mismatch=args.allow_mismatch,
                                  progress=bars.progress)
    reporter.link(paired.link)
    reporter.conversion(paired.conversion)
    return 0


def _run_reference_form(args: argparse.Namespace, reporter: Reporter) -> int:
    args.paths = [args.input, args.output]
    args.host = args.device = args.keep_merged = None
    return _run_convert(args, reporter)


def _run_link(args: argparse.Namespace, reporter: Reporter) -> int:
    output = args.output if args.output is not None else args.output_file
    if output is None or (args.output_file is not None and args.output_file != output):
        args.usage_error("give the merged output once: OUTPUT (or --output-file OUTPUT)")
    result = api.link(args.host, args.device, output, rank=args.rank, allow_mismatch=args.allow_mismatch)
    reporter.link(result)
    reporter.info(f"wrote {output}: {result.nodes_written:,} nodes in {result.seconds:.2f} s")
    return 0


def _run_convert_all(args: argparse.Namespace, reporter: Reporter) -> int:
    with ProgressBars(reporter.shows_progress) as bars:
        result = api.convert_all(args.directory, args.outdir, _options(args), jobs=args.jobs, prefix=args.prefix,
                                 allow_mismatch=args.allow_mismatch, on_rank_done=bars.rank_done,
                                 ray_address=args.ray)
    reporter.info(f"{'rank':>4}  {'status':6}  {'nodes':>9}  {'seconds':>7}  output / problem")
    for o in result.outcomes:
        status, detail = ("ok", o.output or "") if o.ok else ("FAILED", o.message)
        reporter.info(f"{o.rank:>4}  {status:6}  {o.nodes:>9,}  {o.seconds:>7.2f}  {detail}")
        if o.ok and o.message:
            reporter.warning(f"rank {o.rank}: {o.message}")
    groups = result.comm_groups
    if result.comm_group_path is not None:
        reporter.info(f"communicator groups: {result.comm_group_path} {groups.groups} (the default group, "
                      "every rank, needs no entry)")
    if groups.unusable:
        reporter.warning(f"process groups {groups.unusable} have names ASTRA-sim cannot use as group ids")
    if result.failed:
        reporter.error(f"{result.failed} of {len(result.outcomes)} ranks failed")
    return min(result.failed, 125)


def _run_repair(args: argparse.Namespace, reporter: Reporter) -> int:
    result = api.repair(args.input, args.output)
    reporter.info(f"wrote {result.output_path}: {result.describe()}")
    return 0


def _run_check(args: argparse.Namespace, reporter: Reporter) -> int:
    report = api.check(args.files, args.comm_groups)
    if args.json:
        print(json.dumps(_report_json(report), indent=2))
    else:
        for line in _report_lines(report):
            print(line)
    for problem in report.problems:
        (reporter.error if problem.fatal else reporter.warning)(problem.line())
    return 0 if report.ok else 1


def _report_lines(report: api.CheckReport) -> list[str]:
    lines = []
    for f in report.files:
        types = ", ".join(f"{name} {count:,}" for name, count in f.by_type.items())
        lines.append(f"{f.path} (rank {f.rank}): {f.nodes:,} nodes ({types}); {f.roots:,} roots; "
                     f"{f.dependencies:,} dependencies, {f.missing_dependencies:,} naming no node; "
                     f"{f.cycles} cycles")
        for total in f.collective_totals():
            lines.append(f"    {total['kind']:<14} group {total['group'] or '0':<4} {total['count']:>6,} x, "
                         f"{total['bytes']:>16,} bytes")
    fatal = sum(p.fatal for p in report.problems)
    verdict = "ASTRA-sim would accept" if report.ok else f"ASTRA-sim would refuse or hang on ({fatal} problem(s))"
    lines.append(f"{verdict}: {len(report.files)} file(s)")
    return lines


def _report_json(report: api.CheckReport) -> dict[str, Any]:
    return {
        "ok": report.ok,
        "files": [
            {"path": f.path, "rank": f.rank, "nodes": f.nodes, "nodes_by_type": f.by_type, "roots": f.roots,
             "dependencies": f.dependencies, "missing_dependencies": f.missing_dependencies,
             "duplicate_ids": f.duplicate_ids, "cycles": f.cycles, "collectives": f.collective_totals()}
            for f in report.files
        ],
        "comm_groups": report.comm_groups,
        "problems": [{"file": p.path, "message": p.message, "fatal": p.fatal} for p in report.problems],
    }


def _options(args: argparse.Namespace) -> api.ConvertOptions:
    return api.ConvertOptions(
        simulate=args.simulate, break_cycles=args.break_cycles, allow_missing_parents=args.allow_missing_parents,
        astra_sim=args.astra_sim, rank=getattr(args, "rank", None), jobs=getattr(args, "read_jobs", None),
    )


# -- messages -------------------------------------------------------------------------------------
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
        console = logging.StreamHandler(sys.stderr)
        console.setFormatter(_HumanFormatter())
        self._logger.addHandler(console)
        self._log_file: _LogFile | None = None
        #: The log file could not be written (said once on stderr): the command then exits 1.
        self.log_failed = False

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
        self._log_file = _LogFile(api.open_log(path))
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
        self._log(logging.ERROR, message)

    def _log(self, level: int, message: str) -> None:
        self._logger.log(level, message)
        log_file = self._log_file
        if log_file is not None and log_file.failure is not None:  # the log cannot be written: say so once
            self._logger.removeHandler(log_file)
            log_file.close_stream()
            self._log_file = None
            self.log_failed = True
            self._logger.error(str(log_file.failure))

    def warn_slow_scanner(self) -> None:
        if not C_SCANNER:
            self.warning("Python's json C accelerator is missing; parsing will be several times slower")

    def link(self, result: api.LinkResult) -> None:
        for warning in result.warnings:
            self.warning(warning)
        s = result.stats
        self.info(f"linked {s.linked:,} of {s.host_ops:,} host ops and {s.gpu_linked:,} device ops")

    def conversion(self, result: api.ConversionResult) -> None:
        for e in result.removed_edges:
            inter = " (inter-thread)" if e.inter_thread else ""
            self.info(f"removed dependency {e.node_id} '{e.node_name}' -> "
                      f"{e.dependency_id} '{e.dependency_name}'{inter}")
        if result.removed_edges:
            self.info(f"--break-cycles removed {len(result.removed_edges)} dependency edge(s) "
                      "to make the graph acyclic")
        self.info(
            f"wrote {result.output_path}: {result.nodes_written:,} nodes ({result.dangling_removed:,} dangling "
            f"removed, {result.comm_nodes:,} comm nodes, {result.data_deps:,} data deps) from {result.nodes_read:,} "
            f"in {result.seconds:.2f} s ({result.nodes_read / max(result.seconds, 1e-9):,.0f} nodes/s; "
            f"{result.processes} reading, {result.sequential_fraction:.0%} in sequential stages)"
        )
        if result.simulation is not None:
            self.info(f"simulated execution: {result.simulation.end_time_us:,} us "
                      f"for {len(result.simulation.issued):,} ops")
        changes = result.astra_changes
        if changes is not None:
            self.info(f"--astra-sim: {changes.metadata_removed} METADATA node(s) removed, "
                      f"{changes.ctrl_deps_dropped} ctrl_deps naming no node dropped, "
                      f"{changes.host_collectives} host-side collective(s) made communication nodes")
        if result.simulator_problems:
            self.info(f"note: ASTRA-sim would refuse this output ({'; '.join(result.simulator_problems)}); "
                      "--astra-sim writes one it runs")


class ProgressBars:
    """tqdm bars on stderr: input bytes while reading, nodes while writing, ranks when converting many."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._bars: dict[str, Any] = {}

    def __enter__(self) -> ProgressBars:
        return self

    def __exit__(self, *exc: object) -> None:
        for bar in self._bars.values():
            bar.close()
        self._bars.clear()

    @property
    def progress(self) -> api.Progress | None:
        return self._update if self.enabled else None

    def _update(self, stage: str, done: int, total: int) -> None:
        bar = self._bars.get(stage)
        if bar is None:
            for other in self._bars.values():
                other.close()
            unit = {"read": "B", "write": "node"}.get(stage, "it")
            bar = self._bars[stage] = tqdm(total=total, desc=f"{stage:>5}", unit=unit, unit_scale=True,
                                           file=sys.stderr, leave=False)
        bar.update(done - bar.n)

    def rank_done(self, outcome: api.RankOutcome) -> None:
        if not self.enabled:
            return
        bar = self._bars.get("ranks")
        if bar is None:
            bar = self._bars["ranks"] = tqdm(desc="ranks", unit="rank", file=sys.stderr, leave=False)
        bar.set_postfix_str(f"rank {outcome.rank} {'ok' if outcome.ok else 'FAILED'}")
        bar.update(1)

"""``main``: the grammar of every command (each command module adds its own subcommand and
declares its files, ``common.Outputs``), the default command, and how a command ends (status and
one line on errors)."""

from __future__ import annotations

import argparse
import glob
import importlib
import os
import signal
import sys
import traceback
from collections.abc import Callable, Sequence
from contextlib import suppress

from ..errors import ConverterError, OptionError, shown
from ..lifecycle import committed_outputs, forget_committed, hold_signals_after_commit, release_held_signals
from ..ranks.onray import ended_by_signal as ray_run_ended_by_signal
from .common import PROG, Outputs, version
from .report import Flags, Reporter, describe_failure, flags_of, flush_stdout, standard_streams
from .signals import Terminated, ignore_stop_signals, install_signal_handlers, restore

#: Every command, in the order ``--help`` lists them, and the module (in this package) whose ``add``
#: defines it. The grammar is built for the command that runs, so only its module is imported:
#: ``--version`` imports none, ``--help`` and a usage error without a command every one.
_MODULE_OF: dict[str, str] = {
    "convert": "convert",
    "PyTorch": "convert",
    "link": "link",
    "convert-all": "convert_all",
    "repair": "repair",
    "check": "check",
    "scale": "scale",
    "compact": "compact",
    "memory": "memory",
    "simulate": "simulate",
    "compare": "compare",
    "text": "text",
    "Text": "text",
    "jsonize": "jsonize",
    "visualize": "visualize",
    "generate": "generate",
}
COMMANDS = tuple(_MODULE_OF)
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
  {PROG} scale et/trace et1024/trace --ranks 1024        (a captured job as 1,024 ranks)
  {PROG} simulate et/trace --sweep ranks=2,8,64,256      (ASTRA-sim: step time against ranks)
  {PROG} text Resnet50_DataParallel.txt et/resnet50 --npus 64   (ASTRA-sim 1.0 text workloads)

exit status: 0 on success, 1 when an input cannot be converted (one line on stderr, no output
file written), 2 on a usage error, 130/143 when interrupted or terminated; convert-all: the
number of ranks that failed.
"""


def build_parser(commands: Sequence[str] = COMMANDS) -> argparse.ArgumentParser:
    """The grammar of ``commands`` (default: every command): the top-level options and their
    subcommands."""
    parser = argparse.ArgumentParser(
        prog=PROG, description=_DESCRIPTION, epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--log-filename", metavar="F", help="also write messages to this file (appended)")
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    parser.add_argument(
        "--debug",
        action="store_true",
        help="an internal error (a bug, not a problem with the input) shows its traceback",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in dict.fromkeys(_MODULE_OF[name] for name in commands):
        importlib.import_module(f"{__package__}.{module}").add(subparsers)
    return parser


def _with_default_command(argv: list[str], commands: Sequence[str]) -> list[str]:
    """``chakra-convert-fast IN OUT ...`` means ``convert IN OUT ...``: insert the command after the
    leading top-level options when the first positional argument names no command."""
    position, first = _first_positional(argv)
    if first is None or first in commands or any(a in ("-h", "--help") for a in argv[: position + 1]):
        return argv
    return [*argv[:position], "convert", *argv[position:]]


def _first_positional(argv: Sequence[str]) -> tuple[int, str | None]:
    """Where the top-level options (``--log-filename F``, ``--debug``) end, and the first
    positional argument (the command, if one is named), or None."""
    position = 0
    while position < len(argv) and (argv[position].startswith("--log-filename") or argv[position] == "--debug"):
        position += 1 if "=" in argv[position] or argv[position] == "--debug" else 2
    return position, next((a for a in argv[position:] if not a.startswith("-")), None)


def _commands_to_build(argv: Sequence[str]) -> Sequence[str]:
    """The commands whose grammar ``argv`` needs: the one it names; none for a bare ``--version``;
    else (``--help``, no command) every one."""
    position, first = _first_positional(argv)
    if first in _MODULE_OF:
        return (first,)
    if "--version" in argv[position:] and not any(a in ("-h", "--help") for a in argv):
        return ()
    return COMMANDS


def main(argv: Sequence[str] | None = None) -> int:
    status = _main(argv)
    if ray_run_ended_by_signal():
        # a signal cut ``convert-all --ray`` short and its one line is out: ray.init may still be
        # connecting in its thread, and ending the interpreter normally with Ray loaded takes longer
        for stream in (sys.stdout, sys.stderr):
            with suppress(OSError, ValueError):
                stream.flush()
        os._exit(status)
    return status


def _main(argv: Sequence[str] | None) -> int:
    previous_handlers = install_signal_handlers()
    standard_streams()
    forget_committed()
    reporter: Reporter | None = None
    debug = False
    try:
        arguments = _with_default_command(list(sys.argv[1:] if argv is None else argv), COMMANDS)
        parser = build_parser(_commands_to_build(arguments))
        args = parser.parse_args(arguments)
        debug = args.debug
        run: Callable[[argparse.Namespace, Reporter], int] = args.run
        reporter = Reporter(args.log_level or ("WARNING" if args.quiet else "INFO"))
        command = args.command
        reporter.flags = Flags(flags_of(parser, command), lambda: flags_of(build_parser(), command))
        outputs: Outputs = args.outputs  # what the command declared (common.Outputs)
        reporter.open_log(args.log_filename, outputs.conflict(args, args.log_filename) if args.log_filename else None)
        hold_signals_after_commit(outputs.commits(args))
        status = run(args, reporter)
        flush_stdout()
        return status
    except ConverterError as exc:
        # an option that cannot apply is a usage error, as argparse's own are
        return _fail(reporter, str(exc) if exc.hint is None else f"{exc} ({exc.hint})", _status(exc))
    except KeyboardInterrupt:
        return _interrupted(reporter, "interrupted", 130)
    except Terminated as exc:
        return _interrupted(reporter, f"terminated by {signal.Signals(exc.signum).name}", 128 + exc.signum)
    except Exception as exc:
        if debug:  # --debug: the bug's traceback, for a report
            traceback.print_exc()
        return _fail(reporter, describe_failure(exc), 1)
    finally:
        ignore_stop_signals()  # the command is over: nothing left to clean up
        hold_signals_after_commit(0)  # a caller of main() in this process keeps its signals
        release_held_signals()  # held since the last output's commit: now ignored
        if reporter is not None:
            reporter.close()
        restore(previous_handlers)


def _status(exc: ConverterError) -> int:
    """The exit status of a command that ``exc`` ended: 2 for an option that cannot apply, else 1."""
    return 2 if isinstance(exc, OptionError) else 1


def _interrupted(reporter: Reporter | None, what: str, status: int) -> int:
    """A signal ended the command: say what was written before it (nothing, mostly). An output
    that is gone again (a sweep's scaled job, written into a temporary folder since removed) is
    not named: the user could not find it."""
    written = [name for name in committed_outputs() if _still_there(name)]
    if not written:
        return _fail(reporter, f"{what}; no output written", status)
    names = ", ".join(shown(path) for path in written)
    return _fail(reporter, f"{what} after {names} was written; nothing else written", status)


def _still_there(name: str) -> bool:
    """Whether a committed output, as its set names it (a path, ``PREFIX.*``, ``A and B``), exists."""
    if os.path.lexists(name):
        return True
    if " and " in name:
        return any(_still_there(part) for part in name.split(" and "))
    return "*" in name and bool(glob.glob(name))


def _fail(reporter: Reporter | None, message: str, status: int) -> int:
    if reporter is None:  # before the options were read: plain stderr
        with suppress(OSError, ValueError, AttributeError):
            print(f"{PROG}: error: {shown(message)}", file=sys.stderr, flush=True)
    else:
        reporter.error(message)
    return status

"""What every command shares: the program's name and version, a subcommand's frame, the files it
declares (``Outputs``) and the message options. Light on purpose: ``main`` imports it before it
knows the command (the option groups of the converting commands are in ``conversion``)."""

from __future__ import annotations

import argparse
import importlib.metadata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..io.read import same_file

PROG = "chakra-convert-fast"


def version() -> str:
    """The installed distribution's version (``--version``), or "unknown" when run from a bare tree."""
    try:
        return importlib.metadata.version("chakra-convert-fast")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def _no_commit(args: argparse.Namespace) -> int:
    return 0


@dataclass(frozen=True)
class Outputs:
    """What a command reads and writes, as ``main`` needs it; each command declares its own
    (``parser.set_defaults(outputs=Outputs(...))``), so ``main`` never branches on a command's name.

    ``files``: the options that name its files, inputs and outputs (the log file must be none of
    them; a value "-" is stdout). ``uses_file(path, args)``: whether ``path`` is a file the
    command finds for itself (a job's rank files), ``used_as`` saying what it is. ``commits(args)``:
    how many outputs it commits, its last commit and its report being one step that signals wait
    for; 0 where work follows the last commit (``--simulate``), which a signal must still stop."""

    files: tuple[str, ...] = ()
    uses_file: Callable[[str, argparse.Namespace], bool] | None = None
    used_as: str = "an output of this command"
    commits: Callable[[argparse.Namespace], int] = _no_commit

    def conflict(self, args: argparse.Namespace, log: str) -> str | None:
        """The file of the command that the log file ``log`` would be, if any."""
        named: list[object] = []
        for option in self.files:
            value = getattr(args, option, None)
            named.extend(value if isinstance(value, list) else [value])
        for name in (n for n in named if isinstance(n, str) and n and n != "-"):
            if same_file(name, log):
                return name
        if self.uses_file is not None and self.uses_file(log, args):
            return self.used_as
        return None


def committed_once(args: argparse.Namespace) -> int:
    """One output committed at the end, unless ``--simulate`` runs after it."""
    return 0 if getattr(args, "simulate", False) else 1


def declare(parser: argparse.ArgumentParser, files: Sequence[str], **outputs: Any) -> None:
    """Set the command's ``Outputs`` (``files`` and the fields in ``outputs``) on ``parser``."""
    parser.set_defaults(outputs=Outputs(files=tuple(files), **outputs))


def subcommand(commands: Any, name: str, summary: str, examples: str) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = commands.add_parser(
        name,
        help=summary,
        description=summary,
        epilog=f"examples:\n{examples}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.set_defaults(usage_error=parser.error)  # prints the subcommand's usage, exits 2
    return parser


def add_output_options(parser: argparse.ArgumentParser) -> None:
    """Where messages go: the same options on every subcommand."""
    group = parser.add_argument_group("messages")
    group.add_argument("-q", "--quiet", action="store_true", help="no progress bars and no summary (warnings only)")
    group.add_argument(
        "--log-level",
        type=str.upper,
        choices=LEVELS,
        metavar="LEVEL",
        help="least important message to show: DEBUG, INFO (default), WARNING, ERROR",
    )
    group.add_argument(
        "--log-filename", metavar="F", default=argparse.SUPPRESS, help="also write messages to this file (appended)"
    )

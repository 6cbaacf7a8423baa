"""The exception tree of the converter.

Every error a user can cause with their input derives from ``ConverterError`` and renders as one
line that names the file and the problem, so the CLI can print ``str(exc)`` and exit non-zero::

    ConverterError                 anything this package raises on purpose
    ├── OptionError                an argument that cannot apply (also a ValueError)
    ├── TraceFormatError           the input is not a readable trace (I/O, JSON syntax, layout)
    │   └── UnsupportedSchemaError the trace's schema version is not one we convert
    ├── TraceContentError          the JSON is fine but the nodes are not (missing fields,
    │                              duplicate ids, dangling references, unencodable values)
    ├── OutputError                the output cannot be written there: a missing or unwritable
    │                              directory, a directory or read-only file in the way, a full disk
    ├── CyclicDependencyError      the dependency graph has cycles; lists every one of them
    ├── JobCheckError              a job's .et files hold what ASTRA-sim would abort or stall on
    └── SimulatorError             ASTRA-sim is missing, failed, was killed, or left ranks unfinished

Every error may carry a ``hint``: what to do about it, kept out of the message (as pip's
``DiagnosticPipError`` does); the command line prints it after the message.

Messages and hints speak the Python API's terms: a parameter (or an options field) is named in
backticks, ```ranks` 0: must be between 1 and 1,048,576``. The command line shows each such name
as its command's flag (``--ranks 0: ...``; ``cli.report.with_flags``), so neither side reads the
other's words. ``OptionError`` is an argument that cannot apply: a ``ValueError`` for the library,
a usage error (exit status 2) at the command line.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

#: How a message names a parameter of the API: in backticks (the command line shows the flag).
PARAMETER = re.compile(r"`([a-z][a-z0-9_]*)`")


def shown(path: str) -> str:
    """A path as a message shows it, on one line: bytes that are not UTF-8 (kept by Python as
    surrogates) as ``\\xNN``, control characters (a newline in a name) as escapes."""
    try:
        text = path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a lone surrogate that is no escaped byte (a JSON "\ud800" in a name)
        text = path.encode("utf-8", "backslashreplace").decode("utf-8")
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() or c == " " else repr(c)[1:-1] for c in text)


class ConverterError(Exception):
    """Base class: a problem the user can fix, reported as one line.

    ``hint``, when given, says what to do about it (the command line prints it after the message)."""

    def __init__(self, *args: object, hint: str | None = None) -> None:
        super().__init__(*args)
        self.hint = hint


class OptionError(ConverterError, ValueError):
    """An argument (a function's parameter, a command's option) that cannot apply: out of range, of
    the wrong type, or meaningless for this input."""


class _FileProblem(ConverterError):
    """A problem with one file: ``path`` and ``problem``, shown as ``path: problem`` (only the
    problem when the path is empty)."""

    def __init__(self, path: str, problem: str, *, hint: str | None = None) -> None:
        self.path = str(path)
        self.problem = problem
        # the problem may quote other paths (an input, a log): shown the same way, on the same line
        super().__init__(f"{shown(self.path)}: {shown(problem)}" if self.path else shown(problem), hint=hint)


class TraceFormatError(_FileProblem):
    """The file cannot be read as a trace: missing, empty, truncated, not JSON, wrong layout."""


class UnsupportedSchemaError(TraceFormatError):
    """The trace declares a schema version this converter (and the reference) does not support."""


class TraceContentError(_FileProblem):
    """A node or a dependency is malformed: the trace parses but cannot be converted."""


class OutputError(_FileProblem):
    """An output (or its temporary data, or the log) cannot be written at ``path``: every
    ``OSError`` of writing becomes one, raised where the file is written (``io``)."""


@dataclass(frozen=True)
class CycleReport:
    """One strongly connected component of the dependency graph (a set of nodes on cycles)."""

    size: int
    node_ids: tuple[int, ...]  # the first few ids, ascending
    node_names: tuple[str, ...]  # names matching node_ids

    def describe(self) -> str:
        shown = ", ".join(f"{i} '{n}'" for i, n in zip(self.node_ids, self.node_names, strict=True))
        more = "" if self.size <= len(self.node_ids) else ", ..."
        return f"{self.size} nodes [{shown}{more}]"


class CyclicDependencyError(ConverterError):
    """The converted graph is not a DAG; simulators would hang on it."""

    def __init__(self, path: str, cycles: Sequence[CycleReport]) -> None:
        self.path = str(path)
        self.cycles = tuple(cycles)
        listed = "; ".join(f"cycle {k + 1}: {c.describe()}" for k, c in enumerate(self.cycles))
        super().__init__(
            f"{self.path}: {len(self.cycles)} dependency cycle(s) found ({listed})",
            hint="`break_cycles` removes the closing edges",
        )


class JobCheckError(ConverterError):
    """A job's files hold what ASTRA-sim would abort or stall on (``simulate`` checks them first)."""


class SimulatorError(ConverterError):
    """ASTRA-sim is missing, failed, was killed, or left ranks unfinished."""

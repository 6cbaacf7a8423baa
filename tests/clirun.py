"""Running the command line as a user does, and what every failure must look like.

``run_cli`` runs ``python -m chakra_convert_fast.converter`` in its own session with a timeout: a
hang fails the test (every process of the session is killed, workers included) instead of
blocking the suite. ``assert_one_error`` is the contract of every failure: the exit status, one
line on stderr that starts with the program's name, no traceback.
"""

from __future__ import annotations

import ctypes
import functools
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import pytest

CLI = [sys.executable, "-m", "chakra_convert_fast.converter"]
ERROR_PREFIX = "chakra-convert-fast: error: "


@dataclass(frozen=True)
class Done:
    returncode: int
    stdout: str
    stderr: str


class Hang(AssertionError):
    """The command did not end within its time limit."""


def run_cli(
    *args: str | Path,
    timeout: float = 120,
    preexec_fn: Callable[[], None] | None = None,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
) -> Done:
    with subprocess.Popen(
        [*cli_for(preexec_fn), *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=preexec_fn,
        cwd=cwd,
        env=env,
        errors="backslashreplace",
    ) as process:
        try:
            out, err = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_session(process.pid)
            out, err = process.communicate()
            raise Hang(f"{' '.join(map(str, args))}: still running after {timeout} s; stderr: {err[-2000:]}") from None
    return Done(process.returncode, out, err)


def kill_session(pid: int) -> None:
    with suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


def assert_one_error(done: Done, *expected: str, status: int = 1) -> str:
    """The failure contract: ``status``, exactly one stderr line, the error prefix, no traceback;
    the line contains every ``expected`` text. Returns the line."""
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == status, (done.returncode, done.stderr)
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(ERROR_PREFIX), lines[0]
    for text in expected:
        assert text in lines[0], (text, lines[0])
    return lines[0]


def listing(directory: Path) -> list[str]:
    """Every name in ``directory``, hidden ones included (temporary files start with a dot)."""
    return sorted(os.listdir(directory))


_PR_CAPBSET_DROP = 24
_CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH = 1, 2


def obey_file_modes() -> Callable[[], None] | None:
    """A ``preexec_fn`` under which the child obeys file permission bits even as root (it loses
    CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH, staying uid 0 so it still reads the interpreter);
    None for other users, who obey them anyway."""
    if os.geteuid() != 0:
        return None
    libc = ctypes.CDLL(None, use_errno=True)

    def drop() -> None:
        for capability in (_CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH):
            if libc.prctl(_PR_CAPBSET_DROP, capability, 0, 0, 0) != 0:
                raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")

    return drop


NOBODY = 65534


def as_nobody() -> Callable[[], None] | None:
    """A ``preexec_fn`` running the command as the unprivileged user ``nobody`` where the tests run
    as root (None otherwise: the tests' user is unprivileged already). ``run_cli`` then starts the
    command with ``python_for_nobody()``."""
    if os.geteuid() != 0:
        return None

    def drop() -> None:
        os.setgroups([])
        os.setgid(NOBODY)
        os.setuid(NOBODY)

    drop.nobody = True  # type: ignore[attr-defined]
    return drop


def python_for_nobody() -> tuple[str, str]:
    """(interpreter, code to run first) with which ``nobody`` runs this environment's Python: this
    interpreter where nobody may run it; else, where it lives in a folder closed to others (pyenv
    under /root), the system's interpreter of the same version with this environment's
    site-packages added (the same packages, the editable install included). Where nobody cannot
    read the checkout or its environment at all (a clone inside a private folder), the test is
    skipped, saying so."""
    found = _python_for_nobody()
    if isinstance(found, str):
        pytest.skip(found)
    return found


@functools.cache
def _python_for_nobody() -> tuple[str, str] | str:
    drop = as_nobody()
    if drop is None:
        return sys.executable, ""
    probe = "import chakra_convert_fast.converter, msgspec, tqdm"
    system = f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"
    prelude = f"import site; site.addsitedir({sysconfig.get_paths()['purelib']!r})\n"
    for python, first in ((sys.executable, ""), (system, prelude)):
        with suppress(OSError, subprocess.SubprocessError):
            if (
                subprocess.run(
                    [python, "-c", first + probe], preexec_fn=drop, capture_output=True, cwd="/", timeout=60
                ).returncode
                == 0
            ):
                return python, first
    return (
        f"the user nobody can neither run {sys.executable} nor import this checkout with {system} "
        f"(a folder above {Path(__file__).parents[1]} or the environment is private): run the suite "
        "from a checkout others may read to test as nobody"
    )


def cli_for(preexec_fn: Callable[[], None] | None) -> list[str]:
    """The command line's interpreter and module for a command started with ``preexec_fn``."""
    if not getattr(preexec_fn, "nobody", False):
        return CLI
    python, prelude = python_for_nobody()
    if not prelude:
        return CLI
    return [
        python,
        "-c",
        prelude + "import runpy; runpy.run_module('chakra_convert_fast.converter', "
        "run_name='__main__', alter_sys=True)",
    ]


@contextmanager
def shared_directory() -> Iterator[Path]:
    """A fresh directory under /tmp that ``nobody`` may use too (the tests' temporary directories
    are private to their user), removed afterwards."""
    shared = Path(tempfile.mkdtemp(prefix="chakra-hostile-", dir="/tmp"))
    shared.chmod(0o777)
    try:
        yield shared
    finally:
        shutil.rmtree(shared, ignore_errors=True)

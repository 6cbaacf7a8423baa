"""``simulate``'s outputs (``--json FILE``, ``--timeline``, a sweep's ``OUT.md``/``.png``/``.json``):
checked before anything runs, written all or nothing.

``inputs_of`` lists every file a run reads: the rank files, the group file, the user's configs
and the simulator itself. ``check_outputs`` checks each output against all of them and against
each other (two options naming one file are refused), so a run never replaces a file it reads
nor writes one output over another. ``Outputs`` then writes them: the regular files through one
``io.OutputSet`` (staged where no user sees them, renamed together at the end: a failure or a
signal leaves every old file as it was, and no temporary file), a character device or a FIFO
(``/dev/stdout``, a pipe to another program) is opened when it is checked (a FIFO nobody reads is
refused before anything runs; it is held open so its reader does not see an end) and written
through before that commit, never waited on past ``--timeout``, a signal ending the wait.
"""

from __future__ import annotations

import errno
import io
import os
import select
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager, suppress
from typing import IO

from ..errors import OutputError, SimulatorError
from ..io.output import OutputTarget, check_side_output
from ..io.outputset import OutputSet
from ..io.read import same_file
from .job import Job
from .options import SimulateOptions
from .process import BINARIES, find_simulator

_COPY_CHUNK = 1 << 20


def inputs_of(job: Job, options: SimulateOptions) -> list[str]:
    """Every file a run of ``job`` with ``options`` reads (the simulator where it is found)."""
    found = [job.rank_file(r) for r in range(job.ranks)]
    sides = (job.comm_groups, options.system_config, options.network_config, options.remote_memory_config)
    found += [path for path in sides if path]
    if options.backend in BINARIES:
        with suppress(SimulatorError):  # not found: the run says so in its place
            found.append(find_simulator(options.backend, options.astra_sim_bin))
    return found


class Outputs:
    """The outputs of one command, checked (``check``) and written all or nothing: use it in a
    ``with``; ``commit`` at the end puts every regular file in place, and leaving the block
    without it leaves none."""

    def __init__(self, targets: dict[str, tuple[str, OutputTarget]], timeout: float | None) -> None:
        self._targets = targets  # path -> (its option, its target)
        self._timeout = timeout
        self._files = OutputSet(unnamed=True, shown=" and ".join(targets))
        self._through: dict[str, int] = {}  # path -> the descriptor of a device or FIFO, open from the check on

    @classmethod
    def check(
        cls, named: Sequence[tuple[str, str | None]], inputs: Sequence[str], timeout: float | None = None
    ) -> Outputs:
        """``(option, path)`` pairs (None: not asked for) checked against ``inputs`` and each
        other, before any work; messages name the option, a parameter in backticks (``r.json:
        `json_output`: the output would overwrite the input job.0.et; choose another path``; the
        command line writes its flag, ``--json``). ``timeout`` (s): how long a device or FIFO
        may take to accept its output, from the moment it is written."""
        targets: dict[str, tuple[str, OutputTarget]] = {}
        for option, path in named:
            if path is None:
                continue
            target = check_side_output(path, option, *inputs)
            for earlier, (other_option, other) in targets.items():
                if target.final == other.final or same_file(target.path, other.path):
                    raise OutputError(
                        path, f"{option}: {other_option} names the same file ({earlier}); give each output its own"
                    )
            targets[path] = (option, target)
        outputs = cls(targets, timeout)
        try:
            for path, (option, target) in targets.items():
                if target.write_through:  # opened now, and held: a FIFO needs its reader before anything runs
                    outputs._through[path] = _open_through(target, option)
        except BaseException:
            outputs.close()
            raise
        return outputs

    def __enter__(self) -> Outputs:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Drop whatever was not committed; let go of the devices and FIFOs."""
        self._files.discard()
        for fd in self._through.values():
            with suppress(OSError):
                os.close(fd)
        self._through.clear()

    @contextmanager
    def text(self, path: str | None) -> Iterator[IO[str] | None]:
        """A text file that becomes the output ``path`` once the block completes (None: not asked
        for); a device or FIFO gets it when the block completes, from a temporary file."""
        if path is None:
            yield None
            return
        option, target = self._targets[path]
        with ExitStack() as stack:
            if target.write_through:
                raw: IO[bytes] = stack.enter_context(tempfile.TemporaryFile(dir=target.work_dir))
            else:
                raw = stack.enter_context(self._files.open(target))
            text = io.TextIOWrapper(raw, encoding="utf-8", newline="\n")
            try:
                yield text
                text.flush()
            except OSError as exc:  # a full disk, a file-size limit
                raise OutputError(target.path, f"{option}: cannot write: {_reason(exc)}") from None
            finally:
                with suppress(OSError, ValueError):
                    text.detach()  # the binary file is closed by its owner
            if target.write_through:
                raw.seek(0)
                self._write_through(target, iter(lambda: raw.read(_COPY_CHUNK), b""))

    def put(self, path: str | None, data: bytes) -> None:
        """The whole content of the output ``path`` (None: not asked for)."""
        if path is None:
            return
        _, target = self._targets[path]
        if target.write_through:
            self._write_through(target, [data])
        else:
            self._files.write(target, data)

    def commit(self) -> None:
        """Every regular output in place, together."""
        self._files.commit()

    def _write_through(self, target: OutputTarget, chunks: Iterator[bytes] | Sequence[bytes]) -> None:
        """Write into a device or FIFO without ever blocking: a reader that stalls is waited on
        until the deadline only, and a signal ends the wait as it ends any other."""
        option = self._targets[target.path][0]
        deadline = None if self._timeout is None else time.monotonic() + self._timeout
        fd = self._through.pop(target.path)
        try:
            for chunk in chunks:
                view = memoryview(chunk)
                while view:
                    wait = None if deadline is None else deadline - time.monotonic()
                    if wait is not None and wait <= 0:
                        raise OutputError(
                            target.path,
                            f"{option}: its reader did not take the output within `timeout` {self._timeout:g} s; "
                            "stopped",
                        )
                    _, ready, _ = select.select([], [fd], [], wait)
                    if not ready:
                        continue
                    try:
                        view = view[os.write(fd, view) :]
                    except BlockingIOError:
                        continue
        except OSError as exc:
            raise OutputError(target.path, f"{option}: cannot write: {_reason(exc)}") from None
        finally:
            os.close(fd)


def _open_through(target: OutputTarget, option: str) -> int:
    """A device or FIFO opened for writing without waiting (a FIFO nobody reads is refused)."""
    try:
        return os.open(target.final, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        problem = (
            "is a FIFO that no process is reading" if exc.errno == errno.ENXIO else f"cannot write: {_reason(exc)}"
        )
        raise OutputError(target.path, f"{option}: {problem}") from None


def _reason(exc: OSError) -> str:
    if exc.errno == errno.ENXIO:
        return "a FIFO that no process is reading"
    return exc.strerror or str(exc)

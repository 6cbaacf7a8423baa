"""Worker processes: one function call each, its result sent back through a pipe.

A worker is forked (it shares the parent's open files and data, copy-on-write) and returns its
function's result; an exception in the call, or the process dying, makes the result None, and the
caller then does that work itself (so that errors are reported its own way, with node numbers).
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from contextlib import suppress
from multiprocessing.connection import Connection
from typing import Any

from .errors import ConverterError


def fork_available() -> bool:
    """Whether workers can share open files with their parent (the ``fork`` start method)."""
    return "fork" in multiprocessing.get_all_start_methods()


class Worker:
    """``function(*args)`` in a child process; ``result()`` is its return value, or None if the
    call raised or the process died. ``stop()`` must follow in every case."""

    def __init__(self, function: Callable[..., Any], *args: Any) -> None:
        context = multiprocessing.get_context("fork" if fork_available() else None)
        try:
            self.receiver, sender = context.Pipe(duplex=False)
            self._process = context.Process(target=_run, args=(self.receiver, sender, function, args), daemon=True)
            self._process.start()
        except OSError as exc:  # no more processes or memory
            raise ConverterError(f"cannot start a worker process: {exc.strerror or exc}") from None
        sender.close()

    def result(self) -> Any:
        try:
            outcome = self.receiver.recv()
        except (EOFError, OSError):
            outcome = None
        self._process.join()
        return outcome

    def stop(self) -> None:
        """Stop the process if it still runs, and wait for it."""
        if self._process.is_alive():
            self._process.terminate()
        self._process.join()
        self.receiver.close()


def _run(receiver: Connection, sender: Connection, function: Callable[..., Any], args: tuple[Any, ...]) -> None:
    receiver.close()  # the parent's end: holding it, a send to a dead parent would wait forever
    try:
        outcome = function(*args)
    except Exception:  # the parent is told the call failed and reports it its own way
        outcome = None
    with suppress(OSError):  # the parent is gone: nobody to tell
        sender.send(outcome)
    sender.close()

"""``convert-all --ray``: every rank a task on an existing Ray cluster, instead of a local process.

Ray is an optional extra (``pip install 'chakra-convert-fast[ray]'``), imported only when a
command asks for it (``import ray`` takes about a second, which every other command would pay).
The cluster's workers run the same function as the local processes (``convert_all._convert_rank``),
so a rank's output and its failure message are the same wherever it ran; a task that Ray itself
loses (a node gone) is reported as that rank's failure. Inputs and outputs are paths: every node
must see them at the same place (a shared file system, or an object store mounted as one).
"""

from __future__ import annotations

import atexit
import importlib
import logging
import os
import signal
import socket
import threading
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any, TypeVar

from ..errors import ConverterError
from ..lifecycle import STOP_SIGNALS

_CONNECT_SECONDS = 3
_SIGNAL_SECONDS = 0.05  # how often the driver looks up from waiting on Ray: a stop signal's latency at most
_SIGNALLED = threading.Event()  # a stop signal ended run_on_ray: connecting, or while its tasks ran
Task = TypeVar("Task")
Outcome = TypeVar("Outcome")


def ray_module() -> ModuleType:
    """The ``ray`` package, or a ConverterError saying how to install it."""
    # Ray's C++ client would put a handler in front of the command's own for SIGTERM (a stack dump on
    # stderr, and up to a second's delay); read when ray is imported; a user's explicit setting is kept
    os.environ.setdefault("RAY_DISABLE_FAILURE_SIGNAL_HANDLER", "1")
    try:
        return importlib.import_module("ray")
    except ImportError:
        raise ConverterError("running on Ray needs Ray", hint="pip install 'chakra-convert-fast[ray]'") from None


def resolve_address(ray: ModuleType, address: str | None) -> tuple[str, str]:
    """The address to connect to and how it was chosen. ``address`` None or "auto": ``ray.init()``'s
    own rule (RAY_ADDRESS, else the cluster running on this machine, else a new local one,
    "local"); any other value is used as given."""
    if address not in (None, "auto"):
        return address, f"the Ray cluster at {address}"
    environment = os.environ.get("RAY_ADDRESS", "")
    if environment and environment != "auto":
        return environment, f"the Ray cluster at {environment} (RAY_ADDRESS)"
    try:
        found = ray._private.services.get_ray_address_from_environment(None, None)
    except (AttributeError, ImportError, ConnectionError, OSError):
        found = None
    if found:
        return str(found), f"the Ray cluster running on this machine ({found})"
    return "local", "a new local Ray cluster (RAY_ADDRESS is unset and none runs on this machine)"


def check_reachable(address: str, source: str) -> None:
    """Fail within seconds where nothing listens at ``[ray://]host:port`` (Ray itself would retry
    for many minutes, printing its own log lines)."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not port.isdigit() or not host:
        if address in ("local", "auto"):
            return
        raise ConverterError(f"cannot connect to {source}: not a HOST:PORT address")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=_CONNECT_SECONDS).close()
    except OSError as exc:
        raise ConverterError(f"cannot connect to {source}: {exc.strerror or exc}") from None


def ended_by_signal() -> bool:
    """Whether a stop signal ended ``run_on_ray`` (connecting, or while its tasks ran). A process
    that ends then should end at once (``os._exit`` once its line is out): ray.init may still be
    connecting in its thread (its C++ client can block a minute after a signal), and ending the
    interpreter normally with Ray loaded takes another half second."""
    return _SIGNALLED.is_set()


def run_on_ray(
    address: str,
    function: Callable[..., Outcome],
    tasks: list[Task],
    args: tuple[Any, ...],
    lost: Callable[[Task, str], Outcome],
    on_connect: Callable[[str], None] | None = None,
) -> Iterator[Outcome]:
    """``function(task, *args)`` for every task, each a one-CPU Ray task on the cluster at
    ``address`` (None or "auto": ``ray.init()``'s rule, see ``resolve_address``; ``on_connect``
    is told which cluster that is); yields outcomes as tasks finish (``lost(task, reason)`` for a
    task Ray could not run to its end). A stop signal raises its exception within
    ``_SIGNAL_SECONDS``, connecting or waiting, and ``ended_by_signal()`` says so after."""
    ray = ray_module()
    address, source = resolve_address(ray, address)
    check_reachable(address, source)
    if on_connect is not None:
        on_connect(source)
    try:
        _init(
            ray,
            address=address,
            logging_level=logging.WARNING,
            log_to_driver=False,
            include_dashboard=False,
            configure_logging=False,
        )
    except Exception as exc:  # ray.init's own failures include a bare Exception ("timed out during startup")
        raise ConverterError(f"cannot connect to {source}: {' '.join(str(exc).split())}") from None
    try:
        remote = ray.remote(num_cpus=1, max_retries=0)(function)
        pending = {remote.remote(task, *args): task for task in tasks}
        while pending:
            done = _wait_one(ray, list(pending))
            task = pending.pop(done)
            try:
                yield ray.get(done)
            except ray.exceptions.RayError as exc:
                yield lost(task, f"the Ray task failed: {type(exc).__name__}: {str(exc).splitlines()[0]}")
    except BaseException as exc:
        if not isinstance(exc, (Exception, GeneratorExit)):  # KeyboardInterrupt, or the command's for SIGTERM
            _SIGNALLED.set()
        raise
    finally:
        ray.shutdown()  # disconnects this driver; the cluster keeps running


def _wait_one(ray: ModuleType, refs: list[Any]) -> Any:
    """The next finished task's reference, looking up every ``_SIGNAL_SECONDS`` (inside Ray's
    wait a signal's exception surfaces late, and wrapped in a SystemError)."""
    while True:
        try:
            done, _ = ray.wait(refs, num_returns=1, timeout=_SIGNAL_SECONDS)
        except SystemError as exc:  # "returned a result with an exception set": the signal's
            raise _signal_in(exc) from None
        if done:
            return done[0]


def _init(ray: ModuleType, **options: Any) -> None:
    """``ray.init(**options)``. Connecting to a running cluster: in a thread of its own while this
    thread waits, a few hundredths of a second at a time, so that a stop signal (which that thread,
    and the threads it starts, block, so it comes here) raises here at once; in this thread
    ray.init could block in its C++ client for a minute after a signal
    (``GlobalStateAccessor.connect``), and it would replace the SIGTERM handler with its own.
    Starting a local cluster (address "local"): here, as Ray needs (from another thread its
    driver never reaches the GCS it started), and the command's signal handlers put back after.
    Raises what ray.init raised."""
    if options.get("address") == "local":
        previous = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
        try:
            ray.init(**options)
        except BaseException as exc:
            if not isinstance(exc, Exception):  # a signal while starting: end now, not after Ray's exit handler
                _SIGNALLED.set()
                atexit.unregister(ray.shutdown)
            raise
        finally:
            _restore_handlers(previous)
        return
    outcome: list[BaseException | None] = []
    done = threading.Event()
    quiet = _QuietNotMainThread()

    def connect() -> None:
        signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        try:
            ray.init(**options)
            outcome.append(None)
        except BaseException as exc:  # handed to the waiting thread
            outcome.append(exc)
        finally:
            if _SIGNALLED.is_set():  # nobody waits for this driver any more
                atexit.unregister(ray.shutdown)
            done.set()

    worker_log = logging.getLogger("ray._private.worker")
    worker_log.addFilter(quiet)
    thread = threading.Thread(target=connect, name="ray-init", daemon=True)
    thread.start()
    try:
        while not done.wait(_SIGNAL_SECONDS):
            pass
    except BaseException:  # a signal: end now; the connection is left to its thread
        _SIGNALLED.set()
        atexit.unregister(ray.shutdown)  # what Ray started for this driver is stopped by its reaper
        raise
    finally:
        worker_log.removeFilter(quiet)
    if outcome[0] is not None:
        raise outcome[0]


def _restore_handlers(previous: dict[signal.Signals, Any]) -> None:
    """Put back the stop signals' handlers ray.init replaced (its SIGTERM one calls sys.exit) where it
    could (in the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        return
    for signum, handler in previous.items():
        if handler is not None and signal.getsignal(signum) is not handler:
            signal.signal(signum, handler)


def _signal_in(exc: SystemError) -> BaseException:
    """The stop signal's exception (KeyboardInterrupt, or the command's BaseException for SIGTERM
    and SIGHUP) that a Cython call of Ray's wrapped in a SystemError; any other SystemError as it is."""
    for inner in (exc.__cause__, exc.__context__):
        if isinstance(inner, BaseException) and not isinstance(inner, Exception):
            return inner
    return exc


class _QuietNotMainThread(logging.Filter):
    """Drops ray.init's warning that it set no SIGTERM handler outside the main thread (on purpose:
    the command's own handler stays)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "SIGTERM handler is not set" not in record.getMessage()

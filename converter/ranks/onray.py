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
import socket
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any, TypeVar

from ..errors import ConverterError

_CONNECT_SECONDS = 3
Task = TypeVar("Task")
Outcome = TypeVar("Outcome")


def ray_module() -> ModuleType:
    """The ``ray`` package, or a ConverterError saying how to install it."""
    try:
        return importlib.import_module("ray")
    except ImportError:
        raise ConverterError("--ray needs Ray: pip install 'chakra-convert-fast[ray]'") from None


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


def run_on_ray(
    address: str, function: Callable[..., Outcome], tasks: list[Task], args: tuple[Any, ...],
    lost: Callable[[Task, str], Outcome], on_connect: Callable[[str], None] | None = None,
) -> Iterator[Outcome]:
    """``function(task, *args)`` for every task, each a one-CPU Ray task on the cluster at
    ``address`` (None or "auto": ``ray.init()``'s rule, see ``resolve_address``; ``on_connect``
is told which cluster that is); yields outcomes as tasks finish
    (``lost(task, reason)`` for a task Ray could not run to its end)."""
    ray = ray_module()
    address, source = resolve_address(ray, address)
    check_reachable(address, source)
    if on_connect is not None:
        on_connect(source)
    try:
        ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False,
                 include_dashboard=False, configure_logging=False)
    except (ConnectionError, RuntimeError, ValueError, TimeoutError) as exc:
        raise ConverterError(f"cannot connect to {source}: {' '.join(str(exc).split())}") from None
    except BaseException:  # a signal while connecting: end now, not after Ray's exit handler (~30 s);
        atexit.unregister(ray.shutdown)  # what Ray started for this driver is stopped by its reaper
        raise
    try:
        remote = ray.remote(num_cpus=1, max_retries=0)(function)
        pending = {remote.remote(task, *args): task for task in tasks}
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            task = pending.pop(done[0])
            try:
                yield ray.get(done[0])
            except ray.exceptions.RayError as exc:
                yield lost(task, f"the Ray task failed: {type(exc).__name__}: {str(exc).splitlines()[0]}")
    finally:
        ray.shutdown()  # disconnects this driver; the cluster keeps running

"""``convert-all --ray``: every rank a task on an existing Ray cluster, instead of a local process.

Ray is an optional extra (``pip install 'chakra-convert-fast[ray]'``), imported only when a
command asks for it (``import ray`` takes about a second, which every other command would pay).
The cluster's workers run the same function as the local processes (``convert_all._convert_rank``),
so a rank's output and its failure message are the same wherever it ran; a task that Ray itself
loses (a node gone) is reported as that rank's failure. Inputs and outputs are paths: every node
must see them at the same place (a shared file system, or an object store mounted as one).
"""

from __future__ import annotations

import importlib
import logging
import socket
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any, TypeVar

from ..errors import ConverterError

_CONNECT_SECONDS = 10
Task = TypeVar("Task")
Outcome = TypeVar("Outcome")


def ray_module() -> ModuleType:
    """The ``ray`` package, or a ConverterError saying how to install it."""
    try:
        return importlib.import_module("ray")
    except ImportError:
        raise ConverterError("--ray needs Ray: pip install 'chakra-convert-fast[ray]'") from None


def _reachable(address: str) -> None:
    """Fail at once where nothing listens at ``host:port`` (Ray would retry for many minutes)."""
    host, _, port = address.rpartition(":")
    if address == "auto" or not port.isdigit():
        return  # Ray finds the local cluster, or says there is none, by itself
    try:
        socket.create_connection((host.strip("[]") or "127.0.0.1", int(port)), timeout=_CONNECT_SECONDS).close()
    except OSError as exc:
        raise ConverterError(f"cannot connect to the Ray cluster at {address}: {exc.strerror or exc}") from None


def run_on_ray(
    address: str, function: Callable[..., Outcome], tasks: list[Task], args: tuple[Any, ...],
    lost: Callable[[Task, str], Outcome],
) -> Iterator[Outcome]:
    """``function(task, *args)`` for every task, each a one-CPU Ray task on the cluster at
    ``address`` ("auto": the one this machine is part of); yields outcomes as tasks finish
    (``lost(task, reason)`` for a task Ray could not run to its end)."""
    ray = ray_module()
    _reachable(address)
    try:
        ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False,
                 include_dashboard=False, configure_logging=False)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise ConverterError(f"cannot connect to the Ray cluster at {address}: {exc}") from None
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

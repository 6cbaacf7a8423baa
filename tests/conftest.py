"""Fixtures shared by the tests (the helpers they import live in ``tests/traces.py``), one per
external component, and the markers. A test module carries its own (``pytestmark`` for the whole
module, ``@pytest.mark.slow`` on a test); a fixture adds those of what it runs (``_FIXTURE_MARKERS``):

* ``astra_sim``: runs the real ASTRA-sim (the ``simulator`` fixture); skipped, with the reason,
  where ``ASTRA_SIM_HOME`` is unset, and failed where it is unset under CI;
* ``torch``: captures or imports torch (the ``captured`` fixture, the profiler's tests);
* ``ray``: starts or joins a Ray cluster;
* ``slow``: takes more than about a second and a half on a busy 2-core machine (a whole module:
  its tests together more than about fifteen seconds).

The fast lane, ``pytest -m "not (slow or astra_sim or torch or ray)"``, the developer's loop, runs
in under five minutes on 2 cores; CI runs everything.
"""

from __future__ import annotations

import os
import signal
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from .captures import Done, Run, capture

#: Markers a test gets from a fixture it takes (a module's own markers are its ``pytestmark``, a
#: test's its decorators).
_FIXTURE_MARKERS: dict[str, tuple[str, ...]] = {
    "simulator": ("astra_sim", "slow"),
    "captured": ("torch", "slow"),
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        names: set[str] = set()
        for fixture in getattr(item, "fixturenames", ()):
            names.update(_FIXTURE_MARKERS.get(fixture, ()))
        for name in sorted(names):
            item.add_marker(name)


@pytest.fixture(scope="session")
def simulator() -> Path:
    """The real ASTRA-sim's folder (``$ASTRA_SIM_HOME``, holding ``bin/``): skipped with the reason
    where it is unset, failed where it is unset in CI or holds no simulator."""
    root = os.environ.get("ASTRA_SIM_HOME")
    if not root and os.environ.get("CI"):
        pytest.fail("ASTRA_SIM_HOME is not set in CI: .ci/run sets it to ../shared/astra-sim")
    if not root:
        pytest.skip("ASTRA_SIM_HOME is not set: point it at ASTRA-sim's binaries (docs/getting-astra-sim.md)")
    if not (Path(root) / "bin" / "AstraSim_Analytical_Congestion_Unaware").is_file():
        pytest.fail(f"ASTRA_SIM_HOME={root} holds no bin/AstraSim_Analytical_Congestion_Unaware")
    return Path(root)


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Any attempt to reach the network (the hub) fails loudly; caches are the test's own."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise OSError("network access is disabled in this test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.setenv(var, "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf-datasets"))
    monkeypatch.setenv("CHAKRA_PROFILE_CACHE", str(tmp_path / "cache"))


@pytest.fixture(scope="session")
def captured(tmp_path_factory: pytest.TempPathFactory) -> Callable[[Run], Done]:
    """``captured(run)``: the run's chakra-profile outputs, captured on first use in this session."""
    done: dict[Run, Done] = {}

    def get(run: Run) -> Done:
        if run not in done:
            done[run] = capture(run, tmp_path_factory.mktemp(f"capture-{run.name}"))
        return done[run]

    return get


@pytest.fixture(autouse=True)
def _signal_mask_kept() -> Iterator[None]:
    """Each test ends with the signal mask it began with: a command line run in this process holds
    the stop signals blocked after its last commit, and a mask is inherited by every process a
    later test starts."""
    before = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    yield
    if signal.pthread_sigmask(signal.SIG_BLOCK, []) != before:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)

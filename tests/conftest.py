"""Fixtures shared by the tests (the helpers they import live in ``tests/traces.py``), one per
external component, and the markers each test gets from what it uses:

* ``astra_sim``: runs the real ASTRA-sim (the ``simulator`` fixture); skipped, with the reason,
  where ``ASTRA_SIM_HOME`` is unset, and failed where it is unset under CI;
* ``torch``: captures or imports torch (the ``captured`` fixture, the profiler's tests);
* ``ray``: starts or joins a Ray cluster;
* ``slow``: takes more than about five seconds on a 2-core machine, alone or (a whole module)
  with its module's other tests more than about fifteen.

The fast subset, ``pytest -m "not (slow or astra_sim or torch or ray)"``, runs in a few minutes.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from pathlib import Path

import pytest

from .captures import Done, Run, capture

#: Modules whose every test is marked so (the rest are marked by the fixtures they use).
_MODULE_MARKERS: dict[str, tuple[str, ...]] = {
    "test_ray": ("ray", "slow"),
    "test_profiler_capture": ("torch", "slow"),
    "test_profiler_tracing": ("torch", "slow"),
    "test_profiler_models": ("torch",),
    "test_profiler_data": ("torch",),
    "test_profiler_tokenizers": ("torch",),
    "test_profiler_experts": ("torch",),
    "test_profiler_memory": ("torch",),
    "test_fuzz": ("slow",),
    "test_signals": ("slow",),
    "test_parallel": ("slow",),
    "test_deep_trace": ("slow",),
    "test_bench_roofline": ("slow",),
    # each test takes a second or less, but together more than ~15 s (CPU, measured on 2 cores)
    "test_parity_real": ("slow",),
    "test_cli_bad_input": ("slow",),
    "test_output_locations": ("slow",),
    "test_scale": ("slow",),
    "test_cli_grammar": ("slow",),
    "test_repair": ("slow",),
    "test_check": ("slow",),
    "test_text": ("slow",),
    "test_kineto_bad_input": ("slow",),
}
_FIXTURE_MARKERS: dict[str, tuple[str, ...]] = {
    "simulator": ("astra_sim", "slow"),
    "captured": ("torch", "slow"),
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        owner = getattr(item, "module", None)  # a pytest.Function's module; other items have none
        module = owner.__name__.rsplit(".", 1)[-1] if owner is not None else ""
        names = set(_MODULE_MARKERS.get(module, ()))
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

"""Options and shared fixtures of the benchmark suite (run with ``pytest bench/``).

    pytest bench/ --benchmark-autosave --benchmark-storage=bench/results
    pytest bench/ --bench-sizes 10000,100000 --ref-max-nodes 100000

Traces are generated once per size and shape into a cache folder (``--bench-cache``, by default
under the system temp dir) and reused by later runs; nothing large goes into the repository.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

from chakra_convert_fast.fixtures.generate import generate_merged, make_config

REPO = Path(__file__).resolve().parents[1]


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("chakra-bench")
    group.addoption(
        "--ref-max-nodes",
        type=int,
        default=300_000,
        help="skip the reference converter above this many nodes (it needs ~10 KB per node)",
    )
    group.addoption(
        "--bench-sizes",
        default="10000,100000,1000000",
        help="comma list of trace sizes in nodes (default 10000,100000,1000000)",
    )
    group.addoption(
        "--bench-cache",
        default=os.path.join(tempfile.gettempdir(), "chakra-bench-traces"),
        help="folder for generated traces, reused between runs",
    )


_DEFAULT_STORAGE = "file://./.benchmarks"


@pytest.hookimpl(tryfirst=True)  # before pytest-benchmark reads its options
def pytest_configure(config: pytest.Config) -> None:
    """Save every benchmark run under bench/results unless told otherwise, so that the report
    below (and ``python -m bench.report``) always has the newest JSON."""
    if not getattr(config.option, "benchmark_only", False):
        return  # the documented run is `pytest bench/ --benchmark-only`; the CI gate saves nothing
    if not (config.option.benchmark_save or config.option.benchmark_autosave):
        config.option.benchmark_autosave = True
    if config.option.benchmark_storage == _DEFAULT_STORAGE:
        config.option.benchmark_storage = str(REPO / "bench" / "results")


@pytest.hookimpl(trylast=True)  # after pytest-benchmark has saved its JSON
def pytest_sessionfinish(session: pytest.Session) -> None:
    """Turn the run into bench/results/benchmark.md and .png when converter benchmarks ran."""
    bench = getattr(session.config, "_benchmarksession", None)
    if bench is None or not any(b.name.startswith("test_convert") for b in bench.benchmarks):
        return
    from bench import report

    report.main([])


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "size" in metafunc.fixturenames and "ranks" in metafunc.fixturenames:
        sizes = [int(s) for s in metafunc.config.getoption("--bench-sizes").split(",") if s.strip()]
        cases = [(n, r) for n in sizes for r in (2, 4)]
        metafunc.parametrize(("size", "ranks"), cases, ids=[f"gpt2-{r}rank-{_short(n)}" for n, r in cases])


def _short(n: int) -> str:
    return f"{n // 1_000_000}M" if n % 1_000_000 == 0 else f"{n // 1000}k" if n % 1000 == 0 else str(n)


@pytest.fixture(scope="session")
def trace_for(request: pytest.FixtureRequest) -> Callable[[int, int], tuple[Path, int]]:
    """``trace_for(nodes, ranks)`` -> (path of a plain-JSON GPT-2 DDP trace of rank 0, its node count)."""
    cache = Path(request.config.getoption("--bench-cache"))
    cache.mkdir(parents=True, exist_ok=True)

    def make(nodes: int, ranks: int) -> tuple[Path, int]:
        path = cache / f"gpt2_{ranks}rank_{nodes}.json"
        count_file = path.with_suffix(".count")
        if not (path.exists() and count_file.exists()):
            res = generate_merged(
                path, config=make_config("gpt2", layers=12, ranks=ranks, rank=0), nodes=nodes, seed=ranks
            )
            count_file.write_text(str(res.nodes))
        return path, int(count_file.read_text())

    return make


@pytest.fixture
def ref_max_nodes(request: pytest.FixtureRequest) -> int:
    return int(request.config.getoption("--ref-max-nodes"))

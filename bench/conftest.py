"""Options and shared fixtures of the benchmark suite (run with ``pytest bench/``).

    pytest bench/ --benchmark-only
    pytest bench/ --benchmark-only --bench-sizes 250000,1000000,3000000,10000000 --ref-max-nodes 1100000
    pytest bench/ --benchmark-only --bench-sizes 10000 --jobs-list 1,2 --ray-nodes 2000   # a smoke run

Traces (compact JSON, as ``fixtures.generate --compact`` writes them: ~1.2 KB a node) are
generated once per size and shape into a cache folder (``--bench-cache``, by default under the
system temp dir) and reused by later runs; nothing large goes into the repository.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

from chakra_convert_fast.fixtures.generate import generate_merged, make_config
from chakra_convert_fast.fixtures.pair import generate_pair

REPO = Path(__file__).resolve().parents[1]


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("chakra-bench")
    group.addoption(
        "--ref-max-nodes",
        type=int,
        default=1_100_000,
        help="skip the reference converter above this many nodes (it needs ~12 KB per node; it is "
        "also skipped where the machine has not that much memory available)",
    )
    group.addoption(
        "--bench-sizes",
        default="250000,1000000,3000000,10000000",
        help="comma list of trace sizes in nodes (default: the README's table, 250000,1000000,3000000,10000000; "
        "~15 GB of traces in --bench-cache; 10000,100000 for a quick look)",
    )
    group.addoption(
        "--jobs-list",
        default="1,2,4",
        help="--jobs values of the scaling benchmark (more than the machine's cores shows it does not degrade)",
    )
    group.addoption(
        "--scaling-nodes",
        type=int,
        default=0,
        help="trace size of the scaling benchmark (default: the largest --bench-sizes up to 1,000,000)",
    )
    group.addoption("--ray-ranks", type=int, default=16, help="ranks of the Ray benchmark (default 16)")
    group.addoption(
        "--ray-nodes", type=int, default=100_000, help="nodes per rank of the Ray benchmark (default 100,000)"
    )
    group.addoption(
        "--four-rank-max-nodes",
        type=int,
        default=1_000_000,
        help="the 4-rank shape only up to this size (the 2-rank one at every size)",
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
    if bench is None or not any(b.name.startswith(("test_convert", "test_jobs", "test_ray")) for b in bench.benchmarks):
        return
    from bench import report

    report.main([])


def _ints(text: str) -> list[int]:
    return [int(s) for s in text.split(",") if s.strip()]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    config = metafunc.config
    if "size" in metafunc.fixturenames and "ranks" in metafunc.fixturenames:
        four = config.getoption("--four-rank-max-nodes")
        cases = [(n, r) for n in _ints(config.getoption("--bench-sizes")) for r in (2, 4) if r == 2 or n <= four]
        metafunc.parametrize(("size", "ranks"), cases, ids=[f"gpt2-{r}rank-{_short(n)}" for n, r in cases])
    if "jobs" in metafunc.fixturenames and "packing" in metafunc.fixturenames:
        cases = [(j, p) for p in ("json", "gzip") for j in _ints(config.getoption("--jobs-list"))]
        metafunc.parametrize(("jobs", "packing"), cases, ids=[f"{p}-jobs{j}" for j, p in cases])


def _short(n: int) -> str:
    return f"{n // 1_000_000}M" if n % 1_000_000 == 0 else f"{n // 1000}k" if n % 1000 == 0 else str(n)


@pytest.fixture(scope="session")
def trace_for(request: pytest.FixtureRequest) -> Callable[..., tuple[Path, int]]:
    """``trace_for(nodes, ranks, gz=False)`` -> (path of a compact JSON (or gzipped) GPT-2 DDP
    trace of rank 0, its node count)."""
    cache = Path(request.config.getoption("--bench-cache"))
    cache.mkdir(parents=True, exist_ok=True)

    def make(nodes: int, ranks: int, gz: bool = False) -> tuple[Path, int]:
        path = cache / f"gpt2_{ranks}rank_{nodes}.compact.json{'.gz' if gz else ''}"
        count_file = cache / f"gpt2_{ranks}rank_{nodes}.compact{'.gz' if gz else ''}.count"
        if not (path.exists() and count_file.exists()):
            res = generate_merged(
                path,
                config=make_config("gpt2", layers=12, ranks=ranks, rank=0),
                nodes=nodes,
                seed=ranks,
                indent=None,
                gz=gz,
            )
            count_file.write_text(str(res.nodes))
        return path, int(count_file.read_text())

    return make


@pytest.fixture(scope="session")
def scaling_nodes(request: pytest.FixtureRequest) -> int:
    chosen = int(request.config.getoption("--scaling-nodes"))
    sizes = [n for n in _ints(request.config.getoption("--bench-sizes")) if n <= 1_000_000]
    return chosen or max(sizes, default=100_000)


@pytest.fixture(scope="session")
def pair_job(request: pytest.FixtureRequest) -> tuple[Path, int, int]:
    """(folder of ``--ray-ranks`` generated host + Kineto pairs of ``--ray-nodes`` nodes each, ranks,
    nodes per rank), made once and cached."""
    ranks, nodes = int(request.config.getoption("--ray-ranks")), int(request.config.getoption("--ray-nodes"))
    folder = Path(request.config.getoption("--bench-cache")) / f"pairs_{ranks}x{nodes}"
    done = folder / ".complete"
    if not done.exists():
        for rank in range(ranks):
            generate_pair(
                folder,
                config=make_config("gpt2", layers=12, ranks=ranks, rank=rank),
                nodes=nodes,
                seed=rank,
                indent=None,
            )
        done.write_text("ok")
    return folder, ranks, nodes


@pytest.fixture
def ref_max_nodes(request: pytest.FixtureRequest) -> int:
    return int(request.config.getoption("--ref-max-nodes"))

"""``simulate --ranks N``: the reduced job (a few replicas on a network whose last dimension's
latency and bandwidth are adjusted) against the full N-rank job, both run in the real ASTRA-sim
(``ASTRA_SIM_HOME``; skipped with the reason where unset, failing under CI): the same job step
within 0.1% and each captured rank's communication time within 1%, at 8 and 64 ranks. The real
2-rank GPT-2 DDP capture (tests/data/traces/cpu_gpt2_ddp2), compacted (12 nodes a rank). Larger
widths: bench/reduced_equivalence.py. Without the simulator: when the reduced job is refused."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from chakra_convert_fast.converter import ConvertOptions, api
from chakra_convert_fast.converter.errors import ConverterError
from chakra_convert_fast.converter.simulate import allreduce, configs, meshreduced, reduced
from chakra_convert_fast.converter.simulate.job import find_job
from chakra_convert_fast.converter.simulate.setup import make_setup
from chakra_convert_fast.converter.simulate.width import _resize, check_width, plan_for

from .clirun import run_cli
from .simjobs import write_job
from .traces import REAL_TRACES_DIR

SYSTEM = configs.system_config(1, None)


@pytest.fixture(scope="module")
def capture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The GPT-2 DDP capture (2 CPU ranks) converted and compacted: ``trace.0.et``, ``trace.1.et``."""
    out = tmp_path_factory.mktemp("ddp2")
    result = api.convert_all(REAL_TRACES_DIR / "cpu_gpt2_ddp2", out, ConvertOptions(compact=True))
    assert not result.failed
    return out / "trace"


def _compare(
    prefix: Path, ranks: int, topology: str, npus_per_dim: str | None = None, collective: str | None = None
) -> tuple[api.SimulationResult, api.SimulationResult]:
    options = api.SimulateOptions(topology=topology, npus_per_dim=npus_per_dim, collective=collective)
    small = api.simulate(prefix, options, ranks=ranks)
    full = api.simulate(prefix, options, ranks=ranks, exact=True)
    assert full.plan is not None and not full.plan.reduced and len(full.ranks) == ranks
    assert small.plan is not None and small.plan.reduced and len(small.ranks) < ranks
    assert not small.warnings and not full.warnings
    assert small.modelled_ranks == full.modelled_ranks == ranks
    assert abs(small.step_ns - full.step_ns) <= 0.001 * full.step_ns
    width = len(small.ranks)
    for rank in range(width):  # simulated rank r stands for every rank r + j * width of the full job
        mine, theirs = small.ranks[rank], full.ranks[rank]
        assert abs(mine.comm_ns - theirs.comm_ns) <= 0.01 * theirs.comm_ns, (rank, mine, theirs)
        assert abs(mine.step_ns - theirs.step_ns) <= 0.001 * theirs.step_ns
        # which do the same in the full job (the same place in the earlier dimensions, the same captured rank)
        assert {r.step_ns for r in full.ranks[rank::width]} == {theirs.step_ns}
    return small, full


@pytest.mark.parametrize(
    ("topology", "sizes"), [("Ring,Switch", "8,*"), ("Switch,Ring", "2,*"), ("FullyConnected,Ring", "4,*")]
)
def test_reduced_equals_full_at_64_ranks(simulator: Path, capture: Path, topology: str, sizes: str) -> None:
    """One captured rank a ring of the last dimension: the reduced job's last dimension is 2 NPUs,
    and every rank's step and communication are the full job's to a few ns (ASTRA-sim's rounding
    of each message to whole ns, which the fitted link matches on average)."""
    small, full = _compare(capture, 64, topology, sizes)
    assert small.plan is not None and small.plan.simulated_ranks == 64 // full.network.npus[-1] * 2
    for mine, theirs in zip(small.ranks[:2], full.ranks[:2], strict=True):
        assert abs(mine.step_ns - theirs.step_ns) <= 50 and abs(mine.comm_ns - theirs.comm_ns) <= 50


@pytest.mark.parametrize("topology", ["Ring", "Switch"])
def test_reduced_ring_of_both_captured_ranks(simulator: Path, capture: Path, topology: str) -> None:
    """Both captured ranks on one ring (a single dimension): a ring of 64 stands for 128."""
    small, _ = _compare(capture, 128, topology)
    assert small.plan is not None and small.plan.simulated_ranks == 64


def test_reduced_equals_full_at_8_ranks(simulator: Path, capture: Path) -> None:
    small, full = _compare(capture, 8, "Ring,Switch", "2,*")
    assert len(small.ranks) == 4 and abs(small.step_ns - full.step_ns) <= 50
    assert all(abs(a.comm_ns - b.comm_ns) <= 50 for a, b in zip(small.ranks[:2], full.ranks[:2], strict=True))


def test_a_ring_of_64_runs_full_and_says_why(simulator: Path, capture: Path) -> None:
    result = api.simulate(capture, api.SimulateOptions(topology="Ring"), ranks=64)
    assert result.plan is not None and not result.plan.reduced and len(result.ranks) == 64
    assert "no wider than a reduced one (64)" in result.plan.describe()


def test_small_collectives_keep_the_full_jobs_chunks(simulator: Path, capture: Path, tmp_path: Path) -> None:
    """ASTRA-sim raises a chunk smaller than the job's NPU count to that count: the reduced job's
    collectives are resized so that their chunks are the full job's."""
    for rank in (0, 1):
        shutil.copy(f"{capture}.{rank}.et", tmp_path / f"small.{rank}.et")
    _resize(str(tmp_path / "small"), 2, {1056768: 100, 1063936: 5000})
    small, _ = _compare(tmp_path / "small", 64, "Ring,Switch", "4,*")
    assert small.plan is not None and small.plan.resize == ((100, 256),)  # 5000 bytes: chunks of 1,250


def test_cli_says_which_job_ran(simulator: Path, capture: Path, tmp_path: Path) -> None:
    done = run_cli("simulate", capture, "--ranks", "1048576", "--topology", "Switch", "--json", tmp_path / "r.json")
    assert done.returncode == 0, done.stderr
    assert "1,048,576 rank(s) on Switch 1048576" in done.stdout
    assert "ran: 64 ranks on Switch 64" in done.stdout and "equivalent to 1,048,576 on Switch 1048576" in done.stdout
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["ranks"] == 1 << 20 and data["simulated_ranks"] == 64 and data["simulated_as"]["reduced"]
    assert data["network"]["npus_per_dim"] == [1 << 20] and data["simulated_as"]["network"]["npus_per_dim"] == [64]
    done = run_cli("simulate", capture, "--ranks", "3")  # what scale takes (issue 40): the full job, and why
    assert done.returncode == 0 and "3 rank(s) on Ring 3" in done.stdout, done.stderr
    assert "not a reduced one: 3 is not a multiple of the 2 captured ranks; it runs compacted" in done.stderr
    assert (
        "in ASTRA-sim here (3 ranks x 12 nodes" in done.stderr and "a multiple of 2 gets a reduced job" in done.stderr
    )


# -- without the simulator: the choice ------------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "backend", "expected"),
    [
        ({}, "aware", "the congestion-aware backend"),
        ({"pg_name": "1", "groups": {"1": [0]}}, "unaware", "on communicator group 1, not every rank"),
    ],
)
def test_what_runs_full(tmp_path: Path, kwargs: dict[str, object], backend: str, expected: str) -> None:
    prefix = write_job(tmp_path / "job", 2, **kwargs)  # type: ignore[arg-type]
    job = find_job(str(prefix))
    network = configs.network("Switch", 64)
    setup = make_setup(1, None)
    chosen = plan_for(job, network, 64, backend, setup, exact=False)
    assert not chosen.reduced and expected in chosen.describe()
    assert not plan_for(job, network, 64, "unaware", setup, exact=True).reduced


@pytest.mark.parametrize("algorithm", ["halvingDoubling", "direct", "doubleBinaryTree"])
def test_other_algorithms_before_the_last_dimension_reduce_exactly(
    simulator: Path, capture: Path, algorithm: str
) -> None:
    """Only the last dimension is reduced: the earlier ones run the same NPUs and bytes whatever
    their algorithm (doubleBinaryTree all-reduces there, so the last dimension gets whole chunks)."""
    small, full = _compare(capture, 64, "Ring,Switch", "8,*", f"{algorithm},ring")
    assert small.plan is not None and f"({algorithm} on the others, unchanged)" in small.plan.reason
    for mine, theirs in zip(small.ranks[:2], full.ranks[:2], strict=True):
        assert abs(mine.step_ns - theirs.step_ns) <= 50 and abs(mine.comm_ns - theirs.comm_ns) <= 50


@pytest.mark.parametrize(
    ("algorithm", "why"),
    [
        ("direct", "direct all-reduce with 2 captured ranks a group: modelled with one"),
        ("doubleBinaryTree", "the last dimension's all-reduce is doubleBinaryTree"),
        ("oneDirect", "direct all-reduce with 2 captured ranks a group"),
        ("halvingDoubling", "halving-doubling over the last dimension (8 NPUs, 2 captured ranks a group)"),
    ],
)
def test_other_algorithms_on_the_last_dimension_run_full_and_warn(
    simulator: Path, capture: Path, algorithm: str, why: str
) -> None:
    """No reduced job is proven for them there: the full job runs (the same result as --exact),
    with a one-line warning that says why and what to do."""
    options = api.SimulateOptions(topology="Switch", collective=algorithm)
    result = api.simulate(capture, options, ranks=8)
    exact = api.simulate(capture, options, ranks=8, exact=True)
    assert result.plan is not None and not result.plan.reduced and len(result.ranks) == 8
    assert [r.step_ns for r in result.ranks] == [r.step_ns for r in exact.ranks]
    assert [r.comm_ns for r in result.ranks] == [r.comm_ns for r in exact.ranks]
    (warning,) = result.warnings
    assert "\n" not in warning and why in warning
    assert "`collective` ring" in warning and "`exact`" in warning and not exact.warnings  # the API's names


@pytest.mark.parametrize(("algorithm", "topology"), [("oneRing", "Switch"), ("oneHalvingDoubling", "Ring")])
def test_one_dimension_variants(simulator: Path, tmp_path: Path, algorithm: str, topology: str) -> None:
    """oneRing (oneHalvingDoubling) over a network of one dimension is the same ring (halving-
    doubling: GeneralComplexTopology); one captured rank: every NPU of the group does the same."""
    prefix = write_job(tmp_path / "job", 1, comm_bytes=3 << 20)
    small, full = _compare(prefix, 64, topology, collective=algorithm)
    assert small.plan is not None and small.plan.simulated_ranks == 2
    assert abs(small.ranks[0].step_ns - full.ranks[0].step_ns) <= 50


@pytest.mark.parametrize("topology", ["Ring", "Switch"])
def test_direct_over_one_dimension_reduces(simulator: Path, capture: Path, tmp_path: Path, topology: str) -> None:
    """One captured rank (rank 0 of the capture): the direct all-reduce's n-1 messages of c/n go at
    once; 2 NPUs with each collective resized to chunks of 2 c/n send the same messages, the
    farthest peer's latency kept (a Ring of 64: 32 hops)."""
    shutil.copy(f"{capture}.0.et", tmp_path / "one.0.et")
    small, full = _compare(tmp_path / "one", 64, topology, collective="direct")
    assert small.plan is not None and small.plan.simulated_ranks == 2 and small.plan.resize
    assert small.plan.network is not None and small.plan.network.latency == (500.0 * (32 if topology == "Ring" else 1),)
    assert small.ranks[0].step_ns == full.ranks[0].step_ns and small.ranks[0].comm_ns == full.ranks[0].comm_ns


@pytest.mark.parametrize(("topology", "sizes"), [("Switch,Ring", "2,*"), ("Ring,FullyConnected", "4,*")])
def test_halving_doubling_on_the_last_dimension_reduces(
    simulator: Path, capture: Path, topology: str, sizes: str
) -> None:
    """One captured rank a group of the last dimension, a power of two: its log2(n) messages each way
    (on a Ring, the partner at offset d is d hops away) timed by a halving-doubling of 2 NPUs."""
    small, full = _compare(capture, 64, topology, sizes, "ring,halvingDoubling")
    assert small.plan is not None and small.plan.reason.startswith("halvingDoubling all-reduce over the last")
    for mine, theirs in zip(small.ranks, full.ranks, strict=False):
        assert abs(mine.step_ns - theirs.step_ns) <= 50 and abs(mine.comm_ns - theirs.comm_ns) <= 50


@pytest.mark.parametrize(
    ("algorithms", "topology", "expected"),
    [
        (["direct"], "Ring", "direct all-reduce with 2 captured ranks a group"),
        (["ring", "direct"], "Ring,Switch", "direct all-reduce over the last of several dimensions"),
        (["direct8"], "Ring", "direct8: a window below the group (1,024 NPUs) is not modelled"),
        (["doubleBinaryTree"], "Switch", "models ring, halvingDoubling and direct there (a tree: each rank finishes"),
        (["oneRing", "ring"], "Ring,Switch", "oneRing runs one logical ring over every NPU of the 2 dimensions"),
        (["ring"], "Ring,Switch", "one algorithm a network dimension"),
        (["ring", "halvingDoubling"], "Ring,Switch:8,96", "(96 NPUs, NPUs not a power of two)"),
    ],
)
def test_algorithms_not_modelled_run_full(tmp_path: Path, algorithms: list[str], topology: str, expected: str) -> None:
    job = find_job(str(write_job(tmp_path / "job", 2)))
    name, _, sizes = topology.partition(":")
    network = configs.network(name, 768 if sizes else 1024, sizes or ("8,*" if "," in name else None))
    system = dict(configs.system_config(len(network.npus), None), **{"all-reduce-implementation": algorithms})
    chosen = reduced.plan(job, network, network.npus[0] * network.npus[-1], system, "unaware")
    assert not chosen.reduced and expected in chosen.reason
    assert chosen.warning is not None and "a ring on the last dimension gets a reduced job" in chosen.warning


def test_custom_collectives_run_full(tmp_path: Path) -> None:
    job = find_job(str(write_job(tmp_path / "job", 2)))
    system = dict(SYSTEM, **{"all-reduce-implementation-custom": ["my.et"]})
    chosen = reduced.plan(job, configs.network("Ring", 1024), 1024, system, "unaware")
    assert not chosen.reduced and "custom collectives are not modelled" in chosen.reason


def test_no_warning_where_the_full_job_is_asked_for_or_small(tmp_path: Path) -> None:
    job = find_job(str(write_job(tmp_path / "job", 2)))
    setup = make_setup(1, None)
    assert plan_for(job, configs.network("Ring", 64), 64, "unaware", setup, exact=True).warning is None
    small = plan_for(job, configs.network("Ring", 64), 64, "unaware", setup, exact=False)
    assert not small.reduced and small.warning is None  # no wider than a reduced ring: nothing lost
    assert plan_for(job, configs.network("Ring", 64), 64, "aware", setup, exact=False).warning is not None


def test_a_wide_full_job_runs_only_when_asked_for(tmp_path: Path) -> None:
    """Past 8,192 ranks a full job that no reduced one stands for is refused (hours in ASTRA-sim)
    unless --exact asks for it; up to there it runs with the warning."""
    job = find_job(str(write_job(tmp_path / "job", 2)))
    setup = make_setup(1, None, collective="doubleBinaryTree")
    assert plan_for(job, configs.network("Switch", 8192), 8192, "unaware", setup, exact=False).warning
    with pytest.raises(ConverterError) as refused:
        plan_for(job, configs.network("Switch", 16384), 16384, "unaware", setup, exact=False)
    assert "`ranks` 16,384: no reduced job stands for it (" in str(refused.value)
    assert "it runs only with `exact`; a ring on the last dimension gets a reduced job" in str(refused.value)
    assert not plan_for(job, configs.network("Switch", 16384), 16384, "unaware", setup, exact=True).reduced


# -- FSDP, tensor and pipeline parallelism: the full job, said ---------------------------------------
LAYOUTS = Path(__file__).parent / "data" / "layouts"


@pytest.mark.parametrize(
    ("case", "kind", "collective", "topology", "what"),
    [
        ("tp2fsdp", "an FSDP 2 x tensor-parallel 2 job", "direct", "Switch", "modelled for the ring"),
        ("pp2", "a data-parallel 2 x pipeline-parallel 2 job", None, "Ring", "rings' way back (3 x 1 ranks)"),
    ],
)
def test_layout_jobs_run_full_and_say_why(
    simulator: Path,
    monkeypatch: pytest.MonkeyPatch,
    case: str,
    kind: str,
    collective: str | None,
    topology: str,
    what: str,
) -> None:
    """The real 4-rank captures (tests/data/layouts) at 8 ranks where no reduced layout job is
    modelled (tests/test_reduced_layouts.py has those that are; the reduced width lowered to 2
    replicas so that 8 ranks would reduce): the full job, written by scale's layout rules (proven
    against the real 8-rank captures: test_layouts), the same as --exact."""
    monkeypatch.setattr(meshreduced, "STEPS_PER_EXTRA_CLASS", 1)
    options = api.SimulateOptions(topology=topology, collective=collective)
    result = api.simulate(LAYOUTS / f"{case}_np4" / "job", options, ranks=8)
    exact = api.simulate(LAYOUTS / f"{case}_np4" / "job", options, ranks=8, exact=True)
    assert result.plan is not None and not result.plan.reduced and len(result.ranks) == 8
    assert result.step_ns == exact.step_ns
    warning = next(w for w in result.warnings if "not a reduced one" in w)
    assert f"{kind} (its layout file)" in warning and what in warning, warning
    assert "a layout job has a reduced job on" in warning


def test_layout_jobs_scale_by_tensor_times_pipeline(tmp_path: Path) -> None:
    """A layout's data-parallel degree may be any (N / (TP x PP), as scale makes it), not only a
    multiple of the captured one."""
    job = find_job(str(LAYOUTS / "tp2fsdp_np4" / "job"))
    check_width(job, 6)  # data-parallel 3
    for bad in (5, 2):
        with pytest.raises(ConverterError, match="scales to a multiple of 2"):
            check_width(job, bad)


def test_one_captured_rank_reduces_to_two(tmp_path: Path) -> None:
    job = find_job(str(write_job(tmp_path / "job", 1)))
    chosen = reduced.plan(job, configs.network("Ring", 1024), 1024, SYSTEM, "unaware")
    assert chosen.network is not None and chosen.network.npus == (2,) and chosen.worst_error < 1e-3


@pytest.mark.parametrize("n", [64, 1024, 1 << 20])
@pytest.mark.parametrize("topology", ["Ring", "Switch"])
def test_the_model_times_the_reduced_ring_as_the_full_one(n: int, topology: str) -> None:
    hops = allreduce.HOPS[topology]
    for k in (2, 16):
        fitted = allreduce.fit_group(n, k, hops, 500.0, 50.0, [n, n + 1, 1 << 21, 1 << 26], 10, 1600.0)
        assert fitted is not None
        latency, bandwidth, error = fitted
        assert latency > 500 and 0 < bandwidth < 50 and error < 1e-3


def test_sweep_takes_the_same_path(simulator: Path, capture: Path, tmp_path: Path) -> None:
    """A sweep's point runs the reduced job where one is proven (its equality: the tests above)."""
    done = run_cli("simulate", capture, "--sweep", "ranks=128", "--topology", "Switch", "--out", tmp_path / "s")
    assert done.returncode == 0, done.stderr
    point = json.loads((tmp_path / "s.json").read_text())["points"][0]
    assert point["simulated_ranks"] == 64 and "equivalent to 128 on Switch 128" in point["simulated_as"]
    assert "| 64 (reduced) |" in (tmp_path / "s.md").read_text()


def test_sweep_says_where_the_full_job_ran_for_want_of_a_reduced_one(
    simulator: Path, capture: Path, tmp_path: Path
) -> None:
    out = tmp_path / "s"
    args = ("--topology", "Switch", "--collective", "doubleBinaryTree", "--out", out)
    done = run_cli("simulate", capture, "--sweep", "ranks=2,8", *args)
    assert done.returncode == 0, done.stderr
    warned = [x for x in done.stderr.splitlines() if "warning" in x and "ranks differ in compute" not in x]
    (line,) = warned  # the captured width: none
    assert "8 ranks on Switch 8: the full job of 8 ranks ran" in line and "doubleBinaryTree" in line
    assert "(--collective ring," in line and "; --exact runs it" in line and "`" not in line  # the flags
    points = json.loads(out.with_suffix(".json").read_text())["points"]
    assert [bool(p["warning"]) for p in points] == [False, True]


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"preferred-dataset-splits": None}, "preferred-dataset-splits is None"),
        ({"model-shared-bus": 1}, "model-shared-bus is not modelled"),
        ({"boost-mode": 1}, "boost-mode is not modelled"),
    ],
)
def test_system_configurations_not_modelled_run_full(tmp_path: Path, change: dict[str, object], expected: str) -> None:
    job = find_job(str(write_job(tmp_path / "job", 2)))
    chosen = reduced.plan(job, configs.network("Ring", 1024), 1024, {**SYSTEM, **change}, "unaware")
    assert not chosen.reduced and expected in chosen.reason


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"collective": "direct"}, "direct all-reduce with 2 captured ranks a group: modelled with one"),
        ({"collective": "halvingDoubling"}, "(1,024 NPUs, 2 captured ranks a group)"),
        ({"collective": "doubleBinaryTree"}, "the last dimension's all-reduce is doubleBinaryTree"),
        ({"active_chunks": 2}, "active-chunks-per-dimension 2: only 1 is proven"),
    ],
)
def test_simulate_options_not_modelled_run_full(tmp_path: Path, kwargs: dict[str, object], expected: str) -> None:
    job = find_job(str(write_job(tmp_path / "job", 2)))
    setup = make_setup(1, None, **kwargs)  # type: ignore[arg-type]
    chosen = plan_for(job, configs.network("Switch", 1024), 1024, "unaware", setup, exact=False)
    assert not chosen.reduced and expected in chosen.reason


def test_a_network_file_of_n_ranks_gives_the_reduced_job_its_own(
    simulator: Path, capture: Path, tmp_path: Path
) -> None:
    (tmp_path / "net.yml").write_text(
        "topology: [ Ring, Switch ]\nnpus_count: [ 8, 16 ]\nbandwidth: [ 50, 50 ]\nlatency: [ 500, 500 ]\n"
    )
    options = api.SimulateOptions(network_config=str(tmp_path / "net.yml"))
    small = api.simulate(capture, options, ranks=128)
    full = api.simulate(
        capture, api.SimulateOptions(topology="Ring,Switch", npus_per_dim="8,16"), ranks=128, exact=True
    )
    assert small.plan is not None and small.plan.simulated_ranks == 16
    assert abs(small.step_ns - full.step_ns) <= 50

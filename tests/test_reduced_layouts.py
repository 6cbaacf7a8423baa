"""``simulate --ranks N`` of a layout job (TP, PP, FSDP or DDP in sub-groups; the real captures of
tests/data/layouts): the reduced job (one block of the mesh, ``simulate/meshreduced.py``) against
the full N-rank job, both run in the real ASTRA-sim (``ASTRA_SIM_HOME``): the same job step within
0.1% and each rank's communication within 1% (the data-parallel width lowered to 4 replicas here
so that 32 ranks reduce; its rank-to-rank waits are then the largest: docs/reduced.md). Wider:
bench/reduced_layouts.py. Without the simulator: what is planned, and what runs full and why."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.reduced_layouts import all_to_all_job
from chakra_convert_fast.converter import api
from chakra_convert_fast.converter.ranks import layoutscale
from chakra_convert_fast.converter.schema.chakra import CollectiveCommType
from chakra_convert_fast.converter.simulate import configs, fullcost, meshreduced, reduced
from chakra_convert_fast.converter.simulate.job import find_job
from chakra_convert_fast.converter.simulate.setup import make_setup
from chakra_convert_fast.converter.simulate.width import plan_for

LAYOUTS = Path(__file__).parent / "data" / "layouts"


def _pairs(prefix: Path, reduced: int, full: int) -> list[tuple[int, int]]:
    """(reduced rank, full rank) at the same (p, d, t) of the mesh, d below the reduced degree."""
    mesh = layoutscale.read_layout(f"{prefix}.layout.json").mesh
    block = mesh.tp * mesh.pp
    small, big = layoutscale.Mesh(reduced // block, mesh.tp, mesh.pp), layoutscale.Mesh(full // block, mesh.tp, mesh.pp)
    return [(r, big.rank(*small.coords(r))) for r in range(reduced)]


@pytest.mark.parametrize(
    ("case", "topology"),
    [
        ("tp2fsdp_np4", "Switch"),  # TP 2 x FSDP: all-gathers and reduce-scatters over the DP dimension
        ("tp2fsdp_np4", "Ring"),
        ("fsdp_np2", "Ring"),  # FSDP alone: its DP group is every rank
        ("pp2_np4", "Switch"),  # PP 2 x DDP: sends and receives along the stages
        ("tp2ddp_np4", "FullyConnected"),
        ("tp2pp2_np8", "Switch"),  # TP 2 x PP 2 x DDP
        ("tp2fsdp_np4", "Ring,Switch:4,*"),  # two network dimensions: every ring crosses the first alike
    ],
)
def test_reduced_layout_job_equals_the_full_one(
    simulator: Path, monkeypatch: pytest.MonkeyPatch, case: str, topology: str
) -> None:
    monkeypatch.setattr(meshreduced, "STEPS_PER_EXTRA_CLASS", 4)
    prefix = LAYOUTS / case / "job"
    name, _, sizes = topology.partition(":")
    options = api.SimulateOptions(topology=name, npus_per_dim=sizes or None)
    small = api.simulate(prefix, options, ranks=32)
    full = api.simulate(prefix, options, ranks=32, exact=True, compact=True)
    assert small.plan is not None and small.plan.reduced and small.plan.mesh is not None
    assert full.plan is not None and not full.plan.reduced and len(full.ranks) == 32
    assert len(small.ranks) < 32 and not small.warnings
    assert abs(small.step_ns - full.step_ns) <= 0.001 * full.step_ns, (small.step_ns, full.step_ns)
    pairs = _pairs(prefix, len(small.ranks), 32)
    assert [r.rank for r in small.ranks] == [theirs for _, theirs in pairs]  # named as in the N-rank job
    for mine, theirs in pairs:
        a, b = small.ranks[mine], full.ranks[theirs]
        assert abs(a.comm_ns - b.comm_ns) <= 0.01 * b.comm_ns, (mine, theirs, a.comm_ns, b.comm_ns)
        assert abs(a.step_ns - b.step_ns) <= 0.001 * b.step_ns


@pytest.mark.parametrize("ranks", [8192, 1 << 20])
def test_wide_layout_jobs_plan_one_block(ranks: int) -> None:
    """A TP 2 x FSDP job at 8,192 and 1,048,576 ranks: 2 x 64 ranks, each network dimension a mesh
    dimension (TP at the full job's hop latency, DP's steps fitted), never refused."""
    job = find_job(str(LAYOUTS / "tp2fsdp_np4" / "job"))
    network = configs.network("Ring", ranks)
    chosen = plan_for(job, network, ranks, "unaware", make_setup(1, None), exact=False)
    assert chosen.reduced and chosen.network is not None and chosen.mesh is not None
    assert chosen.network.npus == (2, 64) and chosen.network.latency[0] == network.latency[0]
    assert chosen.network.latency[1] > network.latency[0] * (ranks // 2 - 1) / 63
    assert chosen.mesh.ranks == 128 and chosen.mesh.bytes_ranks == ranks and chosen.worst_error < 1e-4
    block = chosen.as_json()["layout_block"]
    assert block["ranks"] == 128 and block["fsdp_bytes_at_ranks"] == ranks
    # DP collectives fitted; the TP all-reduces' chunks (65,536 bytes / 4) raised to N where below it
    expected = {"dp", "tp"} if ranks > 65536 // 4 else {"dp"}
    assert {dim for dim, *_ in block["resized_collectives"]} == expected
    assert chosen.warning is None


def test_resized_chunks_time_the_full_ring() -> None:
    """Each data-parallel collective's chunk, resized for 64 NPUs, takes the 4,096-NPU ring's time
    to a few ns (ASTRA-sim's rounding: one ns a message at most)."""
    n, k, hop, bw, bus, mem = 4096, 64, 1000.0, 50.0, 10, 1600.0
    latency = (n - 1) * (hop + bus) / (k - 1) - bus
    for kind in (CollectiveCommType.ALL_GATHER, CollectiveCommType.REDUCE_SCATTER, CollectiveCommType.ALL_REDUCE):
        for chunk in (4096, 12_345, 1 << 20, 3 << 24):
            target = meshreduced.ring_ns(kind, n, hop, bw, chunk, bus, mem)
            new = meshreduced._resized_chunk(target, kind, k, latency, bw, bus, mem, 1)
            assert abs(meshreduced.ring_ns(kind, k, latency, bw, new, bus, mem) - target) <= 5 * 2 * (k - 1)


@pytest.mark.parametrize(
    ("topology", "backend", "collective", "why"),
    [
        ("Switch", "aware", None, "congestion-aware backend"),
        ("Switch", "unaware", "direct", "sub-group collectives are modelled for the ring"),
    ],
)
def test_what_runs_full_says_why(topology: str, backend: str, collective: str | None, why: str) -> None:
    job = find_job(str(LAYOUTS / "tp2fsdp_np4" / "job"))
    network = configs.network(topology, 1024, "2,512" if "," in topology else None)
    setup = make_setup(len(network.npus), None, collective=collective)
    chosen = plan_for(job, network, 1024, backend, setup, exact=False)
    assert not chosen.reduced and chosen.warning is not None
    assert why in chosen.warning and "an FSDP 2 x tensor-parallel 2 job (its layout file)" in chosen.warning


def test_links_follow_the_first_differing_dimension() -> None:
    """A message between ranks a stride apart crosses the lowest dimension where their addresses
    differ (MultiDimTopology::send): the lowest non-zero digit of the stride."""
    network = configs.network("Ring,Switch", 64, "8,8", "100,50", "500,900")
    assert meshreduced.link(network, 2) == (1000.0, 100.0, 0)  # 2 hops round the Ring of 8
    assert meshreduced.link(network, 62) == (1000.0, 100.0, 0)  # digit 6: 2 hops the other way
    assert meshreduced.link(network, 8) == (1800.0, 50.0, 1)  # through the Switch
    assert meshreduced.link(network, 24) == (1800.0, 50.0, 1)


def test_pipeline_on_a_ring_runs_full() -> None:
    """PP on one Ring: a data-parallel ring's way back crosses the other stages ((D-1) x TP hops):
    not modelled, said."""
    job = find_job(str(LAYOUTS / "pp2_np4" / "job"))
    chosen = plan_for(job, configs.network("Ring", 1024), 1024, "unaware", make_setup(1, None), exact=False)
    assert not chosen.reduced and chosen.warning is not None and "pipeline-parallel 2" in chosen.warning
    # the full job runs compacted, and the warning says how long it should take (nodes x ranks)
    assert "it runs compacted (the same simulated time), about " in chosen.warning
    assert "in ASTRA-sim here (1,024 ranks x 24 nodes, 1 collective over about 512 ranks each)" in chosen.warning


def test_full_job_estimate_counts_nodes_and_messages() -> None:
    """N x (nodes + splits x (collectives x 2(g-1) + all-to-alls x g(g-1)/2)) events: within a
    factor of the measured full runs here (TP 2 x FSDP at 1,024 ranks: 140 s)."""
    job = find_job(str(LAYOUTS / "tp2fsdp_np4" / "job"))
    seconds, nodes, collectives = fullcost.full_job_seconds(job, 1024, 512, 4)
    assert (nodes, collectives) == (126, 16)
    assert seconds == pytest.approx(1024 * (126 + 4 * 16 * 2 * 511) * fullcost.SECONDS_PER_EVENT)
    assert 140 / 3 < seconds < 140 * 3
    assert fullcost.duration(30) == "30 s" and fullcost.duration(600) == "10 min" and fullcost.duration(7200) == "2.0 h"


def test_narrow_layout_jobs_run_full_without_a_warning() -> None:
    """Data-parallel degree no wider than the reduced one (64 replicas): the full job is as cheap."""
    job = find_job(str(LAYOUTS / "tp2fsdp_np4" / "job"))
    chosen = plan_for(job, configs.network("Ring", 64), 64, "unaware", make_setup(1, None), exact=False)
    assert not chosen.reduced and chosen.warning is None and "no wider than a reduced one" in chosen.reason


# -- all-to-all over every rank (expert parallelism as wide as the job) --------------------------------


@pytest.mark.parametrize(("captured", "topology"), [(1, "Ring"), (1, "Switch"), (2, "Ring")])
def test_reduced_all_to_all_job_equals_the_full_one(
    simulator: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, captured: int, topology: str
) -> None:
    """ASTRA-sim's ring all-to-all (n(n-1)/2 messages a chunk) on the reduced ring, each
    all-to-all's bytes resized: one captured rank to a few ns; two (a ring of 4 standing for 16, the
    waits of the captured ranks then the largest) within the bounds."""
    monkeypatch.setattr(reduced, "STEPS_PER_EXTRA_CLASS", 4)
    prefix = all_to_all_job(tmp_path / "job", captured)
    options = api.SimulateOptions(topology=topology)
    small = api.simulate(prefix, options, ranks=16)
    full = api.simulate(prefix, options, ranks=16, exact=True)
    assert small.plan is not None and small.plan.reduced and small.plan.resize and not small.warnings
    assert len(small.ranks) == (2 if captured == 1 else 4) and len(full.ranks) == 16
    bound = 1e-5 if captured == 1 else 1e-3
    assert abs(small.step_ns - full.step_ns) <= bound * full.step_ns, (small.step_ns, full.step_ns)
    for mine, theirs in zip(small.ranks, full.ranks, strict=False):
        assert abs(mine.comm_ns - theirs.comm_ns) <= 10 * bound * theirs.comm_ns, (mine, theirs)


@pytest.mark.parametrize("topology", ["Ring", "Switch"])
def test_direct_all_to_all_with_one_captured_rank_is_exact(simulator: Path, tmp_path: Path, topology: str) -> None:
    """The direct all-to-all (n-1 messages of c // n bytes at once, the farthest peer's time) and
    the direct all-reduce on 2 NPUs, each collective resized to keep its messages: to the ns."""
    prefix = all_to_all_job(tmp_path / "job", 1)
    options = api.SimulateOptions(topology=topology, collective="direct")
    small = api.simulate(prefix, options, ranks=16)
    full = api.simulate(prefix, options, ranks=16, exact=True)
    assert small.plan is not None and small.plan.reduced and len(small.ranks) == 2 and not small.warnings
    assert small.step_ns == full.step_ns
    assert [r.comm_ns for r in small.ranks] == [r.comm_ns for r in full.ranks[:2]]


def test_all_to_all_job_plans_at_a_million_ranks(tmp_path: Path) -> None:
    job = find_job(str(all_to_all_job(tmp_path / "job", 2)))
    chosen = plan_for(job, configs.network("Ring", 1 << 20), 1 << 20, "unaware", make_setup(1, None), exact=False)
    assert chosen.reduced and chosen.network is not None and chosen.network.npus == (64,)
    assert chosen.worst_error < 1e-3 and chosen.warning is None


@pytest.mark.parametrize(
    ("collective", "topology", "why"),
    [
        ("ring,direct", "Ring", "a direct all-to-all beside ring all-reduces"),
        ("direct,direct", "Ring", "direct all-reduce with 2 captured ranks a group"),
        ("ring,halvingDoubling", "Ring", "all-to-all-implementation halvingDoubling"),
        ("ring", "Ring,Switch", "all-to-all over every rank of a network of 2 dimensions"),
    ],
)
def test_all_to_all_runs_full_where_not_modelled(tmp_path: Path, collective: str, topology: str, why: str) -> None:
    job = find_job(str(all_to_all_job(tmp_path / "job", 2)))
    network = configs.network(topology, 1024, "8,128" if "," in topology else None)
    reduce, _, exchange = collective.partition(",")
    system = make_setup(len(network.npus), None, collective=reduce if "," not in topology else "ring").system
    if exchange:
        system["all-to-all-implementation"] = [exchange]
    chosen = reduced.plan(job, network, 1024, system, "unaware")
    assert not chosen.reduced and why in chosen.reason and chosen.advice

"""ASTRA-sim's roofline on our ``--roofline`` output, with the real simulator (``ASTRA_SIM_HOME``).

Every rank must finish (ASTRA-sim exits 0 even when a rank hangs), and each rank's compute time
(its ``finished`` cycles less its ``exposed communication``: the time of the non-CPU compute
nodes) must be what the roofline says of the values in the files: the sum over the nodes of
``floor(num_ops / min(peak, bandwidth * num_ops / tensor_size))`` ns, for two peaks.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench import astrasim
from chakra_convert_fast.converter import ConvertOptions, api

from .traces import REAL_TRACES_DIR, read_et

GPT2 = REAL_TRACES_DIR / "cpu_gpt2_ddp2"
BANDWIDTH_GBS = 20.0


def roofline_ns(path: Path, peak_tflops: float, bandwidth_gbs: float) -> int:
    """ASTRA-sim's time for the non-CPU compute nodes of a file (Workload::issue_comp, in ns)."""
    total = 0
    for node in read_et(path)[1]:
        attrs: dict[str, Any] = {a.name: a for a in node.attr}
        if node.type != 4 or attrs["is_cpu_op"].bool_val:
            continue
        flops, size = attrs["num_ops"].int64_val, attrs["tensor_size"].uint64_val
        perf = min(bandwidth_gbs * 1e9 * flops / size, peak_tflops * 1e12)
        total += int(flops / perf * 1e9)
    return total


def run(prefix: Path, npus: int, peak: float, workdir: Path) -> list[astrasim.RankRun]:
    sim = astrasim.simulate(
        prefix,
        npus,
        workdir=workdir,
        system_overrides={"roofline-enabled": 1, "peak-perf": peak, "local-mem-bw": BANDWIDTH_GBS},
    )
    assert sim.all_finished, sim.output[-3000:]
    return sim.ranks


def test_cpu_capture_as_accelerator_follows_the_roofline(simulator: Path, tmp_path: Path) -> None:
    for rank in range(2):
        api.convert_pair(
            GPT2 / f"rank{rank}_host.json.gz",
            GPT2 / f"rank{rank}_device.json.gz",
            tmp_path / f"gpt2.{rank}.et",
            ConvertOptions(astra_sim=True, roofline=True, target="accelerator"),
            rank=rank,
        )
    computed = {}
    for peak in (0.05, 0.2):
        ranks = run(tmp_path / "gpt2", 2, peak, tmp_path / f"sim-{peak}")
        for ran in ranks:
            expected = roofline_ns(tmp_path / f"gpt2.{ran.rank}.et", peak, BANDWIDTH_GBS)
            assert ran.cycles - ran.exposed_communication == expected
            assert ran.comm_done == {"collective": 2}  # the gradient all-reduces, simulated
            computed[(peak, ran.rank)] = expected
    for rank in range(2):  # 4x the peak: the compute-bound nodes take a quarter of the time
        slow, fast = computed[(0.05, rank)], computed[(0.2, rank)]
        assert 0.25 * slow < fast < 0.9 * slow


def test_cpu_capture_keeps_replaying_without_the_target(simulator: Path, tmp_path: Path) -> None:
    """--roofline alone on a CPU capture: CPU ops are replayed for their durations even with the
    roofline enabled; the values change nothing."""
    for rank in range(2):
        for label, roofline in (("plain", False), ("costed", True)):
            api.convert_pair(
                GPT2 / f"rank{rank}_host.json.gz",
                GPT2 / f"rank{rank}_device.json.gz",
                tmp_path / f"{label}.{rank}.et",
                ConvertOptions(astra_sim=True, roofline=roofline),
                rank=rank,
            )
    plain = run(tmp_path / "plain", 2, 0.1, tmp_path / "sim-plain")
    costed = run(tmp_path / "costed", 2, 0.1, tmp_path / "sim-costed")
    assert [r.cycles for r in plain] == [r.cycles for r in costed]


def cpu_ns(path: Path) -> int:
    """ASTRA-sim's time for the CPU compute nodes of a file: their durations (us) as ns."""
    return sum(
        node.duration_micros * 1000
        for node in read_et(path)[1]
        if node.type == 4 and {a.name: a for a in node.attr}["is_cpu_op"].bool_val
    )


def test_host_time_captured_replays_the_host_between_the_roofline_ops(simulator: Path, tmp_path: Path) -> None:
    """--host-time captured: the roofline ops take the same time (ASTRA-sim's GPU time), and each
    rank's step grows by its CPU ops' captured durations (they sit in the dependency chain between
    the roofline ops), plus at most the longer wait at the collectives (the ranks' host work differs)."""
    steps = {}
    for host_time in ("none", "captured"):
        for rank in range(2):
            api.convert_pair(
                GPT2 / f"rank{rank}_host.json.gz",
                GPT2 / f"rank{rank}_device.json.gz",
                tmp_path / f"{host_time}.{rank}.et",
                ConvertOptions(astra_sim=True, roofline=True, target="accelerator", host_time=host_time),
                rank=rank,
            )
        steps[host_time] = run(tmp_path / host_time, 2, 0.1, tmp_path / f"sim-{host_time}")
    for without, with_host in zip(steps["none"], steps["captured"], strict=True):
        path = tmp_path / f"captured.{with_host.rank}.et"
        roofline = roofline_ns(path, 0.1, BANDWIDTH_GBS)
        assert with_host.cycles - with_host.exposed_communication == roofline  # the GPU time, unchanged
        assert without.cycles - without.exposed_communication == roofline
        host = cpu_ns(path)
        assert host > 10_000_000  # this capture's views and wrappers: tens of milliseconds
        assert cpu_ns(tmp_path / f"none.{with_host.rank}.et") == 0
        assert host <= with_host.cycles - without.cycles <= host + with_host.comm_cycles
        assert with_host.comm_done == {"collective": 2}


def test_unreadable_shapes_as_accelerator_finish(simulator: Path, tmp_path: Path) -> None:
    """Issue 29: chakra_1.0.2_host_2rank as accelerator never finished (accelerator ops without
    num_ops); its unreadable nodes stay replayed CPU ops now, and every rank finishes."""
    trace = REAL_TRACES_DIR / "host" / "chakra_1.0.2_host_2rank.json.gz"
    for rank in range(2):  # the one captured rank, twice: a job of two
        api.convert(
            trace, tmp_path / f"h.{rank}.et", ConvertOptions(astra_sim=True, roofline=True, target="accelerator")
        )
    ranks = run(tmp_path / "h", 2, 0.1, tmp_path / "sim")
    assert len(ranks) == 2

"""``simulate`` checks the job before ASTRA-sim runs (issue 26, goal 5): each refusal names the
problem and its fix, and none needs the simulator (they come before it is looked for)."""

from __future__ import annotations

from pathlib import Path

import pytest
from chakra.schema.protobuf import et_def_pb2 as pb
from chakra.src.third_party.utils.protolib import encodeMessage

from chakra_convert_fast.converter import api
from chakra_convert_fast.converter.errors import ConverterError, JobCheckError
from chakra_convert_fast.converter.simulate import preflight

from .clirun import assert_one_error, run_cli
from .simjobs import write_job


@pytest.fixture(autouse=True)
def _no_simulator(monkeypatch: pytest.MonkeyPatch) -> None:
    """No ASTRA-sim: a refusal that came after the simulator's look-up would say it is missing."""
    monkeypatch.setenv("ASTRA_SIM_HOME", "/nonexistent")


def _default_conversion(prefix: Path, ranks: int) -> Path:
    """A job as a default (not --astra-sim) conversion writes it: a METADATA node, a dangling dependency."""
    for rank in range(ranks):
        with open(f"{prefix}.{rank}.et", "wb") as fh:
            encodeMessage(fh, pb.GlobalMetadata(version="0.0.4"))
            encodeMessage(fh, pb.Node(id=1, name="[pytorch|profiler|execution_trace|process]", type=pb.METADATA_NODE))
            encodeMessage(fh, pb.Node(id=2, name="aten::mm", type=pb.COMP_NODE, duration_micros=5, ctrl_deps=[0]))
    return prefix


def test_a_default_conversion_names_astra_sim_conversion(tmp_path: Path) -> None:
    prefix = _default_conversion(tmp_path / "job", 2)
    with pytest.raises(JobCheckError, match="converted without `astra_sim`") as caught:
        api.simulate(prefix)
    assert "job.0.et" in str(caught.value) and "check" in str(caught.value)
    assert_one_error(run_cli("simulate", prefix), "converted without --astra-sim", "name no node")


def test_no_check_leaves_it_to_the_simulator(tmp_path: Path) -> None:
    prefix = _default_conversion(tmp_path / "job", 2)
    with pytest.raises(ConverterError, match="ASTRA-sim not found"):
        api.simulate(prefix, api.SimulateOptions(check=False))


@pytest.mark.parametrize(
    "option",
    [
        {"accelerator": "H100"},
        {"peak_tflops": 100.0, "mem_bandwidth": 1000.0},
        {"accelerator": "A100", "mem_bandwidth": 100.0},
    ],
)
def test_a_roofline_on_cpu_ops_only_is_refused(tmp_path: Path, option: dict[str, object]) -> None:
    prefix = write_job(tmp_path / "job", 2)  # compute nodes are CPU ops
    with pytest.raises(JobCheckError, match=r"no accelerator \(non-CPU\) compute node") as caught:
        api.simulate(prefix, api.SimulateOptions(**option))  # type: ignore[arg-type]
    assert "--roofline --target accelerator" in str(caught.value)
    done = run_cli("simulate", prefix, "--accelerator", "H100")
    assert_one_error(done, "--accelerator H100", "--roofline --target accelerator")


def test_a_roofline_on_accelerator_nodes_passes_the_check(tmp_path: Path) -> None:
    prefix = write_job(tmp_path / "job", 2, roofline=True)
    with pytest.raises(ConverterError, match="ASTRA-sim not found"):  # checked, then the simulator looked for
        api.simulate(prefix, api.SimulateOptions(accelerator="H100"))


def test_a_one_rank_job_names_scale(tmp_path: Path) -> None:
    prefix = write_job(tmp_path / "job", 1)
    assert_one_error(run_cli("simulate", prefix), "a job of 1 rank", "--ranks N here", f"scale {prefix} to N ranks")


@pytest.mark.slow
def test_a_prefix_matching_nothing_names_the_jobs_there(tmp_path: Path) -> None:
    write_job(tmp_path / "gpt2_np2", 2)
    write_job(tmp_path / "bert_np4", 4)
    (tmp_path / "merged.json").write_text("{}")
    assert_one_error(
        run_cli("simulate", tmp_path / "gpt"), "the jobs there", f"{tmp_path}/bert_np4", f"{tmp_path}/gpt2_np2"
    )
    assert_one_error(run_cli("simulate", tmp_path), "a folder, not a job", f"{tmp_path}/bert_np4")
    assert_one_error(
        run_cli("simulate", tmp_path / "gpt2_np2.0.et"), "name the job, not a rank's file", f"{tmp_path}/gpt2_np2"
    )
    assert_one_error(run_cli("simulate", tmp_path / "merged.json"), "one file", "convert --astra-sim")
    empty = tmp_path / "empty"
    empty.mkdir()
    assert_one_error(run_cli("simulate", empty / "x"), "nor any other job's")


def test_big_jobs_check_a_sample_of_ranks() -> None:
    assert preflight.sampled_ranks(4) == [0, 1, 2, 3]
    picks = preflight.sampled_ranks(1024)
    assert picks[0] == 0 and picks[-1] == 1023 and len(picks) == preflight.SAMPLE

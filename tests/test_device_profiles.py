"""Device profiles and the what-if from them (issue 35): the format and its loader, the shipped H200
profile, ``convert --kineto --device-profile`` (own GPU and scaled from a source profile), and the
notes ``simulate`` gives on answers that cannot be trusted by themselves."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from chakra_convert_fast.converter import api
from chakra_convert_fast.converter.devices import profile as dp
from chakra_convert_fast.converter.et.decode import read_metadata
from chakra_convert_fast.converter.kineto.comm import CommInfo
from chakra_convert_fast.converter.kineto.graph import KinetoGraph, Node
from chakra_convert_fast.converter.kineto.write import write
from chakra_convert_fast.converter.schema.chakra import NodeType
from chakra_convert_fast.converter.simulate.job import find_job
from chakra_convert_fast.converter.simulate.notes import same_steps, step_notes

DATA = Path(__file__).parent / "data" / "traces"
H200 = DATA / "gpu_h200"
SHAPES = H200 / "kineto_gpt2_base_bf16_b32_shapes" / "kineto_gpt2_base_bf16_b32_shapes_rank0_device.json.gz"
NO_SHAPES = H200 / "kineto_bert_base_bf16_b8" / "kineto_bert_base_bf16_b8_rank0_device.json.gz"
A100 = DATA / "kineto_public" / "hta_a100_nccl_rank0of2.json.gz"


def cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "chakra_convert_fast.converter", *map(str, args)], capture_output=True, text=True
    )


def profile_json(**changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "format": dp.FORMAT,
        "version": 1,
        "device": "Test GPU",
        "backend": "cuda",
        "host": {"op_us": 1.0, "launch_us": 5.0},
        "ops": {
            "matmul": [
                {"dtype": "bf16", "shape": [1024, 1024, 1024], "us": 10.0},
                {"dtype": "bf16", "shape": [4096, 1024, 1024], "us": 30.0},
            ],
            "elementwise": [{"dtype": "bf16", "shape": [1 << 20], "us": 4.0}],
        },
    }
    data.update(changes)
    return data


# -- the format -------------------------------------------------------------------------------------
def test_shipped_h200_profile_loads_with_every_class_and_host_costs() -> None:
    h200 = dp.shipped("h200")
    assert h200.device == "NVIDIA H200" and h200.backend == "cuda"
    for cls in ("matmul", "attention", "elementwise", "copy", "norm", "softmax", "reduction", "embedding", "memcpy"):
        assert h200.ops.get(cls), cls
    assert h200.host_op_us and h200.host_launch_us and h200.host_launch_us > h200.host_op_us
    assert "bench/gpu/whatif_profile.py" in h200.made["by"]


def test_predict_exact_point_interpolation_and_floor() -> None:
    p = dp.parse(profile_json(), "t.json")
    exact = dp.OpKey("matmul", "bf16", (1024, 1024, 1024), 2 * 1024**3, 0)
    assert p.predict(exact) == 10.0
    between = dp.OpKey("matmul", "bf16", (2048, 1024, 1024), 2 * 2048 * 1024 * 1024, 0)
    found = p.predict(between)
    assert found is not None and 10.0 < found < 30.0
    tiny = dp.OpKey("elementwise", "bf16", (16,), 0, 16)
    assert p.predict(tiny) is not None  # no smaller point: the nearest one's throughput
    assert p.predict(dp.OpKey("matmul", "fp32", (1024, 1024, 1024), 1, 0)) is None  # no fp32 point
    assert p.predict(dp.OpKey("norm", "bf16", (1024,), 0, 1024)) is None  # no norm point


def test_op_key_reads_a_matmul_and_attention_from_recorded_shapes() -> None:
    key = dp.op_key("aten::addmm", [[768], [4096, 768], [768, 3072]], ["Tensor(BFloat16)"] * 3)
    assert isinstance(key, dp.OpKey) and key.op_class == "matmul" and key.shape == (4096, 3072, 768)
    assert key.dtype == "bf16" and key.op == "addmm"
    q = [8, 12, 512, 64]
    att = dp.op_key("aten::_scaled_dot_product_cudnn_attention", [q, q, q], ["Tensor(BFloat16)"] * 3)
    assert isinstance(att, dp.OpKey) and att.shape == (96, 512, 512, 64)
    assert isinstance(dp.op_key("aten::view", [[4]], ["Tensor(float)"]), str)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"format": "other"}, "'format' is 'other'"),
        ({"version": 2}, "'version' 2: this release reads version 1"),
        ({"backend": "tpu"}, "'backend' 'tpu'"),
        ({"host": {"op_us": -1}}, "'host.op_us' is not a number >= 0"),
        ({"ops": {"matmul": [{"dtype": "bf16", "shape": [1, 2], "us": 1.0}]}}, "'ops.matmul[0]': 'shape' is not 3"),
        (
            {"ops": {"matmul": [{"dtype": "bf16", "shape": [1, 2, 3], "us": 0}]}},
            "'ops.matmul[0]': 'us' is not a positive number",
        ),
        ({"ops": {"warp": []}}, "unknown class 'warp'"),
        ({"collectives": {"all_reduce": [{"bytes": -1}]}}, "'bytes' is not a size"),
    ],
)
def test_a_bad_profile_is_refused_in_one_line(change: dict[str, Any], message: str) -> None:
    with pytest.raises(dp.ProfileError) as caught:
        dp.parse(profile_json(**change), "bad.json")
    text = str(caught.value)
    assert text.startswith("bad.json: not a valid device profile: ") and message in text and "\n" not in text


@pytest.mark.slow
def test_convert_refuses_bad_profiles_and_options(tmp_path: Path) -> None:
    out = tmp_path / "o.0.et"
    (tmp_path / "bad.json").write_text("{not json")
    for given, status, words in (
        (tmp_path / "bad.json", 1, "not a device profile (not JSON"),
        (tmp_path / "missing.json", 1, "cannot read the device profile"),
        ("a100", 1, "cannot read the device profile"),  # no A100 profile shipped
    ):
        done = cli("convert", "--kineto", SHAPES, out, "--device-profile", given)
        assert done.returncode == status, done.stderr
        assert words in done.stderr and done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
        assert not out.exists()
    both = cli("convert", "--kineto", SHAPES, out, "--device-profile", "h200", "--roofline", "--target", "accelerator")
    assert both.returncode == 2 and "--device-profile times each kernel itself" in both.stderr
    alone = cli("convert", "--kineto", SHAPES, out, "--source-profile", "h200")
    assert alone.returncode == 2 and "give --device-profile too" in alone.stderr
    cpu = cli("convert", "--kineto", DATA / "cpu_gpt2_ddp2" / "rank0_device.json.gz", out, "--device-profile", "h200")
    assert cpu.returncode == 2 and "the step has no GPU kernel (a CPU capture?)" in cpu.stderr
    pair = cli("convert", "--host", SHAPES, "--device", SHAPES, out, "--device-profile", "h200")
    assert pair.returncode == 2 and "a Kineto trace alone" in pair.stderr
    assert not out.exists()


# -- the what-if --------------------------------------------------------------------------------------
def test_own_gpu_whatif_times_every_kernel_from_the_profile(tmp_path: Path) -> None:
    out = tmp_path / "w.0.et"
    result = api.convert_kineto(SHAPES, out, device_profile="h200")
    w = result.whatif
    assert w is not None and w.device == "NVIDIA H200"
    total = w.totals()
    assert total.kernels > 1700
    assert w.totals("profile").kernels == total.kernels  # every kernel found its class in the profile
    # the profile was made from this capture (circular): its kernels' sum comes back within 2%
    assert abs(total.whatif_us - total.traced_us) / total.traced_us < 0.02
    assert w.host_whatif_us is not None and w.host_whatif_us < w.host_traced_us  # tracing's cost is gone
    h200 = dp.shipped("h200")
    assert h200.host_op_us is not None and w.host_whatif_us >= w.host_events * h200.host_op_us * 0.99
    metadata = read_metadata(out)
    assert metadata["schema"] == "kineto-whatif.1"
    assert json.loads(metadata["whatif"])["device"] == "NVIDIA H200"
    lines = w.class_lines()
    assert any(line.strip().startswith("matmul") and "profile" in line for line in lines)


def test_scaled_from_a_source_profile_without_shapes(tmp_path: Path) -> None:
    """A trace without shapes still gets an answer, scaled by class or by device, with a warning."""
    h200 = dp.shipped("h200")
    slower = copy.deepcopy(h200)
    slower.device = "Half-speed H200"
    slower.ops = {
        cls: [dp.Point(p.dtype, p.shape, p.us * 2, p.count, p.op) for p in ps] for cls, ps in h200.ops.items()
    }
    result = api.convert_kineto(NO_SHAPES, tmp_path / "s.0.et", device_profile=slower, source_profile=h200)
    w = result.whatif
    assert w is not None and w.source is not None
    total = w.totals()
    assert total.kernels > 1500
    assert abs(total.whatif_us / total.traced_us - 2.0) < 0.01
    assert w.totals("scaled by class").kernels > 1000  # the class of the aten op around each launch
    assert any("without their shapes" in warning and "record_shapes" in warning for warning in result.warnings)


def test_cli_reports_the_whatif_per_class(tmp_path: Path) -> None:
    done = cli("convert", "--kineto", SHAPES, tmp_path / "c.0.et", "--device-profile", "h200")
    assert done.returncode == 0, done.stderr
    assert "--device-profile NVIDIA H200 (h200.json)" in done.stderr
    assert "what-if for NVIDIA H200: simulate PREFIX (no --accelerator" in done.stderr


# -- simulate's notes ---------------------------------------------------------------------------------
def test_note_on_collectives_without_bytes(tmp_path: Path) -> None:
    nodes = [Node(1, "op", 10, [])]
    for i in range(2):
        coll = Node(2 + i, "ncclKernel_AllReduce", 5, [1], cpu=False)
        coll.type = int(NodeType.COMM_COLL_NODE)
        coll.comm = CommInfo("coll", 4, 0 if i == 0 else 1024, "0")
        nodes.append(coll)
    graph = KinetoGraph(nodes, 1, 0.0, 20.0, 20.0)
    for rank in (0, 1):
        write(graph, tmp_path / f"z.{rank}.et", rank)
    notes = step_notes(find_job(str(tmp_path / "z")), 0, 20_000, roofline=False)
    assert notes == [
        "rank 0: 1 of 2 collective(s) record 0 bytes: the network moves nothing for them, so the communication "
        "time is understated (the trace recorded no message sizes)"
    ]


def test_same_steps_of_two_accelerators_are_named() -> None:
    assert same_steps([("A100", 5), ("H100", 5), ("H200", 4)]) == [same_steps([("A100", 5), ("H100", 5)])[0]]
    assert "accelerators A100, H100 give the same step" in same_steps([("A100", 5), ("H100", 5)])[0]
    assert same_steps([("A100", 5), ("H100", 4)]) == []


def test_a100_trace_on_h100_says_why_nothing_changes(tmp_path: Path, simulator: Path) -> None:
    """The issue's case: a public A100 trace, --roofline --target accelerator, A100 and H100 the same
    step; simulate says the kernels without shapes are CPU ops, and the step is bound by the host."""
    one = tmp_path / "one"
    done = cli("convert", "--kineto", A100, f"{one}.0.et", "--roofline", "--target", "accelerator")
    assert done.returncode == 0, done.stderr
    assert cli("scale", one, tmp_path / "two" / "j", "--ranks", "2").returncode == 0
    prefix = tmp_path / "two" / "j"
    sweep = cli("simulate", prefix, "--sweep", "accelerator=A100,H100", "--out", tmp_path / "sw")
    assert sweep.returncode == 0, sweep.stderr
    assert "accelerators A100, H100 give the same step" in sweep.stderr
    run = cli("simulate", prefix, "--accelerator", "H100", "--json", tmp_path / "r.json")
    assert run.returncode == 0, run.stderr
    notes = json.loads((tmp_path / "r.json").read_text())["notes"]
    assert any("kernel(s) are CPU ops" in n and "of the simulated step" in n for n in notes)
    assert any("bound by the host" in n and "that is the answer, not a failure" in n for n in notes)
    assert all(n in run.stderr for n in notes)
    assert " error " not in run.stdout and "difference" in run.stdout  # a what-if is not called an error


@pytest.mark.torch
@pytest.mark.slow
def test_device_profile_micro_benchmark_on_cpu(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    out = tmp_path / "cpu.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "chakra_convert_fast.profiler.cli",
            "device-profile",
            "--out",
            str(out),
            "--device",
            "cpu",
            "--quick",
            "--repeats",
            "1",
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    p = dp.load(out)
    assert p.backend == "cpu" and p.host_op_us is not None
    assert {"matmul", "attention", "elementwise", "copy", "norm", "softmax", "reduction", "embedding"} <= set(p.ops)
    key = dp.op_key("aten::mm", [[512, 256], [256, 768]], ["Tensor(float)"] * 2)
    assert isinstance(key, dp.OpKey) and p.predict(key) is not None
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "chakra_convert_fast.profiler.cli",
            "device-profile",
            "--out",
            str(tmp_path / "no" / "x.json"),
        ],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 1 and bad.stderr.count("\n") == 1


def test_simulate_names_the_whatif_and_refuses_a_roofline_on_it(tmp_path: Path, simulator: Path) -> None:
    one = tmp_path / "one"
    assert cli("convert", "--kineto", SHAPES, f"{one}.0.et", "--device-profile", "h200").returncode == 0
    prefix = tmp_path / "two" / "j"
    assert cli("scale", one, prefix, "--ranks", "2").returncode == 0
    run = cli("simulate", prefix, "--json", tmp_path / "r.json")
    assert run.returncode == 0, run.stderr
    result = json.loads((tmp_path / "r.json").read_text())
    assert result["measured_step_ns"] is None  # a what-if holds no measured step to call an error
    assert any(
        n.startswith("what-if for NVIDIA H200 (device profile NVIDIA H200 (h200.json))") for n in result["notes"]
    )
    assert not any("bound by the host" in n for n in result["notes"])  # GPT-2 batch 32 is bound by its GPU
    assert "error" not in run.stdout
    roofline = cli("simulate", prefix, "--accelerator", "H200")
    assert roofline.returncode == 1 and "is a device-profile what-if" in roofline.stderr


@pytest.mark.slow
def test_shipped_h200_points_are_the_committed_captures() -> None:
    """The shipped profile's points are what bench/gpu/whatif_profile.py reads from the captures with shapes."""
    from bench.gpu.whatif_profile import WITH_SHAPES
    from chakra_convert_fast.converter.kineto.events import read_events
    from chakra_convert_fast.converter.kineto.measure import launched_ops, points_json

    launched = [
        op for name in WITH_SHAPES for op in launched_ops(read_events(str(next((H200 / name).glob("*_device.json*")))))
    ]
    shipped = json.loads((Path(__file__).parents[1] / "converter" / "devices" / "data" / "h200.json").read_text())
    rebuilt = json.loads(dp.to_json({"ops": points_json(launched)}))
    assert rebuilt["ops"] == shipped["ops"]


@pytest.mark.slow
def test_a_profile_of_another_gpu_without_the_captures_profile_warns(tmp_path: Path) -> None:
    other = dp.shipped("h200")
    other.device = "NVIDIA H100 80GB HBM3"
    other.ops.pop("matmul")  # the matmuls find no point (and no roofline): they keep the H200's times
    other.peak_tflops = None
    result = api.convert_kineto(SHAPES, tmp_path / "o.0.et", device_profile=other)
    assert any(
        "the trace was captured on NVIDIA H200, the profile is NVIDIA H100 80GB HBM3's" in w and "`source_profile`" in w
        for w in result.warnings
    )
    own = api.convert_kineto(SHAPES, tmp_path / "s.0.et", device_profile="h200")
    assert not any("the trace was captured on" in w for w in own.warnings)
    every = api.convert_kineto(SHAPES, tmp_path / "e.0.et", device_profile="h100")  # a point for every kernel
    assert not any("the trace was captured on" in w for w in every.warnings)

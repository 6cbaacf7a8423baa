"""The GPU's own time between queued kernels in the device-profile what-if (issue 35): measured from
a capture's CUPTI times, kept in the profile (``gpu.kernel_gap_us``), added to each GPU op."""

from __future__ import annotations

import copy
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from chakra_convert_fast.converter import api
from chakra_convert_fast.converter.devices import profile as dp
from chakra_convert_fast.converter.et.decode import CPU_OP_FALSE, read_et
from chakra_convert_fast.converter.kineto.events import read_events
from chakra_convert_fast.converter.kineto.measure import queued_gaps

DATA = Path(__file__).parent / "data" / "traces"
#: a Kineto-alone H200 capture (GPT-2 bf16 batch 32): its step is bound by the GPU, kernels queue
QUEUED = DATA / "gpu_h200" / "kineto_gpt2_base_bf16_b32" / "kineto_gpt2_base_bf16_b32_rank0_device.json.gz"


def profile_json(**changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "format": dp.FORMAT,
        "version": 1,
        "device": "Test GPU",
        "backend": "cuda",
        "ops": {"elementwise": [{"dtype": "bf16", "shape": [1 << 20], "us": 4.0}]},
    }
    data.update(changes)
    return data


def test_the_gap_is_read_and_a_bad_one_refused() -> None:
    assert dp.parse(profile_json(), "p.json").kernel_gap_us is None
    assert dp.parse(profile_json(gpu={"kernel_gap_us": 1.25}), "p.json").kernel_gap_us == 1.25
    for change, words in (
        ({"gpu": {"kernel_gap_us": -1}}, "'gpu.kernel_gap_us' is not a number >= 0"),
        ({"gpu": 3}, "'gpu' is not an object"),
    ):
        with pytest.raises(dp.ProfileError) as caught:
            dp.parse(profile_json(**change), "bad.json")
        assert str(caught.value).startswith("bad.json: not a valid device profile: ") and words in str(caught.value)


def test_queued_gaps_of_a_gpu_bound_capture() -> None:
    """Most of a GPU-bound step's kernels were launched before the previous one ended; the GPU's
    time between them is about a microsecond on the H200, never negative."""
    gaps = queued_gaps(read_events(QUEUED))
    assert len(gaps) > 1000
    assert min(gaps) >= 0
    assert 0.8 < statistics.median(gaps) < 2.5


def test_shipped_profiles_hold_the_gap() -> None:
    for name in ("h200", "h100"):
        gap = dp.shipped(name).kernel_gap_us
        assert gap is not None and 0.8 < gap < 2.5, name


def test_the_whatif_adds_the_gap_to_every_gpu_op(tmp_path: Path) -> None:
    """The same capture with a gap of 0 and of 3 us: the GPU ops' written times differ by 3 us each
    (within the rounding of their running sum), the host's not at all."""
    base = dp.shipped("h200")
    none, three = copy.deepcopy(base), copy.deepcopy(base)
    none.kernel_gap_us, three.kernel_gap_us = 0.0, 3.0
    sums = []
    for tag, profile in (("none", none), ("three", three)):
        out = tmp_path / f"{tag}.0.et"
        result = api.convert_kineto(QUEUED, out, device_profile=profile)
        assert result.whatif is not None
        trace = read_et(out)
        gpu = sum(d for d, c in zip(trace.durations, trace.cpu_ops, strict=True) if c == CPU_OP_FALSE)
        cpu = sum(d for d, c in zip(trace.durations, trace.cpu_ops, strict=True) if c != CPU_OP_FALSE)
        sums.append((gpu, cpu, result.whatif))
    (gpu0, cpu0, w0), (gpu3, cpu3, w3) = sums
    assert w3.gpu_ops == w0.gpu_ops == w3.totals().kernels > 1500
    assert w3.kernel_gap_us == 3.0 and w0.kernel_gap_us == 0.0
    assert abs((gpu3 - gpu0) - 3 * w3.gpu_ops) <= 1
    assert cpu3 == cpu0
    assert w3.as_json()["kernel_gap_us"] == 3.0


@pytest.mark.slow
def test_shipped_gaps_are_the_captures_median() -> None:
    """The shipped profiles' gap is the median over their captures with shapes, as
    bench/gpu/whatif_profile.py measures it."""
    from bench.gpu.whatif_profile import WITH_SHAPES

    for name in ("h200", "h100"):
        root = DATA / f"gpu_{name}"
        gaps = [g for c in WITH_SHAPES for g in queued_gaps(read_events(next((root / c).glob("*_device.json*"))))]
        assert dp.shipped(name).kernel_gap_us == round(statistics.median(gaps), 4), name


def test_convert_says_what_the_gap_added(tmp_path: Path) -> None:
    args = [
        "-m",
        "chakra_convert_fast.converter",
        "convert",
        "--kineto",
        str(QUEUED),
        str(tmp_path / "g.0.et"),
        "--device-profile",
        "h200",
    ]
    done = subprocess.run([sys.executable, *args], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    gap = dp.shipped("h200").kernel_gap_us
    assert f"the GPU {gap:g} us between queued kernels (" in done.stderr

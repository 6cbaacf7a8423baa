"""``link`` against the real ``chakra_trace_link`` (run with tests/reference_shim) and its shared outputs."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from chakra_convert_fast.converter import cli
from chakra_convert_fast.converter.api import link
from chakra_convert_fast.converter.link.kineto import KinetoEvent
from chakra_convert_fast.converter.link.linker import _exclusive_durations
from tests.linkcases import edge_case_pair

from .traces import REAL_TRACES_DIR, SHIM, load_trace, reference_link

TRACES = REAL_TRACES_DIR
RESNET_HOST = TRACES / "host" / "resnet_et.json.gz"
RESNET_DEVICE = TRACES / "resnet_ddp_synthetic_kineto" / "rank0_device_synthetic.json.gz"
RESNET_MERGED = TRACES / "resnet_ddp_synthetic_kineto" / "rank0_merged_by_chakra_trace_link.json.gz"
GPT2 = TRACES / "cpu_gpt2_ddp2"


def load(path: Path | str) -> dict:
    return load_trace(Path(path))


@pytest.mark.slow
def test_resnet_pair_matches_shared_reference_output(tmp_path: Path) -> None:
    # the Kineto trace was generated for this host trace with another pid (4242): a pid that differs
    # means another rank or run for real traces, which link refuses unless allowed (as convert does)
    result = link(RESNET_HOST, RESNET_DEVICE, tmp_path / "merged.json", rank=0, allow_mismatch=True)
    assert load(tmp_path / "merged.json") == load(RESNET_MERGED)
    assert result.stats.gpu_linked == 2388 and result.nodes_written == 16780


@pytest.mark.slow
@pytest.mark.parametrize("rank", [0, 1])
def test_gpt2_pair_matches_reference(tmp_path: Path, rank: int) -> None:
    host, device = GPT2 / f"rank{rank}_host.json.gz", GPT2 / f"rank{rank}_device.json.gz"
    link(host, device, tmp_path / "ours.json.gz", rank=rank)
    assert load(tmp_path / "ours.json.gz") == reference_link(host, device, tmp_path / "ref.json", tmp_path, rank)


@pytest.mark.slow
def test_gpt2_shared_output_has_our_structure(tmp_path: Path) -> None:
    """The shared merged file comes from another run of the same job (other pid, times, tensor ids and a
    few parents, ops in another order), so only its shape can match: the same ops, linked the same."""
    link(GPT2 / "rank0_host.json.gz", GPT2 / "rank0_device.json.gz", tmp_path / "ours.json")
    ours, shared = (
        load(tmp_path / "ours.json")["nodes"],
        load(GPT2 / "rank0_merged_by_chakra_trace_link.json.gz")["nodes"],
    )

    def shape(nodes: list[dict]) -> Counter:
        return Counter((n["name"], "ts" in n, "inter_thread_dep" in n) for n in nodes)

    assert shape(ours) == shape(shared)


@pytest.mark.slow
@pytest.mark.parametrize(("layers", "shuffled", "seed"), [(60, False, 0), (60, True, 1), (200, True, 2)])
def test_synthetic_pairs_match_reference(tmp_path: Path, layers: int, shuffled: bool, seed: int) -> None:
    host, device = edge_case_pair(tmp_path, layers=layers, shuffled=shuffled, seed=seed, gz=False)
    result = link(host, device, tmp_path / "ours.json")
    assert result.stats.gpu_linked > 0
    assert load(tmp_path / "ours.json") == reference_link(host, device, tmp_path / "ref.json", tmp_path)


def _reference_exclusive(ops: list[KinetoEvent]) -> list:
    code = (
        "import json,sys\n"
        "from chakra.src.trace_link.chakra_device_trace_loader import ChakraDeviceTraceLoader as L\n"
        "from chakra.src.trace_link.kineto_operator import KinetoOperator as K\n"
        "ops=[K(e) for e in json.load(sys.stdin)]\n"
        "L().calculate_exclusive_dur({0: ops})\n"
        "print(json.dumps([o.exclusive_dur for o in ops]))\n"
    )
    events = [{"ts": op.ts, "dur": op.dur, "cat": "cpu_op"} for op in ops]
    run = subprocess.run(
        [sys.executable, "-c", code],
        input=json.dumps(events),
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(SHIM)},
        timeout=120,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout)


@pytest.mark.parametrize("seed", range(4))
def test_exclusive_durations_match_reference_on_random_overlaps(seed: int) -> None:
    rng = random.Random(seed)
    ops = []
    for _ in range(300):
        ts = rng.choice([rng.randint(0, 400), rng.randint(0, 400) + rng.random()])
        ops.append(KinetoEvent.from_dict({"ts": ts, "dur": rng.choice([0, 1, 3, 10, 40, 2.5, 0.125])}))
    ops.sort(key=lambda op: op.ts)
    _exclusive_durations(ops)
    assert [op.excl for op in ops] == _reference_exclusive(ops)


# -- the command line and bad input ----------------------------------------------------------------
def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = cli.main(args)
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_accepts_reference_arguments(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    host, device = edge_case_pair(tmp_path, layers=20)
    out = tmp_path / "merged.json"
    code, _, stderr = run_cli(
        [
            "link",
            "--rank",
            "0",
            "--chakra-host-trace",
            str(host),
            "--chakra-device-trace",
            str(device),
            "--output-file",
            str(out),
        ],
        capsys,
    )
    assert code == 0 and out.exists() and "linked" in stderr


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    "case", ["missing", "empty", "truncated", "no_events", "other_run", "wrong_rank", "host_is_kineto"]
)
def test_bad_input_is_one_line_error_and_no_output(
    tmp_path: Path, case: str, capsys: pytest.CaptureFixture[str]
) -> None:
    host, device = edge_case_pair(tmp_path, layers=20, gz=False)
    rank = "0"
    if case == "missing":
        host = tmp_path / "nope.json"
    elif case == "empty":
        device = _write(tmp_path / "empty.json", "")
    elif case == "truncated":
        device = _write(tmp_path / "cut.json", device.read_text()[:5000])
    elif case == "no_events":
        device = _write(tmp_path / "k.json", json.dumps({"schemaVersion": 1, "distributedInfo": {"rank": 0}}))
    elif case == "other_run":
        other_host, _ = edge_case_pair(tmp_path / "other", layers=20, seed=99, gz=False)
        doc = json.loads(other_host.read_text())
        for node in doc["nodes"]:
            node["name"] = node["name"] + "_x"
        host = _write(tmp_path / "other_host.json", json.dumps(doc))
    elif case == "wrong_rank":
        rank = "1"
    elif case == "host_is_kineto":
        host = device
    out = tmp_path / "out" / "merged.json"
    out.parent.mkdir()
    code, _, err = run_cli(["link", "--rank", rank, "--host", str(host), "--device", str(device), str(out)], capsys)
    assert code != 0
    assert err.count("\n") == 1 and err.startswith("chakra-convert-fast: error: ")
    assert code == 1
    assert os.listdir(out.parent) == []


def test_kineto_from_another_run_is_an_error_not_success(tmp_path: Path) -> None:
    host, _ = edge_case_pair(tmp_path / "a", layers=20, gz=False)
    doc = {
        "traceEvents": [
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "x",
                "ts": 1,
                "dur": 1,
                "tid": 1,
                "args": {"Record function id": 99999, "External id": 1},
            }
        ]
    }
    device = _write(tmp_path / "k.json", json.dumps(doc))
    with pytest.raises(Exception, match="different runs"):
        link(host, device, tmp_path / "m.json")
    result = link(host, device, tmp_path / "m.json", allow_mismatch=True)
    assert any("found no device op" in w for w in result.warnings)


def test_partial_link_warns_with_counts(tmp_path: Path) -> None:
    host, device = edge_case_pair(tmp_path, layers=30, gz=False)
    doc = json.loads(device.read_text())
    doc["traceEvents"] = [e for i, e in enumerate(doc["traceEvents"]) if not (e.get("cat") == "cuda_runtime" and i % 2)]
    device = _write(tmp_path / "partial.json", json.dumps(doc))
    warnings = link(host, device, None).warnings
    assert any("device kernels have no launching CPU op" in w for w in warnings)


@pytest.mark.parametrize("shuffled", [False, True])
def test_convert_pair_writes_only_the_et_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], shuffled: bool
) -> None:
    """In one process the merged nodes go straight to the converter: same bytes as converting the
    merged file, and no merged JSON on disk (a shuffled host trace takes the id-order path)."""
    host, device = edge_case_pair(tmp_path / "in", layers=20, shuffled=shuffled)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    code, _, err = run_cli(["convert", "--host", str(host), "--device", str(device), str(out_dir / "r0.et")], capsys)
    assert code == 0, err
    assert os.listdir(out_dir) == ["r0.et"]
    code, _, err = run_cli(
        [
            "convert",
            "--host",
            str(host),
            "--device",
            str(device),
            "--keep-merged",
            str(out_dir / "m.json"),
            str(out_dir / "r1.et"),
        ],
        capsys,
    )
    assert code == 0, err
    assert sorted(os.listdir(out_dir)) == ["m.json", "r0.et", "r1.et"]
    assert (out_dir / "r0.et").read_bytes() == (out_dir / "r1.et").read_bytes()

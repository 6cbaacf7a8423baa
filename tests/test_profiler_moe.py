"""Expert parallelism end to end: ``chakra-profile --model mixtral --size tiny --ep 2 --nproc 2``
on CPU ranks (gloo), its all-to-alls with splits in the host traces, the routing's imbalance in
the summary and layout file, ``convert-all --astra-sim``, ``check`` and the real ASTRA-sim.

The capture is made once per session (``tests/captures.py``); the tests that use it are marked
torch and slow, the simulation astra_sim (``tests/conftest.py``).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bench import astrasim
from chakra_convert_fast.converter import ConvertOptions, api
from chakra_convert_fast.converter.convert.collectives import tensor_bytes
from chakra_convert_fast.converter.et.decode import read_et
from chakra_convert_fast.converter.schema.chakra import CollectiveCommType, NodeType
from chakra_convert_fast.profiler.cli import parse_args

from .captures import MIXTRAL_EP2, Done, Run
from .clirun import run_cli
from .traces import load_trace

N_LAYER, EXPERTS, TOP_K = 2, 4, 2  # the tiny Mixtral preset
TOKENS = 2 * 32  # --batch-size 2 x --seq-len 32 (tests/captures.py)
ALL_TO_ALL = int(CollectiveCommType.ALL_TO_ALL)


def all_to_alls(done: Done, rank: int) -> list[dict[str, Any]]:
    """The rank's ``c10d::alltoall_base_`` nodes in the traced step, in order."""
    nodes = load_trace(done.host(rank))["nodes"]
    return sorted((n for n in nodes if n["name"] == "c10d::alltoall_base_"), key=lambda n: n["id"])


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--model", "gpt2", "--ep", "2", "--nproc", "2"], "mixture-of-experts"),
        (["--model", "mixtral", "--size", "tiny", "--ep", "2", "--nproc", "4"], "--nproc 2"),
        (["--model", "mixtral", "--size", "tiny", "--ep", "2", "--nproc", "2", "--tp", "2"], "--tp 1"),
        (["--model", "mixtral", "--size", "tiny", "--ep", "3", "--nproc", "3"], "4 experts do not split"),
        (["--model", "mixtral", "--size", "base"], "no 'base' size"),
        (["--model", "mixtral", "--size", "tiny", "--nproc", "2", "--dp", "fsdp"], "--dp ddp"),
        (["--model", "mixtral", "--size", "tiny", "--nproc", "2", "--pp", "2"], "--pp 1"),
    ],
)
def test_ep_options_that_cannot_apply_are_usage_errors(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        parse_args(argv)
    assert exc.value.code == 2
    assert says in capsys.readouterr().err


@pytest.fixture(scope="module")
def done(captured: Callable[[Run], Done]) -> Done:
    return captured(MIXTRAL_EP2)


def test_dispatch_and_combine_are_all_to_alls_with_exchanged_splits(done: Done) -> None:
    """Per MoE layer: the counts (equal splits), the dispatch and the combine forward, the combine's
    and the dispatch's gradients backward; what rank 0 sends rank 1 is what rank 1 receives."""
    ops = [all_to_alls(done, rank) for rank in range(2)]
    assert [len(o) for o in ops] == [N_LAYER * 5] * 2
    for rank, nodes in enumerate(ops):
        with_splits = [n for n in nodes if n["inputs"]["values"][4]]
        assert len(with_splits) == N_LAYER * 4  # all but the counts
        for node in nodes:
            values, shapes = node["inputs"]["values"], node["inputs"]["shapes"]
            output_splits, input_splits = values[3], values[4]
            if input_splits:
                assert sum(input_splits) == shapes[1][0] and sum(output_splits) == shapes[0][0], (rank, node["id"])
            else:  # the routing's counts: one int64 per expert
                assert shapes[1] == [EXPERTS] and node["inputs"]["types"][1] == "Tensor(long int)"
    for mine, theirs in zip(ops[0], ops[1], strict=True):
        sent_to_1, received_from_1 = mine["inputs"]["values"][4], mine["inputs"]["values"][3]
        if sent_to_1:
            assert sent_to_1[1] == theirs["inputs"]["values"][3][0]
            assert received_from_1[1] == theirs["inputs"]["values"][4][0]
    uneven = [n for n in ops[0] if n["inputs"]["values"][4] and n["inputs"]["shapes"][0] != n["inputs"]["shapes"][1]]
    assert uneven, "a random router on 64 tokens sends each rank the same rows: nothing tests the splits"


def test_summary_and_layout_record_the_routing_imbalance(done: Done) -> None:
    summary = done.summary()
    moe = summary["moe"]
    assert (moe["experts"], moe["top_k"], moe["ep"]) == (EXPERTS, TOP_K, 2)
    forwards = moe["imbalance"]["per_forward"]
    steps = MIXTRAL_EP2.wait + MIXTRAL_EP2.warmup + MIXTRAL_EP2.active
    assert len(forwards) == N_LAYER * steps
    for forward in forwards:
        rows = forward["expert_rows"]
        assert len(rows) == EXPERTS and sum(rows) == 2 * TOKENS * TOP_K  # every rank's tokens, top-2 each
        assert forward["expert_max_over_mean"] == round(max(rows) / (sum(rows) / EXPERTS), 4) >= 1
    ratios = [f["expert_max_over_mean"] for f in forwards]
    assert moe["imbalance"]["expert_max_over_mean"]["max"] == max(ratios)
    layout = json.loads((done.outdir / f"{MIXTRAL_EP2.name}.layout.json").read_text())
    assert (
        layout["ep"] == 2
        and layout["moe"]["imbalance"]["expert_max_over_mean"] == moe["imbalance"]["expert_max_over_mean"]
    )
    assert [r["ep"]["ranks"] for r in layout["ranks"]] == [[0, 1], [0, 1]]


def test_ep_job_converts_checks_and_simulates_with_one_size_per_all_to_all(
    done: Done, simulator: Path, tmp_path: Path
) -> None:
    """Alone, each rank's all-to-alls carry its own buffer, which ASTRA-sim cannot run (check: it
    hangs); convert-all gives each one the larger rank input of the pair, and the job finishes."""
    job = tmp_path / "job"
    job.mkdir()
    for path in done.outdir.glob("*_rank*_*.json"):
        shutil.copy(path, job)
    alone = [tmp_path / f"alone.{rank}.et" for rank in range(2)]
    for rank, out in enumerate(alone):
        api.convert(done.host(rank), out, ConvertOptions(astra_sim=True))
    assert not api.check(alone).ok

    converted = run_cli("convert-all", job, tmp_path / "et", "--astra-sim")
    assert converted.returncode == 0, converted.stderr
    assert "all-to-all with splits" in converted.stdout + converted.stderr
    prefix = tmp_path / "et" / MIXTRAL_EP2.name
    paths = [Path(f"{prefix}.{rank}.et") for rank in range(2)]
    checked = run_cli("check", *paths)
    assert checked.returncode == 0, checked.stderr

    def buffer(node: dict[str, Any]) -> int:  # what the rank sends (its input)
        v, s, t = node["inputs"]["values"], node["inputs"]["shapes"], node["inputs"]["types"]
        return tensor_bytes(v[1], s[1], t[1])

    expected = [max(pair) for pair in zip(*(map(buffer, all_to_alls(done, r)) for r in range(2)), strict=True)]
    for path in paths:
        trace = read_et(path)
        sizes = [
            trace.comm[row]["comm_size"]
            for row in sorted(trace.comm, key=lambda r: trace.ids[r])
            if trace.types[row] == NodeType.COMM_COLL_NODE and trace.comm[row].get("comm_type") == ALL_TO_ALL
        ]
        assert sizes == expected, path

    # chakra-profile's own --convert output, evened by rank 0, is the same job
    written = [done.outdir / f"{MIXTRAL_EP2.name}.{rank}.et" for rank in range(2)]
    assert api.check(written).ok
    assert done.summary()["moe"]["all_to_all_evened"]["collectives"] >= 1
    for prefix_run in (prefix, done.outdir / MIXTRAL_EP2.name):
        run = astrasim.simulate(prefix_run, 2, backend="unaware", comm_groups=None, workdir=tmp_path / prefix_run.name)
        assert run.returncode == 0, run.output[-3000:]
        assert run.all_finished and len(run.ranks) == 2, run.output[-3000:]
        assert all(r.comm_cycles > 0 for r in run.ranks)

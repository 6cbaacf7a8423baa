"""Data x tensor x pipeline layouts: ``chakra-profile``'s checks (``profiler/layouts.py``) and
``scale`` of a job with a layout file (``converter/ranks/layoutscale.py``), on small jobs built
with the reference's protobuf classes. The real captures scaled against real captures of the
target size are in ``bench/layouts_proof.py`` (``bench/results/layouts.md``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from chakra.schema.protobuf import et_def_pb2 as pb

from chakra_convert_fast.converter import api
from chakra_convert_fast.converter.et.decode import read_et
from chakra_convert_fast.converter.ranks.jobsize import et_world_size
from chakra_convert_fast.profiler.cli import parse_args
from chakra_convert_fast.profiler.layouts import Layout, make_layout, shape_problems, stage_layers

from .clirun import assert_one_error, listing, run_cli
from .test_scale import node, write_rank


# -- the layout and its checks ------------------------------------------------------------------------
def test_mesh_groups_tensor_parallel_innermost() -> None:
    layout = Layout(dp=2, tp=2, pp=2)
    assert layout.groups() == {
        "tp": [[0, 1], [2, 3], [4, 5], [6, 7]],
        "dp": [[0, 2], [1, 3], [4, 6], [5, 7]],
        "pp": [[0, 4], [1, 5], [2, 6], [3, 7]],
    }
    assert layout.coords(5) == {"pp": 1, "dp": 0, "tp": 1}


@pytest.mark.parametrize(
    ("n_layer", "pp", "stages"),
    [(4, 2, [range(0, 2), range(2, 4)]), (5, 2, [range(0, 3), range(3, 5)]), (2, 2, [range(0, 1), range(1, 2)])],
)
def test_stages_hold_whole_blocks(n_layer: int, pp: int, stages: list[range]) -> None:
    assert [stage_layers(n_layer, pp, s) for s in range(pp)] == stages


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((3, 2, 1, 1), "--nproc 3 is not a multiple of --tp 2 x --pp 1 = 2"),
        ((4, 1, 2, 1), "1F1B schedule needs --microbatches >= --pp (2), got 1"),
        ((2, 1, 1, 2), "--microbatches applies to pipeline parallelism"),
    ],
)
def test_layouts_that_do_not_divide(args: tuple[int, int, int, int], message: str) -> None:
    nproc, tp, pp, microbatches = args
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        make_layout(nproc, tp, pp, "ddp", microbatches, "1f1b")


def test_shape_problems_name_what_does_not_divide() -> None:
    layout = make_layout(4, 4, 1, "fsdp", 1, "1f1b")
    assert shape_problems(layout, 2, 64, 2, 256, 4) == ["--n-head (attention heads) 2 is not a multiple of --tp 4"]
    pipeline = make_layout(4, 1, 4, "ddp", 4, "1f1b")
    assert shape_problems(pipeline, 2, 64, 2, 256, 6) == [
        "--n-layer 2 is fewer layers than --pp 4 stages",
        "--batch-size 6 is not a multiple of --microbatches 4",
    ]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--nproc", "3", "--tp", "2"], "--nproc 3 is not a multiple of --tp 2"),
        (["--nproc", "2", "--tp", "2", "--n-head", "3", "--hidden", "66"], "--n-head (attention heads) 3"),
        (["--nproc", "2", "--pp", "2", "--n-layer", "1"], "--n-layer 1 is fewer layers than --pp 2"),
        (["--nproc", "2", "--pp", "2", "--microbatches", "3"], "--batch-size 4 is not a multiple of --microbatches 3"),
        (["--dp", "zero"], "invalid choice"),
    ],
)
def test_profile_usage_errors(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        parse_args(["--model", "gpt2", "--size", "tiny", *argv])
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_a_layout_that_divides_parses() -> None:
    args = parse_args(
        [
            "--model",
            "bert",
            "--size",
            "tiny",
            "--nproc",
            "8",
            "--tp",
            "2",
            "--pp",
            "2",
            "--dp",
            "fsdp",
            "--schedule",
            "gpipe",
        ]
    )
    assert (args.tp, args.pp, args.dp, args.schedule) == (2, 2, "fsdp", "gpipe")


# -- scale of a job with a layout file -----------------------------------------------------------------
def coll(node_id: int, kind: int, size: int, pg: str, deps: tuple[int, ...]) -> pb.Node:
    return node(node_id, pb.COMM_COLL_NODE, deps, comm_type=kind, comm_size=size, pg_name=pg, is_cpu_op=False)


def p2p(node_id: int, send: bool, size: int, src: int, dst: int, pg: str, deps: tuple[int, ...]) -> pb.Node:
    return node(
        node_id,
        pb.COMM_SEND_NODE if send else pb.COMM_RECV_NODE,
        deps,
        comm_size=size,
        pg_name=pg,
        comm_src=src,
        comm_dst=dst,
        comm_tag=0,
        is_cpu_op=False,
    )


def mesh_job(folder: Path, dp: int, tp: int, pp: int, mode: str) -> Path:
    """A job as chakra-profile lays it out: groups named as torch names them (ids from 1, tp groups
    first; a dimension spanning every rank is the default group "0"), per rank an FSDP-style
    all-gather (1,000 bytes x 2 / dp) and reduce-scatter (4,000) or a DDP all-reduce (4,000) on its
    dp group, a TP all-reduce (64) on its tp group, and stage p sending 256 bytes to stage p+1."""
    folder.mkdir(parents=True, exist_ok=True)
    layout = Layout(dp=dp, tp=tp, pp=pp, dp_mode=mode)
    world = layout.world_size
    names: dict[tuple[int, ...], str] = {}
    for dim in ("tp", "dp", "pp"):
        for members in layout.groups()[dim]:
            if len(members) == world:
                names[tuple(members)] = "0"
            elif len(members) > 1:
                names.setdefault(tuple(members), str(len([n for n in names.values() if n != "0"]) + 1))
    ranks = []
    for rank in range(world):
        mine = {dim: next(g for g in layout.groups()[dim] if rank in g) for dim in ("tp", "dp", "pp")}
        pg = {dim: names.get(tuple(g), f"one{rank}{dim}") for dim, g in mine.items()}
        ranks.append({dim: {"pg_name": pg[dim], "ranks": mine[dim]} for dim in mine})
        nodes = [node(1)]
        if mode == "fsdp":
            nodes.append(coll(2, pb.ALL_GATHER, 2000 // dp, pg["dp"], (1,)))
        if tp > 1:
            nodes.append(coll(3, pb.ALL_REDUCE, 64, pg["tp"], (1,)))
        stage = layout.coords(rank)["pp"]
        if stage + 1 < pp:
            nodes.append(p2p(4, True, 256, rank, rank + dp * tp, pg["pp"], (1,)))
        if stage > 0:
            nodes.append(p2p(5, False, 256, rank - dp * tp, rank, pg["pp"], (1,)))
        if mode == "fsdp":
            nodes.append(coll(6, pb.REDUCE_SCATTER, 4000, pg["dp"], (1,)))
        else:
            nodes.append(coll(6, pb.ALL_REDUCE, 4000, pg["dp"], (1,)))
        write_rank(
            folder / f"job.{rank}.et", nodes, schema="1.1.1-chakra.0.0.4", pid=1, world_size=world
        )  # as --astra-sim records it
    (folder / "job.comm_group.json").write_text(json.dumps({n: list(g) for g, n in names.items() if n != "0"}))
    (folder / "job.layout.json").write_text(json.dumps({"dp": dp, "tp": tp, "pp": pp, "dp_mode": mode, "ranks": ranks}))
    return folder / "job"


def comm(path: Path | str, groups: dict[str, list[int]]) -> list[tuple[Any, ...]]:
    """(type, comm_type, bytes, group members, src, dst) per communication node, in order."""
    trace = read_et(path)
    out = []
    for row in sorted(trace.comm):
        a = trace.comm[row]
        name = str(a.get("pg_name", "0"))
        out.append(
            (
                trace.types[row],
                a.get("comm_type"),
                a["comm_size"],
                groups.get(name, "all") if trace.types[row] == pb.COMM_COLL_NODE else None,
                a.get("comm_src"),
                a.get("comm_dst"),
            )
        )
    return out


def real_groups(prefix: Path) -> dict[str, list[int]]:
    return dict(json.loads(Path(f"{prefix}.comm_group.json").read_text()))


@pytest.mark.parametrize(
    ("layout", "small", "big"),
    [
        (("fsdp", 2, 1), 4, 8),  # TP 2 x FSDP: the case
        (("ddp", 1, 2), 4, 8),  # PP 2 x DDP
        (("fsdp", 2, 2), 8, 16),  # all three
        (("ddp", 2, 1), 4, 12),
    ],
)
def test_scaled_job_equals_the_job_built_at_that_size(
    tmp_path: Path, layout: tuple[str, int, int], small: int, big: int
) -> None:
    mode, tp, pp = layout
    captured = mesh_job(tmp_path / "small", small // (tp * pp), tp, pp, mode)
    real = mesh_job(tmp_path / "real", big // (tp * pp), tp, pp, mode)
    out = tmp_path / "out" / "job"
    result = api.scale(captured, out, big)
    groups, real_g = result.comm_groups, real_groups(real)
    for rank in range(big):
        mine = comm(f"{out}.{rank}.et", groups)
        theirs = comm(f"{real}.{rank}.et", real_g)
        # the real job names a dimension of every rank "all"; the scaled one lists its members
        assert [m[:3] + m[4:] for m in mine] == [t[:3] + t[4:] for t in theirs], rank
        for m, t in zip(mine, theirs, strict=True):
            assert (t[3] == "all" and m[3] == list(range(big))) or m[3] == t[3], rank
    report = api.check([f"{out}.{r}.et" for r in range(big)])
    assert report.ok, [p.line() for p in report.problems]
    assert {et_world_size(f"{out}.{r}.et") for r in range(big)} == {big}  # the new job's size
    written = json.loads(Path(f"{out}.layout.json").read_text())
    assert (written["dp"], written["tp"], written["pp"]) == (big // (tp * pp), tp, pp)


def test_fsdp_bytes_follow_the_units_padding(tmp_path: Path) -> None:
    """FSDP pads each parameter's rows to a multiple of the degree: a unit of a 50,257-row
    embedding (256 bytes a row) and a 64-row bias (4 bytes) gathers 25,129 x 256 + 32 x 4 bytes a
    rank at degree 2, 12,565 x 256 + 16 x 4 at degree 4; its reduce-scatter is the degree times that."""
    unit = [[50257, 256], [64, 4]]
    shard2, shard4 = 25129 * 256 + 32 * 4, 12565 * 256 + 16 * 4
    job = mesh_job(tmp_path / "in", 2, 1, 1, "fsdp")
    for rank in range(2):
        write_rank(
            tmp_path / "in" / f"job.{rank}.et",
            [node(1), coll(2, pb.ALL_GATHER, shard2, "0", (1,)), coll(3, pb.REDUCE_SCATTER, 2 * shard2, "0", (2,))],
        )
    layout = json.loads(Path(f"{job}.layout.json").read_text())
    for rank in layout["ranks"]:
        rank["fsdp_units"] = [unit]
    Path(f"{job}.layout.json").write_text(json.dumps(layout))
    result = api.scale(job, tmp_path / "out" / "job", 4)
    for rank in range(4):
        assert [c[:4] for c in comm(tmp_path / "out" / f"job.{rank}.et", result.comm_groups)] == [
            (pb.COMM_COLL_NODE, pb.ALL_GATHER, shard4, "all"),  # every rank: the default group
            (pb.COMM_COLL_NODE, pb.REDUCE_SCATTER, 4 * shard4, "all"),
        ]
    # without the units: the all-gather scales by the degrees' ratio, the reduce-scatter keeps its bytes
    del layout["ranks"][0]["fsdp_units"], layout["ranks"][1]["fsdp_units"]
    Path(f"{job}.layout.json").write_text(json.dumps(layout))
    result = api.scale(job, tmp_path / "out2" / "job", 4)
    assert [c[2] for c in comm(tmp_path / "out2" / "job.0.et", result.comm_groups)] == [shard2 // 2, 2 * shard2]


def test_plain_ddp_with_a_layout_file_scales_as_data_parallelism(tmp_path: Path) -> None:
    """tp = pp = 1 under DDP: the data-parallel rules (every node record byte for byte) apply."""
    job = mesh_job(tmp_path / "in", 2, 1, 1, "ddp")
    result = api.scale(job, tmp_path / "out" / "job", 6)
    assert result.layout is None and not (tmp_path / "out" / "job.layout.json").exists()
    for rank in range(6):  # every node record byte for byte (the metadata's world_size becomes 6)
        mine: list[bytes] = []
        theirs: list[bytes] = []
        read_et(tmp_path / "out" / f"job.{rank}.et", records=mine)
        read_et(f"{job}.{rank % 2}.et", records=theirs)
        assert mine[1:] == theirs[1:]
        assert et_world_size(str(tmp_path / "out" / f"job.{rank}.et")) == 6


@pytest.mark.slow
def test_layout_scale_refusals(tmp_path: Path) -> None:
    job = mesh_job(tmp_path / "in", 2, 2, 1, "fsdp")
    done = run_cli("scale", job, tmp_path / "out" / "x", "--ranks", "7")
    assert_one_error(done, "--ranks 7 is not a multiple of tp 2 x pp 1 = 2", status=2)
    done = run_cli("scale", job, tmp_path / "out" / "x", "--ranks", "2")
    assert_one_error(done, "--ranks 2 leaves data-parallel degree 1", status=2)
    one = mesh_job(tmp_path / "one", 1, 2, 1, "fsdp")
    done = run_cli("scale", one, tmp_path / "out" / "x", "--ranks", "4")
    assert_one_error(done, "the capture has data-parallel degree 1")
    Path(f"{job}.layout.json").write_text('{"dp": 2}')
    done = run_cli("scale", job, tmp_path / "out" / "x", "--ranks", "8")
    assert_one_error(done, "not a layout file")
    assert not (tmp_path / "out").exists() or listing(tmp_path / "out") == []


# -- real captures: the smallest job scaled to 8 ranks equals the real 8-rank capture ------------------
LAYOUTS = Path(__file__).parent / "data" / "layouts"


@pytest.mark.parametrize(
    ("case", "small", "nodes"),
    [
        ("tp2fsdp", 4, 128),  # TP 2 x FSDP
        ("pp2", 4, 40),  # PP 2 x DDP
        ("ddp", 2, 8),  # DDP alone
        ("fsdp", 2, 64),  # FSDP alone: the padded shard at 2 ranks becomes the one at 8
        ("tp2ddp", 4, 80),  # TP 2 x DDP
        ("bert_tp2ddp", 4, 112),  # BERT: three Q/K/V linears, 6 TP all-reduces a layer
        ("bert_pp2", 4, 40),
    ],
)
def test_real_small_capture_scaled_to_eight_equals_the_real_eight(
    tmp_path: Path, case: str, small: int, nodes: int
) -> None:
    captured, real = LAYOUTS / f"{case}_np{small}" / "job", LAYOUTS / f"{case}_np8" / "job"
    out = tmp_path / "job"
    result = api.scale(captured, out, 8)
    real_g = real_groups(real)
    compared = 0
    for rank in range(8):
        mine, theirs = comm(f"{out}.{rank}.et", result.comm_groups or {}), comm(f"{real}.{rank}.et", real_g)
        assert mine == theirs, rank
        compared += len(mine)
    assert compared == nodes
    if case.endswith("pp2"):  # every send has its receive, peers in the same replica
        sends = {(m[4], m[5]) for r in range(8) for m in comm(f"{out}.{r}.et", {}) if m[0] == pb.COMM_SEND_NODE}
        assert sends == {(r, r + 4) for r in range(4)} | {(r + 4, r) for r in range(4)}  # activations, gradients
    report = api.check([f"{out}.{r}.et" for r in range(8)])
    assert report.ok, [p.line() for p in report.problems]

"""``scale``: a captured job written as a data-parallel job of N ranks (rank r <- captured rank r mod K).

Real data: the committed 2-rank GPT-2 DDP capture (``tests/data/traces/cpu_gpt2_ddp2``) and the
every-gloo-op 4-rank capture (``gloo_ops_np4``), converted with ``--astra-sim`` in the test; the
2-vs-4-rank proof on captures made in the test session (``tests/captures.py``); small jobs built
with the reference's protobuf classes where a shape no capture has is needed (sub-groups without
sends, ranks of two runs).
"""

from __future__ import annotations

import io
import json
import os
import re
import resource
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from chakra.schema.protobuf import et_def_pb2 as pb
from chakra.src.third_party.utils.protolib import encodeMessage

from chakra_convert_fast.converter import ConvertOptions, api
from chakra_convert_fast.converter.et.decode import iter_records, read_et
from chakra_convert_fast.converter.ranks.jobsize import et_world_size
from chakra_convert_fast.converter.schema.chakra import CollectiveCommType, NodeType

from .captures import BERT_2, BERT_4, GPT2_2, GPT2_4, Done, Run
from .clirun import CLI, ERROR_PREFIX, assert_one_error, kill_session, listing, obey_file_modes, run_cli
from .traces import REAL_TRACES_DIR

pytestmark = [pytest.mark.slow]

GPT2 = REAL_TRACES_DIR / "cpu_gpt2_ddp2"


@pytest.fixture(scope="module")
def gpt2_job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The committed 2-rank GPT-2 DDP capture as ``--astra-sim`` .et files: prefix ``.../gpt2``."""
    out = tmp_path_factory.mktemp("gpt2")
    for rank in range(2):
        api.convert_pair(
            GPT2 / f"rank{rank}_host.json.gz",
            GPT2 / f"rank{rank}_device.json.gz",
            out / f"gpt2.{rank}.et",
            ConvertOptions(astra_sim=True),
            rank=rank,
        )
    (out / "gpt2.comm_group.json").write_text("{}\n")
    return out / "gpt2"


def collectives(path: Path | str) -> list[tuple[str, str, int]]:
    """(kind, group, bytes) of each collective of a file, in file order."""
    trace = read_et(path)
    found = []
    for row in sorted(trace.comm):
        attrs = trace.comm[row]
        if trace.types[row] == NodeType.COMM_COLL_NODE:
            group = attrs.get("pg_name", "")
            found.append((CollectiveCommType(attrs["comm_type"]).name, group or "0", attrs["comm_size"]))
    return found


def totals(path: Path | str) -> dict[tuple[str, str], tuple[int, int]]:
    """(kind, group) -> (count, bytes) of a file's collectives."""
    out: dict[tuple[str, str], tuple[int, int]] = {}
    for kind, group, size in collectives(path):
        count, total = out.get((kind, group), (0, 0))
        out[(kind, group)] = (count + 1, total + size)
    return out


def assert_copy(path: Path, captured: Path, ranks: int) -> None:
    """``path`` is ``captured``'s records byte for byte, but for the job size its GlobalMetadata
    records (where it records one: ``world_size``, then the new job's)."""
    new, old = [m for _, m in iter_records(path)], [m for _, m in iter_records(captured)]
    assert new[1:] == old[1:], path
    if et_world_size(str(captured)) is None:
        assert new[0] == old[0], path
    else:
        assert et_world_size(str(path)) == ranks, path


# -- DDP jobs: every rank a byte-for-byte copy of its captured rank -------------------------------------
@pytest.mark.parametrize("ranks", [1, 2, 5, 8])
def test_ddp_ranks_are_copied_byte_for_byte(gpt2_job: Path, tmp_path: Path, ranks: int) -> None:
    out = tmp_path / "scaled" / "job"
    result = api.scale(gpt2_job, out, ranks)
    assert (result.captured_ranks, result.ranks) == (2, ranks)
    assert listing(tmp_path / "scaled") == sorted([f"job.{r}.et" for r in range(ranks)] + ["job.comm_group.json"])
    for r in range(ranks):
        assert_copy(Path(f"{out}.{r}.et"), Path(f"{gpt2_job}.{r % 2}.et"), ranks)
    assert json.loads(Path(f"{out}.comm_group.json").read_text()) == {}
    assert result.comm_group_path == f"{out}.comm_group.json"
    assert result.rewritten_nodes == 0 and result.nodes == (len(read_et(f"{gpt2_job}.0.et")),) * 2
    assert result.bytes_written == sum(os.path.getsize(p) for p in (tmp_path / "scaled").iterdir())
    report = api.check([f"{out}.{r}.et" for r in range(ranks)])
    assert report.ok, [p.line() for p in report.problems]
    assert report.comm_group_path == f"{out}.comm_group.json"  # found beside the files


def test_result_lists_rank_zeros_collectives(gpt2_job: Path, tmp_path: Path) -> None:
    result = api.scale(gpt2_job, tmp_path / "j", 4)
    assert list(result.collectives) == collectives(f"{gpt2_job}.0.et")
    assert result.collectives and all(kind == "ALL_REDUCE" and group == "0" for kind, group, _ in result.collectives)


def test_progress_counts_every_rank_written(gpt2_job: Path, tmp_path: Path) -> None:
    seen: list[tuple[str, int, int]] = []
    api.scale(gpt2_job, tmp_path / "j", 7, progress=lambda *a: seen.append(a))
    assert seen == [("ranks", done, 7) for done in range(1, 8)]


def test_cli_scale_summary(gpt2_job: Path, tmp_path: Path) -> None:
    done = run_cli("scale", gpt2_job, tmp_path / "j", "--ranks", "3")
    assert done.returncode == 0, done.stderr
    assert "scaled 2 captured rank(s)" in done.stderr and "ALL_REDUCE" in done.stderr
    assert listing(tmp_path) == ["j.0.et", "j.1.et", "j.2.et", "j.comm_group.json"]
    helped = run_cli("scale", "--help")
    assert helped.returncode == 0 and "--ranks 64" in helped.stdout


# -- the proof against reality: 2 captured ranks scaled to 4 == the real 4-rank capture ------------------
@pytest.mark.parametrize(("small", "big"), [(GPT2_2, GPT2_4), (BERT_2, BERT_4)], ids=["gpt2", "bert"])
def test_two_ranks_scaled_to_four_have_the_real_four_rank_collectives(
    captured: Callable[[Run], Done], tmp_path: Path, small: Run, big: Run
) -> None:
    """Same model and per-rank batch on 2 and on 4 CPU ranks (``chakra-profile --convert``): the
    2-rank job scaled to 4 issues, on every rank, the collectives the real 4-rank job issues
    (kind, count, bytes, group, order: DDP's gradient all-reduces, BERT's buffer broadcast), and
    its group file is the real one's."""
    two, four = captured(small), captured(big)
    result = api.scale(two.outdir / small.name, tmp_path / "scaled", 4)
    real = [collectives(four.outdir / f"{big.name}.{r}.et") for r in range(4)]
    scaled = [collectives(f"{tmp_path / 'scaled'}.{r}.et") for r in range(4)]
    assert scaled == real
    assert real[0], "the real capture has collectives"
    real_groups = json.loads((four.outdir / f"{big.name}.comm_group.json").read_text())
    assert result.comm_groups == real_groups
    for r in range(4):  # each scaled rank is its captured rank, ids and bytes kept
        captured_rank = two.outdir / f"{small.name}.{r % 2}.et"
        assert_copy(Path(f"{tmp_path / 'scaled'}.{r}.et"), captured_rank, 4)
    assert api.check([f"{tmp_path / 'scaled'}.{r}.et" for r in range(4)]).ok


# -- sub-groups: copied per replica --------------------------------------------------------------------
def attr(name: str, value: Any) -> pb.AttributeProto:
    if isinstance(value, bool):
        return pb.AttributeProto(name=name, bool_val=value)
    if isinstance(value, int):
        return pb.AttributeProto(name=name, int64_val=value)
    return pb.AttributeProto(name=name, string_val=value)


def node(node_id: int, node_type: int = pb.COMP_NODE, deps: tuple[int, ...] = (), **attrs: Any) -> pb.Node:
    return pb.Node(
        id=node_id,
        name=f"op{node_id}",
        type=node_type,
        data_deps=deps,
        duration_micros=5,
        attr=[attr(k, v) for k, v in attrs.items()],
    )


def allreduce(node_id: int, size: int, deps: tuple[int, ...] = (), pg: str = "0") -> pb.Node:
    return node(node_id, pb.COMM_COLL_NODE, deps, comm_type=pb.ALL_REDUCE, comm_size=size, pg_name=pg, is_cpu_op=False)


def write_rank(path: Path, nodes: list[pb.Node], **metadata: Any) -> Path:
    buffer = io.BytesIO()
    meta = {"time": "2026-11-24 05:00:00", "start_ts": 100, "finish_ts": 200, **metadata}
    encodeMessage(buffer, pb.GlobalMetadata(version="0.0.4", attr=[attr(k, v) for k, v in meta.items()]))
    for n in nodes:
        encodeMessage(buffer, n)
    path.write_bytes(buffer.getvalue())
    return path


def subgroup_job(folder: Path, groups: dict[str, list[int]] | None = None) -> Path:
    """4 ranks: an all-reduce on the rank's pair ({0,1} is group 1, {2,3} group 2), one on group 3
    (every rank, named), one on the default group."""
    folder.mkdir(exist_ok=True)
    for rank in range(4):
        pair = "1" if rank < 2 else "2"
        nodes = [node(1), allreduce(2, 64, (1,), pg=pair), allreduce(3, 128, (2,), pg="3"), allreduce(4, 256, (3,))]
        write_rank(folder / f"job.{rank}.et", nodes)
    groups = {"1": [0, 1], "2": [2, 3], "3": [0, 1, 2, 3]} if groups is None else groups
    (folder / "job.comm_group.json").write_text(json.dumps(groups))
    return folder / "job"


def test_subgroups_are_copied_per_replica(tmp_path: Path) -> None:
    job = subgroup_job(tmp_path / "in")
    out = tmp_path / "out" / "big"
    result = api.scale(job, out, 12)
    # M = 3 (the largest id): replica j's copy of group g is g + 3j; group 3 (every rank) spans all 12
    expected = {"3": list(range(12))}
    for j in range(3):
        expected[str(1 + 3 * j)] = [4 * j, 4 * j + 1]
        expected[str(2 + 3 * j)] = [4 * j + 2, 4 * j + 3]
    assert result.comm_groups == dict(sorted(expected.items(), key=lambda item: int(item[0])))
    assert json.loads(Path(f"{out}.comm_group.json").read_text()) == result.comm_groups
    for r in range(12):
        j, k = divmod(r, 4)
        pair = str((1 if k < 2 else 2) + 3 * j)
        assert collectives(f"{out}.{r}.et") == [
            ("ALL_REDUCE", pair, 64),
            ("ALL_REDUCE", "3", 128),
            ("ALL_REDUCE", "0", 256),
        ], r
        mine, theirs = read_et(f"{out}.{r}.et"), read_et(f"{job}.{k}.et")
        assert list(mine.ids) == list(theirs.ids) and list(mine.deps) == list(theirs.deps)
        assert mine.names == theirs.names and list(mine.durations) == list(theirs.durations)
    assert_copy(Path(f"{out}.1.et"), Path(f"{job}.1.et"), 12)  # replica 0: unchanged
    assert result.rewritten_nodes == 12
    report = api.check([f"{out}.{r}.et" for r in range(12)])
    assert report.ok, [p.line() for p in report.problems]


def test_thousands_of_ranks(tmp_path: Path) -> None:
    job = subgroup_job(tmp_path / "in")
    result = api.scale(job, tmp_path / "out" / "big", 4096)
    assert len(os.listdir(tmp_path / "out")) == 4097 and len(result.comm_groups) == 2 * 1024 + 1
    assert result.comm_groups["3"] == list(range(4096))
    assert result.comm_groups[str(2 + 3 * 1023)] == [4094, 4095]
    assert collectives(tmp_path / "out" / "big.4095.et")[0] == ("ALL_REDUCE", str(2 + 3 * 1023), 64)


# -- refusals: one line, exit 1, nothing written ------------------------------------------------------
def assert_refused(done: Any, out_dir: Path, *expected: str, status: int = 1) -> None:
    assert_one_error(done, *expected, status=status)
    assert not out_dir.exists() or listing(out_dir) == [], listing(out_dir)


def test_subgroups_that_do_not_tile_are_refused(tmp_path: Path) -> None:
    job = subgroup_job(tmp_path / "in")
    done = run_cli("scale", job, tmp_path / "out" / "x", "--ranks", "6")
    assert_refused(
        done,
        tmp_path / "out",
        "communicator group 1 [0, 1] does not tile 6 ranks",
        "--ranks must be a multiple of the 4 captured ranks",
        status=2,  # an option that cannot apply: a usage error
    )


def test_sends_and_receives_are_refused(tmp_path: Path) -> None:
    """The every-op gloo capture has send/recv pairs between ranks 0 and 1 (pipeline peers)."""
    converted = run_cli("convert-all", REAL_TRACES_DIR / "gloo_ops_np4", tmp_path / "et", "--astra-sim")
    assert converted.returncode == 0, converted.stderr
    done = run_cli("scale", tmp_path / "et" / "trace", tmp_path / "out" / "x", "--ranks", "8")
    assert_refused(
        done,
        tmp_path / "out",
        "trace.0.et: node",
        "is a send to rank 1",
        "point-to-point (pipeline) peers cannot be scaled",
    )


def test_missing_rank(gpt2_job: Path, tmp_path: Path) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    for rank in (0, 2):
        (folder / f"j.{rank}.et").write_bytes(Path(f"{gpt2_job}.0.et").read_bytes())
    done = run_cli("scale", folder / "j", tmp_path / "out" / "x", "--ranks", "4")
    assert_refused(done, tmp_path / "out", "j.1.et: rank 1 of 0..2 is missing")
    done = run_cli("scale", folder / "nothing", tmp_path / "out" / "x", "--ranks", "4")
    assert_refused(done, tmp_path / "out", "no ranks found: no nothing.<rank>.et in")
    done = run_cli("scale", folder / "j.0.et", tmp_path / "out" / "x", "--ranks", "4")
    assert_refused(done, tmp_path / "out", "no ranks found", "(name the job's prefix, j, not one of its files)")


def _memory_limit() -> None:
    limit = 2 << 30  # set(range(N)) of the old check would have taken the machine's memory
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def test_a_stray_rank_number_costs_nothing_and_is_named(gpt2_job: Path, tmp_path: Path) -> None:
    """Issue 29: an empty ``j.30000000.et`` beside ranks 0 and 1 cost 3 GB (``set(range(N))``); a
    larger number the machine's memory. It is refused by name, at the cost of the listing."""
    folder = tmp_path / "in"
    folder.mkdir()
    for rank in (0, 1):
        (folder / f"j.{rank}.et").write_bytes(Path(f"{gpt2_job}.0.et").read_bytes())
    (folder / "j.3000000000.et").touch()
    done = run_cli("scale", folder / "j", tmp_path / "out" / "x", "--ranks", "4", preexec_fn=_memory_limit)
    assert_refused(
        done,
        tmp_path / "out",
        "j.2.et: rank 2 of 0..3000000000 is missing (2,999,999,998 missing)",
        "ranks 0..1 are there, then j.3000000000.et",
        "a stray or another job's rank file?",
    )


@pytest.mark.parametrize(
    ("ranks", "gap"),
    [
        ([], None),
        ([0], None),
        ([0, 1, 2], None),
        ([1], 0),
        ([0, 2], 1),
        ([0, 1, 3], 2),
        ([0, 1, 2, 10**12], 3),
    ],
)
def test_first_gap(ranks: list[int], gap: int | None) -> None:
    from chakra_convert_fast.converter.ranks.discover import first_gap

    assert first_gap(ranks) == gap


def test_ranks_of_different_jobs(gpt2_job: Path, tmp_path: Path) -> None:
    """A rank of another model (other collectives), and a rank of another run of the same job
    (same collectives, captured a minute later): both refused, after rank 0 was already read."""
    other = subgroup_job(tmp_path / "other", {"1": [0, 1], "2": [2, 3], "3": [0, 1, 2, 3]})
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    (mixed / "j.0.et").write_bytes(Path(f"{gpt2_job}.0.et").read_bytes())
    (mixed / "j.1.et").write_bytes(Path(f"{other}.3.et").read_bytes())
    (mixed / "j.comm_group.json").write_text(json.dumps({"3": [0, 1]}))
    done = run_cli("scale", mixed / "j", tmp_path / "out" / "x", "--ranks", "4")
    assert_refused(done, tmp_path / "out", "j.1.et: node 2 'op2' is on group '2', which is not in")

    (mixed / "j.1.et").write_bytes(Path(f"{gpt2_job}.1.et").read_bytes()[:-40000] + b"")  # a cut rank
    done = run_cli("scale", mixed / "j", tmp_path / "out" / "x", "--ranks", "4")
    assert_refused(done, tmp_path / "out", "j.1.et: truncated")

    two = tmp_path / "two"
    two.mkdir()
    write_rank(two / "j.0.et", [allreduce(1, 64)])
    write_rank(two / "j.1.et", [allreduce(1, 32)])
    done = run_cli("scale", two / "j", tmp_path / "out" / "x", "--ranks", "4")
    assert_refused(
        done,
        tmp_path / "out",
        "collectives on group 0 differ from rank 0's",
        "ALL_REDUCE of 32 bytes here, ALL_REDUCE of 64 bytes on rank 0",
        "ranks of different jobs?",
    )

    write_rank(two / "j.1.et", [allreduce(1, 64)], time="2026-11-24 05:01:00", start_ts=300, finish_ts=400)
    done = run_cli("scale", two / "j", tmp_path / "out" / "x", "--ranks", "4")
    assert_refused(done, tmp_path / "out", "captured at 2026-11-24 05:01:00", "ranks of different jobs?")
    # ranks of several hosts: clocks differ (windows apart) but the wall clock agrees: accepted
    write_rank(two / "j.1.et", [allreduce(1, 64)], start_ts=900300, finish_ts=900400)
    assert run_cli("scale", two / "j", tmp_path / "out" / "x", "--ranks", "4").returncode == 0


def test_collectives_differ_on_a_named_group(tmp_path: Path) -> None:
    job = subgroup_job(tmp_path / "in")
    write_rank(
        tmp_path / "in" / "job.2.et",
        [node(1), allreduce(2, 64, (1,), pg="2"), allreduce(3, 99, (2,), pg="3"), allreduce(4, 256, (3,))],
    )
    done = run_cli("scale", job, tmp_path / "out" / "x", "--ranks", "8")
    assert_refused(
        done,
        tmp_path / "out",
        "job.2.et: its collectives on group 3 differ from rank 0's",
        "ALL_REDUCE of 99 bytes here, ALL_REDUCE of 128 bytes on rank 0",
    )


@pytest.mark.parametrize(
    ("groups", "expected"),
    [
        ({"1": [0, 1, 5]}, "communicator group 1 names rank(s) [5] but the job has 4 rank(s)"),
        ({"0": [0, 1]}, "group id '0': ASTRA-sim needs whole numbers > 0"),
        ({"\u00b2": [0, 1]}, "group id '\u00b2': ASTRA-sim needs whole numbers > 0, in ASCII decimal digits"),
        ({"\u0663": [0, 1]}, "group id '\u0663': ASTRA-sim needs whole numbers > 0, in ASCII decimal digits"),
        ({str(10**23): [0, 1]}, f"group id '{10**23}': ASTRA-sim needs whole numbers > 0"),
        ({"1": "0,1"}, "its ranks must be a list of integers"),
        ({"1": [0, 1], "2": [2, 3]}, "node 3 'op3' is on group '3', which is not in"),
        ({"1": [0, 2], "2": [1, 3], "3": [0, 1, 2, 3]}, "is on group 1 [0, 2], which does not hold rank 1"),
    ],
)
def test_group_file_that_does_not_match(tmp_path: Path, groups: dict[str, Any], expected: str) -> None:
    job = subgroup_job(tmp_path / "in", groups)
    done = run_cli("scale", job, tmp_path / "out" / "x", "--ranks", "8")
    assert_refused(done, tmp_path / "out", expected)


def test_group_file_not_json_and_missing(tmp_path: Path) -> None:
    job = subgroup_job(tmp_path / "in")
    Path(f"{job}.comm_group.json").write_text("{not json")
    assert_refused(
        run_cli("scale", job, tmp_path / "out" / "x", "--ranks", "8"),
        tmp_path / "out",
        "not a JSON communicator group file",
    )
    Path(f"{job}.comm_group.json").unlink()
    assert_refused(
        run_cli("scale", job, tmp_path / "out" / "x", "--ranks", "8"),
        tmp_path / "out",
        "is on group '1', which is not in no communicator group file",
    )


def test_old_group_file_name_is_read(tmp_path: Path) -> None:
    job = subgroup_job(tmp_path / "in")
    Path(f"{job}.comm_group.json").rename(tmp_path / "in" / "comm_group.json")
    assert api.find_comm_groups(job) == str(tmp_path / "in" / "comm_group.json")
    assert api.scale(job, tmp_path / "out" / "x", 8).comm_groups["4"] == [4, 5]


def test_outputs_that_cannot_be_written(gpt2_job: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("a file, not a folder")
    assert_one_error(run_cli("scale", gpt2_job, blocker / "x", "--ranks", "4"), "exists and is not a directory")
    assert blocker.read_text() == "a file, not a folder"

    out = tmp_path / "out"
    out.mkdir()
    (out / "x.2.et").mkdir()  # a folder in the way of rank 2
    assert_one_error(run_cli("scale", gpt2_job, out / "x", "--ranks", "4"), "x.2.et: is a directory")
    assert listing(out) == ["x.2.et"]
    os.rmdir(out / "x.2.et")

    (out / "x.9.et").write_text("another job's rank 9")
    assert_one_error(run_cli("scale", gpt2_job, out / "x", "--ranks", "4"), "x.9.et: exists", "beyond --ranks 4")
    assert listing(out) == ["x.9.et"]

    assert_one_error(run_cli("scale", gpt2_job, gpt2_job, "--ranks", "2"), "would overwrite the input")


def test_failure_after_some_ranks_leaves_the_old_outputs(gpt2_job: Path, tmp_path: Path) -> None:
    """A job already there is untouched when the new one fails at its last rank (all or nothing)."""
    out = tmp_path / "out"
    api.scale(gpt2_job, out / "x", 4)
    before = {name: (out / name).read_bytes() for name in listing(out)}
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "j.0.et").write_bytes(Path(f"{gpt2_job}.0.et").read_bytes())
    (bad / "j.1.et").write_bytes(b"\x05not a trace")
    assert_one_error(run_cli("scale", bad / "j", out / "x", "--ranks", "4"), "j.1.et")
    assert {name: (out / name).read_bytes() for name in listing(out)} == before


def test_ranks_must_be_positive(gpt2_job: Path, tmp_path: Path) -> None:
    done = run_cli("scale", gpt2_job, tmp_path / "x", "--ranks", "0")
    assert done.returncode == 2 and "must be at least 1" in done.stderr


# -- the scaled job in the real ASTRA-sim ------------------------------------------------------------------


FINISHED = re.compile(r"sys\[(\d+)\] finished, (\d+) cycles, exposed communication (\d+) cycles")


@pytest.mark.parametrize("ranks", [8, 64])
def test_scaled_job_finishes_on_every_rank_in_astra_sim(
    simulator: Path, gpt2_job: Path, tmp_path: Path, ranks: int
) -> None:
    """The committed 2-rank GPT-2 capture scaled to 8 and 64 NPUs (a ring), with its group file:
    one ``finished`` line per rank, and every rank spent time in its gradient all-reduces."""
    result = api.scale(gpt2_job, tmp_path / "job", ranks)
    env = dict(os.environ, COMM_GROUPS=result.comm_group_path, LOGDIR=str(tmp_path / "logs"))
    done = subprocess.run(
        [str(simulator / "simulate.sh"), str(tmp_path / "job"), str(ranks)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    finished = {int(m.group(1)): (int(m.group(2)), int(m.group(3))) for m in FINISHED.finditer(done.stdout)}
    assert sorted(finished) == list(range(ranks)), (done.stdout + done.stderr)[-3000:]
    assert all(cycles >= exposed > 0 for cycles, exposed in finished.values()), finished


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signal_while_writing_leaves_nothing(tmp_path: Path, signum: int) -> None:
    """Stopped once its staged outputs appear, signalled, resumed: one line, 143/130, nothing left
    (no output, no staging folder)."""
    job = subgroup_job(tmp_path / "in")
    out = tmp_path / "out"
    out.mkdir()
    with subprocess.Popen(
        [*CLI, "scale", str(job), str(out / "x"), "--ranks", "20000"],
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    ) as process:
        try:
            deadline = time.monotonic() + 60
            while not any(os.listdir(out / name) for name in os.listdir(out) if (out / name).is_dir()):
                assert process.poll() is None and time.monotonic() < deadline, "never saw the staged outputs"
                time.sleep(0.005)
            os.kill(process.pid, signal.SIGSTOP)
            os.kill(process.pid, signum)
            os.kill(process.pid, signal.SIGCONT)
            _, err = process.communicate(timeout=60)
        finally:
            kill_session(process.pid)
    assert process.returncode == 128 + signum, err
    assert err.count("\n") == 1 and err.startswith(ERROR_PREFIX), err
    assert listing(out) == []


def test_log_file_cannot_be_an_output(gpt2_job: Path, tmp_path: Path) -> None:
    done = run_cli("scale", gpt2_job, tmp_path / "x", "--ranks", "4", "--log-filename", tmp_path / "x.3.et")
    assert_one_error(done, "the log file would overwrite a rank or group file of scale")
    assert listing(tmp_path) == []


def test_check_finds_the_jobs_group_file(tmp_path: Path) -> None:
    """``check`` without ``--comm-groups``: PREFIX.comm_group.json, else the old comm_group.json."""
    job = subgroup_job(tmp_path / "in")
    files = [f"{job}.{r}.et" for r in range(4)]
    done = run_cli("check", *files)
    assert done.returncode == 0 and f"communicator groups: {job}.comm_group.json" in done.stdout, done.stderr
    Path(f"{job}.comm_group.json").rename(tmp_path / "in" / "comm_group.json")
    done = run_cli("check", *files)
    assert done.returncode == 0 and f"communicator groups: {tmp_path / 'in' / 'comm_group.json'}" in done.stdout
    (tmp_path / "in" / "comm_group.json").unlink()
    done = run_cli("check", *files)
    assert done.returncode == 1 and "group 1 is used but no communicator group file was given" in done.stderr


def test_output_folder_without_write_permission(gpt2_job: Path, tmp_path: Path) -> None:
    out = tmp_path / "locked"
    out.mkdir()
    out.chmod(0o555)
    try:
        done = run_cli("scale", gpt2_job, out / "x", "--ranks", "4", preexec_fn=obey_file_modes())
        assert_one_error(done, "Permission denied")
        assert listing(out) == []
    finally:
        out.chmod(0o755)


def _limit_file_size() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 16, 1 << 16))  # every rank file is larger


def test_file_size_limit_while_writing(gpt2_job: Path, tmp_path: Path) -> None:
    """The class of a full disk, for real: the first rank file cannot be written whole."""
    out = tmp_path / "out"
    out.mkdir()
    done = run_cli("scale", gpt2_job, out / "x", "--ranks", "4", preexec_fn=_limit_file_size)
    assert_one_error(done, "x.0.et: cannot write", "File too large")
    assert listing(out) == []

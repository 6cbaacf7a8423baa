"""``ranks/alltoallv.py``: an all-to-all with splits gets one size on every rank of its group (the
largest rank's input), what ASTRA-sim needs to run it; everything else is left byte for byte."""

from __future__ import annotations

from pathlib import Path

from chakra.schema.protobuf import et_def_pb2 as pb

from chakra_convert_fast.converter import api
from chakra_convert_fast.converter.et.decode import read_et
from chakra_convert_fast.converter.ranks.alltoallv import even_all_to_all

from .test_check import allreduce, node, write


def all_to_all(node_id: int, size: int, pg: str = "0", deps: tuple[int, ...] = ()) -> pb.Node:
    return node(node_id, pb.COMM_COLL_NODE, deps, comm_type=pb.ALL_TO_ALL, comm_size=size, pg_name=pg, is_cpu_op=False)


def sizes(path: Path) -> list[tuple[int, int, str]]:
    """(comm_type, comm_size, pg_name) of each communication node, in id order."""
    trace = read_et(path)
    return [
        (trace.comm[r]["comm_type"], trace.comm[r]["comm_size"], trace.comm[r]["pg_name"])
        for r in sorted(trace.comm, key=lambda r: trace.ids[r])
    ]


def test_uneven_all_to_alls_get_the_largest_size_and_even_ones_stay(tmp_path: Path) -> None:
    ranks = [
        [node(1), all_to_all(2, 32, deps=(1,)), all_to_all(3, 1000, deps=(2,)), allreduce(4, 64, (3,))],
        [node(1), all_to_all(2, 32, deps=(1,)), all_to_all(3, 1200, deps=(2,)), allreduce(4, 64, (3,))],
    ]
    paths = [write(tmp_path / f"job.{r}.et", nodes) for r, nodes in enumerate(ranks)]
    assert not api.check(paths).ok  # 1,000 against 1,200 bytes: ASTRA-sim hangs
    before = [p.read_bytes() for p in paths]

    assert even_all_to_all([str(p) for p in paths]) == (1, 1)

    assert paths[1].read_bytes() == before[1]  # the largest already: untouched
    assert sizes(paths[0]) == [(pb.ALL_TO_ALL, 32, "0"), (pb.ALL_TO_ALL, 1200, "0"), (pb.ALL_REDUCE, 64, "0")]
    changed, original = read_et(paths[0]), read_et(paths[1])
    assert list(changed.ids) == list(original.ids) and list(changed.deps) == list(original.deps)
    assert api.check(paths).ok
    assert not list(tmp_path.glob("*.evening"))


def test_each_group_is_evened_apart_and_a_group_that_disagrees_is_left_to_check(tmp_path: Path) -> None:
    ranks = [
        [all_to_all(1, 10, "5"), all_to_all(2, 7, "6"), all_to_all(3, 100)],
        [all_to_all(1, 30, "5"), all_to_all(2, 9, "6"), all_to_all(3, 50)],
        [all_to_all(1, 20, "7"), all_to_all(2, 8, "6"), all_to_all(4, 8, "6"), all_to_all(3, 75)],
    ]
    paths = [write(tmp_path / f"job.{r}.et", nodes) for r, nodes in enumerate(ranks)]
    assert even_all_to_all([str(p) for p in paths]) == (2, 3)  # group 5 (rank 0) and the default group (ranks 1, 2)
    assert [s for _, s, _ in sizes(paths[0])] == [30, 7, 100]
    assert [s for _, s, _ in sizes(paths[1])] == [30, 9, 100]
    assert [s for _, s, _ in sizes(paths[2])] == [20, 8, 100, 8]  # group 6: 1 all-to-all on ranks 0, 1 but 2 here


def test_a_job_with_even_all_to_alls_is_not_rewritten(tmp_path: Path) -> None:
    paths = [write(tmp_path / f"job.{r}.et", [all_to_all(1, 64), allreduce(2, 8, (1,))]) for r in range(2)]
    stamps = [p.stat().st_mtime_ns for p in paths]
    assert even_all_to_all([str(p) for p in paths]) == (0, 0)
    assert [p.stat().st_mtime_ns for p in paths] == stamps

"""The id -> row index: an array over dense ids, a dict over sparse ones, the same answers."""

from __future__ import annotations

import random

import pytest

from chakra_convert_fast.converter.convert.idindex import ABSENT, DuplicateId, IdIndex

DENSE_AND_SPARSE = {
    "contiguous, in order": list(range(5, 105)),
    "dense, shuffled, with gaps": random.Random(3).sample(range(1000, 1300), 200),
    "sparse": [7 + k * (1 << 40) for k in range(100)][::-1],
    "one huge id among small ones": [*range(50), 2**63],
}


@pytest.mark.parametrize("name", sorted(DENSE_AND_SPARSE))
def test_every_id_finds_its_row_and_nothing_else_does(name: str) -> None:
    ids = DENSE_AND_SPARSE[name]
    index = IdIndex(ids)
    for row, node_id in enumerate(ids):
        assert index.get(node_id) == row
        assert index[node_id] == row
    present = set(ids)
    for absent in (0, 1, min(ids) - 1, max(ids) + 1, 2**64 - 1, 4, 104 + 1):
        if absent not in present:
            assert index.get(absent) == -1
            assert index.get(absent, -7) == -7
            with pytest.raises(KeyError):
                index[absent]


def test_the_index_is_an_array_for_dense_ids_and_a_dict_for_sparse_ones() -> None:
    assert IdIndex(DENSE_AND_SPARSE["dense, shuffled, with gaps"])._table is not None
    assert IdIndex(DENSE_AND_SPARSE["sparse"])._table is None


@pytest.mark.parametrize("name", sorted(DENSE_AND_SPARSE))
def test_rows_of_many_ids_with_the_absent_and_unflagged_ones_marked(name: str) -> None:
    ids = DENSE_AND_SPARSE[name]
    index = IdIndex(ids)
    wanted = [ids[3], ids[0], max(ids) + 1, ids[1], ids[2], min(ids) - 1 if min(ids) else 2**64 - 1]
    flags = [1, 1, 1, 0, 1, 1]
    assert list(index.rows(wanted, flags)) == [3, 0, ABSENT, -1, 2, ABSENT]


@pytest.mark.parametrize(
    "ids, first_row, row",
    [
        ([1, 2, 3, 2, 3], 1, 3),  # dense: the first repeat in row order
        ([1 << 50, 5, 1 << 50, 5], 0, 2),  # sparse
        ([4, 4], 0, 1),
    ],
)
def test_a_repeated_id_names_both_rows(ids: list[int], first_row: int, row: int) -> None:
    with pytest.raises(DuplicateId) as caught:
        IdIndex(ids)
    assert (caught.value.node_id, caught.value.first_row, caught.value.row) == (ids[row], first_row, row)


def test_no_ids() -> None:
    index = IdIndex([])
    assert index.get(0) == -1
    assert len(index.rows([], [])) == 0

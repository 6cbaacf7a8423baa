"""The default suite's long sweeps, whole: the lead runs them when the code they cover changes
(``pytest bench/test_long_sweeps.py``; ~3 minutes on 2 cores). The default suite keeps a
representative point of each (the same assertions, from the same helpers), so nothing here is a
mechanism only bench checks.

* every real trace of ``tests/test_parity_real.py``'s list in both node orders, reversed and
  shuffled (the default suite reorders each one way, the two orders in turn);
* the reversed chain of ``tests/test_deep_trace.py`` 200,000 deep (the default suite: 20,000, which
  with the recursion limit at 150 proves no code path recurses just the same).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_deep_trace import assert_chain_converts_without_recursion
from tests.test_parity_real import ORDERS, REAL_TRACES, assert_reordered_parity


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("name", REAL_TRACES)
def test_real_trace_in_both_orders(name: str, order: str, tmp_path: Path) -> None:
    assert_reordered_parity(name, order, tmp_path)


def test_reversed_200k_chain_converts_without_recursion(tmp_path: Path) -> None:
    assert_chain_converts_without_recursion(200_000, tmp_path)

"""``bench.roofline_machine``'s measurement of what the capture's tracing adds to each recorded op
(``bench.roofline_check`` takes it out of the measured compute)."""

from __future__ import annotations

import pytest

from bench import roofline_machine

pytestmark = [pytest.mark.slow]


def test_tracing_adds_a_measured_cost_to_each_recorded_op() -> None:
    pytest.importorskip("torch", reason="the profiler extra (torch) is not installed")
    cost, untraced = roofline_machine.profiler_cost(ops=300)
    assert set(cost) == set(untraced) == {"aten::add", "aten::view"}  # each op found among the profiler's events
    assert all(us > 0 for us in untraced.values()), untraced
    # Kineto with shapes and the execution trace observer record microseconds per op more than the
    # op takes (a bare view takes under one); a cost of 0 or less would mean the op was not timed.
    assert all(0 < us < 1_000 for us in cost.values()), cost

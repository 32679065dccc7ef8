"""Where a replica starts following, non-controller mode: the cases of [rMin, rMax) against [pMin, pMax)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker_store.ha.errors import ReplicaLogDivergedError
from broker_store.ha.replica_start import StartAction, decide_replica_start, interpret_batch_offset

FOLLOW, RESTART, DIVERGED = StartAction.FOLLOW, StartAction.RESTART, StartAction.DIVERGED


@pytest.mark.parametrize(("r_min", "r_max", "p_min", "p_max", "action", "offset"), [
    (0, 0, 0, 0, FOLLOW, 0),             # both new
    (0, 0, 0, 500, FOLLOW, 0),           # new replica, primary still has everything
    (0, 0, 1000, 5000, RESTART, 1000),   # new replica, primary's retention moved its min
    (0, 400, 1000, 5000, RESTART, 1000),  # offline for long: entirely below pMin
    (0, 1000, 1000, 5000, FOLLOW, 1000),  # ends exactly at pMin: nothing missing, keep it
    (1000, 3000, 1000, 5000, FOLLOW, 3000),  # fell behind
    (0, 5000, 1000, 5000, FOLLOW, 5000),  # level
    (0, 6000, 1000, 5000, DIVERGED, 5000),   # ahead of the primary
    (7000, 9000, 1000, 5000, DIVERGED, 5000),  # starts past the primary's end
])
def test_cases(r_min: int, r_max: int, p_min: int, p_max: int, action: StartAction, offset: int) -> None:
    decision = decide_replica_start(replica_min=r_min, replica_max=r_max, primary_min=p_min, primary_max=p_max)
    assert (decision.action, decision.offset) == (action, offset)
    assert decide_replica_start(replica_max=r_max, primary_min=p_min, primary_max=p_max).action is action


def test_diverged_is_reported_not_truncated() -> None:
    decision = decide_replica_start(replica_min=7000, replica_max=9000, primary_min=0, primary_max=5000)
    assert "the primary lost data" in decision.reason and "operator" in decision.reason
    with pytest.raises(ReplicaLogDivergedError) as info:
        decision.raise_if_diverged(replica_min=7000, replica_max=9000, primary_min=0, primary_max=5000)
    assert (info.value.replica_max, info.value.primary_max) == (9000, 5000)
    decide_replica_start(replica_max=1, primary_min=0, primary_max=5).raise_if_diverged(
        replica_min=0, replica_max=1, primary_min=0, primary_max=5)  # no raise


def test_bad_ranges_are_rejected() -> None:
    with pytest.raises(ValueError):
        decide_replica_start(replica_max=0, primary_min=5, primary_max=4)
    with pytest.raises(ValueError):
        decide_replica_start(replica_min=5, replica_max=4, primary_min=0, primary_max=9)


def test_replica_reads_the_primary_decision_from_the_batch_offset() -> None:
    assert interpret_batch_offset(replica_min=0, replica_max=300, batch_offset=300).action is FOLLOW
    restart = interpret_batch_offset(replica_min=0, replica_max=300, batch_offset=1024)
    assert (restart.action, restart.offset) == (RESTART, 1024)
    diverged = interpret_batch_offset(replica_min=0, replica_max=300, batch_offset=200)
    assert diverged.action is DIVERGED and "100 bytes the primary does not have" in diverged.reason


@given(st.integers(0, 10**6), st.integers(0, 10**6), st.integers(0, 10**6), st.integers(0, 10**6))
def test_both_sides_agree(a: int, b: int, c: int, d: int) -> None:
    """The primary's decision, carried as a batch offset, gives the replica the same action and offset."""
    r_min, r_max = sorted((a, b))
    p_min, p_max = sorted((c, d))
    primary = decide_replica_start(replica_max=r_max, primary_min=p_min, primary_max=p_max)
    replica = interpret_batch_offset(replica_min=r_min, replica_max=r_max, batch_offset=primary.offset)
    assert (replica.action, replica.offset) == (primary.action, primary.offset)
    assert primary.action is not RESTART or r_max < primary.offset
    assert primary.action is not DIVERGED or r_max > p_max

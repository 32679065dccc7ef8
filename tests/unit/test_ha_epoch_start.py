"""The replica's epoch-handshake decision: the six positions (docs/architecture.md, "Replication and
quorum writes") of [rMin, rMax) against [pMin, pMax],
new replicas, and every refusal. Each case also runs the primary's classic start rule on the ack the
replica would send after truncating, since the two decisions together place the replica."""

from __future__ import annotations

import pytest

from broker_store.ha.epoch_start import EpochStartAction, decide_epoch_start
from broker_store.ha.errors import ReplicaLogDivergedError
from broker_store.ha.replica_start import StartAction, decide_replica_start
from broker_store.store.epoch_cache import EpochCache, EpochEntry


def cache(*pairs: tuple[int, int]) -> EpochCache:
    return EpochCache(EpochEntry(e, s) for e, s in pairs)


# (name, local cache, rMin, rMax, primary cache, pMin, pMax, replica action, offset, truncates, primary action)
SIX = [
    ("rMin<rMax<=pMin: offline for long", cache((1, 0)), 0, 100, cache((1, 0), (2, 500)), 1000, 2000,
     EpochStartAction.FOLLOW, 100, False, StartAction.RESTART),
    ("rMin<pMin<rMax<=pMax: fell behind", cache((1, 0), (2, 100)), 0, 150, cache((1, 0), (2, 100), (3, 300)),
     50, 400, EpochStartAction.FOLLOW, 150, False, StartAction.FOLLOW),
    ("rMin<pMin, rMax>pMax: old primary back", cache((1, 0), (2, 100)), 0, 500,
     cache((1, 0), (2, 100), (3, 300)), 50, 400, EpochStartAction.FOLLOW, 300, True, StartAction.FOLLOW),
    ("pMin<=rMin<rMax<=pMax: inside", cache((2, 100)), 120, 200, cache((1, 0), (2, 100), (3, 300)), 0, 400,
     EpochStartAction.FOLLOW, 200, False, StartAction.FOLLOW),
    ("pMin<=rMin<=pMax<rMax: fork of two primaries", cache((1, 0), (2, 100)), 60, 500, cache((1, 0), (3, 200)),
     0, 450, EpochStartAction.FOLLOW, 100, True, StartAction.FOLLOW),
    ("pMax<rMin: primary lost data", cache((1, 0)), 1000, 2000, cache((1, 0)), 0, 500,
     EpochStartAction.REFUSE, -1, False, None),
]


@pytest.mark.parametrize("case", SIX, ids=[c[0] for c in SIX])
def test_the_six_positions(case: tuple) -> None:  # type: ignore[type-arg]
    _, local, r_min, r_max, primary, p_min, p_max, action, offset, truncates, primary_action = case
    decision = decide_epoch_start(local=local, local_min=r_min, local_max=r_max, primary=primary, primary_max=p_max)
    assert (decision.action, decision.offset, decision.truncates) == (action, offset, truncates)
    if primary_action is not None:
        placed = decide_replica_start(replica_max=decision.offset, primary_min=p_min, primary_max=p_max)
        assert placed.action is primary_action
    else:
        with pytest.raises(ReplicaLogDivergedError, match="primary lost data"):
            decision.raise_if_refused(replica_min=r_min, replica_max=r_max, primary_max=p_max)


def test_new_replica_ships_from_the_primary() -> None:
    decision = decide_epoch_start(local=EpochCache(), local_min=300, local_max=300, primary=cache((1, 0)),
                                  primary_max=900)
    assert decision.action is EpochStartAction.SHIP_FROM_PRIMARY and decision.offset == 0


def test_a_log_without_epochs_is_refused_not_recopied() -> None:
    decision = decide_epoch_start(local=EpochCache(), local_min=0, local_max=300, primary=cache((1, 0)),
                                  primary_max=900)
    assert decision.action is EpochStartAction.REFUSE
    assert "no epoch entries" in decision.reason and "empty the store directory" in decision.reason


def test_no_consistent_point_is_refused() -> None:
    decision = decide_epoch_start(local=cache((2, 0)), local_min=0, local_max=300, primary=cache((3, 0)),
                                  primary_max=900)
    assert decision.action is EpochStartAction.REFUSE and "no consistent point" in decision.reason
    with pytest.raises(ReplicaLogDivergedError):
        decision.raise_if_refused(replica_min=0, replica_max=300, primary_max=900)


def test_level_replica_follows_without_truncating() -> None:
    decision = decide_epoch_start(local=cache((1, 0), (2, 100)), local_min=0, local_max=400,
                                  primary=cache((1, 0), (2, 100)), primary_max=400)
    assert (decision.action, decision.offset, decision.truncates) == (EpochStartAction.FOLLOW, 400, False)


def test_newer_primary_epoch_at_the_replicas_end() -> None:
    # The old primary (epoch 2) stopped at 300; the new one started epoch 3 exactly there: nothing to cut.
    decision = decide_epoch_start(local=cache((1, 0), (2, 100)), local_min=0, local_max=300,
                                  primary=cache((1, 0), (2, 100), (3, 300)), primary_max=700)
    assert (decision.action, decision.offset, decision.truncates) == (EpochStartAction.FOLLOW, 300, False)


def test_bad_ranges_are_a_programming_error() -> None:
    with pytest.raises(ValueError):
        decide_epoch_start(local=EpochCache(), local_min=5, local_max=4, primary=EpochCache(), primary_max=0)


def test_a_truncation_names_the_bytes_it_cuts_as_a_half_open_range() -> None:
    # The old primary's unconfirmed tail [300, 500) goes: said in the log's order, never "from 300 to 500".
    decision = decide_epoch_start(local=cache((1, 0), (2, 100)), local_min=0, local_max=500,
                                  primary=cache((1, 0), (2, 100), (3, 300)), primary_max=400)
    assert decision.truncates and decision.offset == 300
    assert "cutting bytes [300, 500) (200 bytes the primary does not hold under the same epoch)" in decision.reason
    assert "from 300 to 500" not in decision.reason

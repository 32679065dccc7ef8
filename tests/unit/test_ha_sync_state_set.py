"""The controller-mode primary's SyncStateSet rules, time advanced by hand: join, leave on timeout and on
disconnect, the frozen confirm offset (#6662), the union while an alter is in flight (#5663)."""

from __future__ import annotations

import pytest

from broker_store.clock import ManualClock
from broker_store.ha.sync_state_set import SyncStateSetTracker
from broker_store.protocol.controller import SyncStateSet

PRIMARY = 1


def tracker(clock: ManualClock, members: set[int] | None = None, *, confirm: int = 100,
            epoch_start: int = 50, max_not_catchup: float = 15.0) -> SyncStateSetTracker:
    return SyncStateSetTracker(clock, self_id=PRIMARY, sync_state_set=SyncStateSet(frozenset(members or {PRIMARY}), 1),
                               max_not_catchup=max_not_catchup, confirm_offset=confirm, epoch_start_offset=epoch_start)


def test_the_primary_alone_confirms_its_max_offset() -> None:
    t = tracker(ManualClock())
    assert t.confirm_offset(300) == 300
    assert t.sync_state_set.members == {PRIMARY}
    assert t.proposal() is None


def test_a_replica_joins_once_its_ack_reaches_the_confirm_offset_and_the_epoch_start() -> None:
    clock = ManualClock()
    t = tracker(clock, confirm=100, epoch_start=50)
    t.connected(2, "a")
    t.acked(2, "a", 99, primary_max=100)
    assert t.proposal() is None  # below the confirm offset
    t.acked(2, "a", 100, primary_max=100)
    assert t.proposal() == frozenset({PRIMARY, 2})


def test_a_joiner_must_hold_something_of_the_current_epoch() -> None:
    t = tracker(ManualClock(), confirm=0, epoch_start=500)
    t.connected(2, "a")
    t.acked(2, "a", 400, primary_max=400)
    assert t.proposal() is None
    t.acked(2, "a", 500, primary_max=500)
    assert t.proposal() == frozenset({PRIMARY, 2})


def test_an_async_learner_never_joins() -> None:
    t = tracker(ManualClock(), confirm=0)
    t.connected(2, "a", async_learner=True)
    t.acked(2, "a", 1000, primary_max=1000)
    assert t.proposal() is None


def test_alter_round_trip_and_the_union_while_in_flight() -> None:
    clock = ManualClock()
    t = tracker(clock, {PRIMARY, 2}, confirm=100)
    t.connected(2, "a")
    t.connected(3, "b")
    t.acked(2, "a", 200, primary_max=200)
    t.acked(3, "b", 200, primary_max=200)
    proposed = t.proposal()
    assert proposed == frozenset({PRIMARY, 2, 3})
    t.alter_started(proposed)
    assert t.proposal() is None  # one alter at a time
    assert t.counted() == {PRIMARY, 2, 3}  # #5663: the joiner counts before the controller answers
    t.acked(2, "a", 300, primary_max=400)
    assert t.confirm_offset(400) == 200  # replica 3 (in flight) holds it back
    t.alter_done(SyncStateSet(frozenset({PRIMARY, 2, 3}), 2))
    assert t.sync_state_set == SyncStateSet(frozenset({PRIMARY, 2, 3}), 2) and t.in_flight is None


def test_a_refused_alter_keeps_the_old_set_and_is_asked_again() -> None:
    t = tracker(ManualClock(), confirm=0, epoch_start=0)
    t.connected(2, "a")
    t.acked(2, "a", 10, primary_max=10)
    proposed = t.proposal()
    assert proposed is not None
    t.alter_started(proposed)
    t.alter_done(None)
    assert t.sync_state_set.members == {PRIMARY} and t.counted() == {PRIMARY}
    assert t.proposal() == proposed


def test_confirm_offset_is_the_min_ack_of_connected_members_and_never_lowers() -> None:
    t = tracker(ManualClock(), {PRIMARY, 2, 3}, confirm=100)
    t.connected(2, "a")
    t.connected(3, "b")
    t.acked(2, "a", 250, primary_max=300)
    t.acked(3, "b", 180, primary_max=300)
    assert t.confirm_offset(300) == 180
    t.acked(3, "b", 300, primary_max=300)
    assert t.confirm_offset(300) == 250
    t.connected(3, "c")  # reconnected: no ack on the new link yet
    t.acked(3, "c", 120, primary_max=300)  # it lost unflushed bytes: the confirm offset stays
    assert t.confirm_offset(300) == 250


def test_confirm_offset_freezes_while_a_member_is_disconnected_then_moves_once_it_left() -> None:
    clock = ManualClock()
    t = tracker(clock, {PRIMARY, 2, 3}, confirm=100)
    t.connected(2, "a")
    t.connected(3, "b")
    t.acked(2, "a", 200, primary_max=200)
    t.acked(3, "b", 200, primary_max=200)
    assert t.confirm_offset(200) == 200
    t.disconnected(3, "b")
    t.acked(2, "a", 400, primary_max=400)
    assert t.confirm_offset(400) == 200  # #6662: frozen, 3 may hold less than 2
    assert t.frozen_by == [3]
    proposed = t.proposal()
    assert proposed == frozenset({PRIMARY, 2})  # leaves on disconnect
    t.alter_started(proposed)
    assert t.confirm_offset(400) == 200  # still counted while the alter is in flight
    t.alter_done(SyncStateSet(frozenset({PRIMARY, 2}), 2))
    assert t.confirm_offset(400) == 400


def test_a_connected_member_without_an_ack_freezes_too() -> None:
    t = tracker(ManualClock(), {PRIMARY, 2}, confirm=100)
    t.connected(2, "a")
    assert t.confirm_offset(500) == 100
    t.acked(2, "a", 500, primary_max=500)
    assert t.confirm_offset(500) == 500


def test_a_member_that_does_not_catch_up_leaves_after_the_timeout() -> None:
    clock = ManualClock()
    t = tracker(clock, {PRIMARY, 2}, confirm=0, max_not_catchup=15.0)
    t.connected(2, "a")
    t.acked(2, "a", 100, primary_max=100)
    assert t.next_wakeup() == pytest.approx(clock.monotonic() + 15.0)
    clock.advance(10)
    t.acked(2, "a", 150, primary_max=1000)  # falling behind: the primary is at 1000
    clock.advance(4.9)
    assert t.proposal() is None
    clock.advance(0.1)
    assert t.proposal() == frozenset({PRIMARY})  # and not re-admitted: its ack is past the confirm offset it held back


def test_a_replica_that_never_caught_up_does_not_join() -> None:
    t = tracker(ManualClock(), confirm=0, epoch_start=0)
    t.connected(2, "a")
    t.acked(2, "a", 100, primary_max=1000)
    assert t.proposal() is None


def test_a_member_one_round_trip_behind_keeps_catching_up() -> None:
    clock = ManualClock()
    t = tracker(clock, {PRIMARY, 2}, confirm=0, max_not_catchup=15.0)
    t.connected(2, "a")
    primary_max = 100
    for _ in range(40):  # steady load: every ack reaches the max offset of the previous one, never the current
        t.acked(2, "a", primary_max, primary_max=primary_max + 50)
        primary_max += 50
        clock.advance(1)
        assert t.proposal() is None
    assert t.next_wakeup() is not None and t.next_wakeup() > clock.monotonic()  # type: ignore[operator]


def test_a_replaced_links_events_are_ignored() -> None:
    t = tracker(ManualClock(), {PRIMARY, 2}, confirm=0)
    t.connected(2, "old")
    t.connected(2, "new")
    t.acked(2, "old", 999, primary_max=999)
    assert t.ack_of(2) == -1
    t.disconnected(2, "old")
    assert t.link_of(2) == "new"


def test_the_controllers_set_replaces_the_local_one() -> None:
    clock = ManualClock()
    t = tracker(clock, {PRIMARY, 2})
    version = t.version
    t.set_sync_state_set(SyncStateSet(frozenset({3}), 7))
    assert t.sync_state_set == SyncStateSet(frozenset({PRIMARY, 3}), 7)
    assert t.version > version

"""PrimaryLease on a ManualClock: the rows of its rule (valid, deposed, lease ended, controllers unreachable), and
the frozen primary: a heartbeat and a confirmation that were in flight when it froze never extend its lease past
the controller's heartbeat timeout, so on thaw it refuses until a controller answers."""

from __future__ import annotations

import pytest

from broker_store.broker.primary_lease import PrimaryLease
from broker_store.clock import ManualClock

L = 3.0


def confirmed_lease(clock: ManualClock, epoch: int = 2) -> PrimaryLease:
    """A primary at ``epoch`` whose heartbeat (sent now) was accepted, then confirmed by a poll."""
    lease = PrimaryLease(L, clock)
    lease.heartbeat_accepted(clock.monotonic())
    lease.confirmed(epoch, lease.last_beat)
    return lease


def test_a_new_primary_refuses_until_a_controller_confirms_it_at_its_epoch() -> None:
    clock = ManualClock()
    lease = PrimaryLease(L, clock)
    assert lease.refusal(1) is not None
    lease.heartbeat_accepted(clock.monotonic())  # a heartbeat alone says nothing of the role
    assert lease.refusal(1) is not None
    lease.confirmed(1, lease.last_beat)
    assert lease.refusal(1) is None
    assert lease.refusal(2) is not None  # confirmed at epoch 1, not at the epoch it would write in


def test_accepted_heartbeats_keep_the_lease_and_it_ends_l_after_the_last_one_sent() -> None:
    clock = ManualClock()
    lease = confirmed_lease(clock)
    for _ in range(10):
        clock.advance(1.0)
        sent = clock.monotonic()
        clock.advance(0.01)  # the answer's round trip
        lease.heartbeat_accepted(sent)
        assert lease.refusal(2) is None
    clock.advance(L - 0.01 - 1e-6)  # the last heartbeat left L - 1 µs ago
    assert lease.refusal(2) is None
    clock.advance(1e-6)
    remark = lease.refusal(2)
    assert remark is not None and "within its lease of 3 s" in remark


def test_a_heartbeat_answered_after_the_lease_ended_does_not_renew_it() -> None:
    # Frozen right after sending a heartbeat: its answer is read on thaw, after the lease ended. The controller
    # may have elected another primary meanwhile, so only a confirmation sent after that answer brings it back.
    clock = ManualClock()
    lease = confirmed_lease(clock)
    sent = clock.monotonic()
    clock.advance(L + 2.0)  # the freeze
    lease.heartbeat_accepted(sent)
    assert lease.refusal(2) is not None
    fresh = clock.monotonic()
    clock.advance(0.01)
    lease.heartbeat_accepted(fresh)
    assert lease.refusal(2) is not None
    lease.confirmed(2, lease.last_beat)  # a poll sent after that answer: still primary at epoch 2
    assert lease.refusal(2) is None
    clock.advance(L - 0.02)
    assert lease.refusal(2) is None
    clock.advance(0.02)
    assert lease.refusal(2) is not None


def test_a_confirmation_in_flight_during_a_freeze_counts_from_the_heartbeat_before_it() -> None:
    clock = ManualClock()
    lease = confirmed_lease(clock)
    beat = lease.last_beat  # the poll leaves now ...
    clock.advance(L + 1.0)  # ... the broker freezes, the answer is read on thaw
    lease.confirmed(2, beat)
    assert lease.refusal(2) is not None


def test_the_thawed_primary_refuses_and_the_controllers_answer_deposes_it() -> None:
    clock = ManualClock()
    lease = confirmed_lease(clock)
    clock.advance(L + 0.5)
    assert lease.refusal(2) is not None
    lease.deposed(3, "127.0.0.1:30911")
    remark = lease.refusal(2)
    assert remark is not None and "names 127.0.0.1:30911 primary at epoch 3" in remark
    lease.deposed(2, None)  # an older view does not replace the newer one
    assert "epoch 3" in (lease.refusal(2) or "")


def test_deposed_refuses_even_within_the_lease_and_a_newer_confirmation_clears_it() -> None:
    # An operator's preferred-broker election: the broker is replaced while its heartbeats go on.
    clock = ManualClock()
    lease = confirmed_lease(clock)
    lease.deposed(3, "127.0.0.1:30911")
    assert lease.refusal(2) is not None
    lease.heartbeat_accepted(clock.monotonic())
    lease.confirmed(4, lease.last_beat)  # elected again later
    assert lease.refusal(4) is None


def test_with_every_controller_down_the_primary_serves_once_a_request_sent_after_the_lease_failed() -> None:
    clock = ManualClock()
    lease = confirmed_lease(clock)
    before_end = clock.monotonic() + 1.0
    clock.advance(L + 1.0)
    lease.unreachable(before_end)  # sent while the lease held (maybe just before a freeze): no evidence
    assert lease.refusal(2) is not None
    sent = clock.monotonic()
    clock.advance(0.5)  # a request timeout later
    lease.unreachable(sent)
    assert lease.refusal(2) is None  # the controllers are down: only elections stop
    clock.advance(600.0)
    assert lease.refusal(2) is None
    lease.heartbeat_accepted(clock.monotonic())  # one comes back: still serving until it confirms or deposes
    assert lease.refusal(2) is None
    lease.deposed(3, "127.0.0.1:30911")
    assert lease.refusal(2) is not None


def test_a_controller_that_answers_again_ends_the_unreachable_evidence() -> None:
    clock = ManualClock()
    lease = confirmed_lease(clock)
    clock.advance(L)
    lease.unreachable(clock.monotonic())
    assert lease.refusal(2) is None
    clock.advance(1.0)
    lease.heartbeat_accepted(clock.monotonic())
    lease.confirmed(2, lease.last_beat)
    assert lease.refusal(2) is None
    clock.advance(L)  # lapsed again, and no request since reached no controller
    assert lease.refusal(2) is not None


def test_a_lease_is_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        PrimaryLease(0, ManualClock())


def test_controllers_that_refuse_at_once_keep_the_primary_serving_through_its_lease_end() -> None:
    # Every controller killed: connections refused on each poll (every 0.5 s). No window of refusals at the lease's
    # end: each refusal is evidence for L from when it was seen.
    clock = ManualClock()
    lease = confirmed_lease(clock)
    for _ in range(20):
        clock.advance(0.5)
        lease.unreachable(clock.monotonic(), refused_at=clock.monotonic())
        assert lease.refusal(2) is None
    lease.deposed(3, "127.0.0.1:30911")  # one answers again, naming another primary
    assert lease.refusal(2) is not None


def test_a_refusal_seen_before_a_freeze_does_not_outlive_l() -> None:
    clock = ManualClock()
    lease = confirmed_lease(clock)
    clock.advance(1.0)
    lease.unreachable(clock.monotonic(), refused_at=clock.monotonic())
    clock.advance(L)  # frozen: controllers back meanwhile could have elected another after L of silence
    assert lease.refusal(2) is not None
    lease.deposed(3, "127.0.0.1:30911")
    assert lease.refusal(2) is not None

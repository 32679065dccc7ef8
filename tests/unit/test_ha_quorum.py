"""Quorum writes as pure state: needAck rules with automatic downgrade, alive-replica accounting, the ack
tracker (exactly N-1 acks at or past the end offset, slave timeout, pipelined, ordered). No sockets, no
sleeping: a ManualClock is advanced by hand."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker_store.broker.send_processor import DURABLE_RESPONSE_CODES
from broker_store.clock import ManualClock
from broker_store.ha.ack_tracker import AckTracker
from broker_store.ha.errors import HAProtocolError
from broker_store.ha.quorum import NO_WAIT, Quorum, QuorumRules, decide_need_acks
from broker_store.ha.settings import HARole, HASettings
from broker_store.protocol.codes import ResponseCode
from broker_store.store import PutStatus

OK = PutStatus.PUT_OK
TIMEOUT = PutStatus.FLUSH_SLAVE_TIMEOUT
NOT_ENOUGH = PutStatus.IN_SYNC_REPLICAS_NOT_ENOUGH


def _quorum(**overrides: Any) -> tuple[Quorum, ManualClock]:
    options: dict[str, Any] = {"role": HARole.SYNC_MASTER, "slave_timeout_ms": 3000,
                               "ha_send_heartbeat_interval_ms": 1000, "ha_housekeeping_interval_ms": 5000}
    options.update(overrides)
    clock = ManualClock()
    return Quorum(HASettings(**options), clock), clock


def _rules(in_sync: int, min_in_sync: int = 1, auto: bool = False,
           role: HARole = HARole.SYNC_MASTER) -> QuorumRules:
    return QuorumRules(role, in_sync, min_in_sync, auto, 256 * 1024 * 1024)


# -- needAck rules ----------------------------------------------------------------------------------

def test_status_wire_codes() -> None:
    assert DURABLE_RESPONSE_CODES[OK] is ResponseCode.SUCCESS
    assert DURABLE_RESPONSE_CODES[TIMEOUT] == 12
    assert DURABLE_RESPONSE_CODES[PutStatus.SLAVE_NOT_AVAILABLE] == 11
    assert NOT_ENOUGH not in DURABLE_RESPONSE_CODES  # SYSTEM_ERROR with a remark
    refused = decide_need_acks(_rules(2), alive_copies=1, in_sync_copies=1)
    assert refused.remark.startswith("IN_SYNC_REPLICAS_NOT_ENOUGH: ")  # the status name, then the reason
    assert decide_need_acks(_rules(2), alive_copies=2, in_sync_copies=2).remark == ""


def test_default_one_of_one_is_asynchronous_even_for_sync_master() -> None:
    rules = QuorumRules.from_settings(HASettings(role=HARole.SYNC_MASTER))
    for alive, in_sync in [(1, 1), (2, 1), (3, 3)]:
        decision = decide_need_acks(rules, alive_copies=alive, in_sync_copies=in_sync)
        assert decision.need_acks == 1 and not decision.refused


def test_only_sync_master_with_wait_waits() -> None:
    assert decide_need_acks(_rules(3, role=HARole.ASYNC_MASTER), alive_copies=1, in_sync_copies=1) is NO_WAIT
    assert decide_need_acks(_rules(3, role=HARole.SLAVE), alive_copies=1, in_sync_copies=1) is NO_WAIT
    assert decide_need_acks(_rules(3), alive_copies=1, in_sync_copies=1, wait_store_msg_ok=False) is NO_WAIT


def test_issue_scenarios() -> None:
    # total 2 / in_sync 2, replica alive and close: wait for 2 copies.
    assert decide_need_acks(_rules(2), alive_copies=2, in_sync_copies=2).need_acks == 2
    # only the primary alive: refused without downgrade, plain PUT_OK with it.
    refused = decide_need_acks(_rules(2), alive_copies=1, in_sync_copies=1)
    assert refused.refused and refused.status is NOT_ENOUGH and "needs 2 copies, 1 in sync" in refused.remark
    downgraded = decide_need_acks(_rules(2, auto=True), alive_copies=1, in_sync_copies=1)
    assert downgraded.need_acks == 1 and not downgraded.refused
    # total 3 / in_sync 2 / min 1, both replicas gone: accepted only with downgrade.
    assert decide_need_acks(_rules(2, 1), alive_copies=1, in_sync_copies=1).refused
    assert not decide_need_acks(_rules(2, 1, auto=True), alive_copies=1, in_sync_copies=1).refused
    # the downgrade never goes below min_in_sync_replicas.
    floor = decide_need_acks(_rules(3, 2, auto=True), alive_copies=1, in_sync_copies=1)
    assert floor.need_acks == 2 and floor.refused
    # alive but far behind does not count as in sync: currentInSync is the smaller count.
    assert decide_need_acks(_rules(2), alive_copies=3, in_sync_copies=1).refused
    assert decide_need_acks(_rules(3, 1, auto=True), alive_copies=3, in_sync_copies=2).need_acks == 2


@given(st.integers(1, 5), st.integers(1, 5), st.integers(1, 5), st.booleans(), st.integers(1, 6), st.integers(1, 6))
def test_need_ack_properties(total: int, in_sync: int, min_in_sync: int, auto: bool, alive: int, within: int) -> None:
    in_sync, min_in_sync = min(in_sync, total), min(min_in_sync, in_sync, total)
    rules = _rules(in_sync, min_in_sync, auto)
    decision = decide_need_acks(rules, alive_copies=alive, in_sync_copies=within)
    current = min(alive, within)
    assert decision.current_in_sync == current
    assert decision.refused == (decision.need_acks > current)
    if auto:
        assert min_in_sync <= decision.need_acks <= in_sync
        assert decision.need_acks == max(min(in_sync, current), min_in_sync)
    else:
        assert decision.need_acks == in_sync
    if in_sync == 1:
        assert not decision.refused


# -- alive-replica accounting -----------------------------------------------------------------------

def test_in_sync_counting_by_gap_with_replicas_at_different_offsets() -> None:
    quorum, _ = _quorum(total_replicas=4, in_sync_replicas=3, ha_max_gap_not_in_sync=1000)
    for link, offset in [("r1", 10_000), ("r2", 9_001), ("r3", 9_000)]:
        quorum.replica_connected(link)
        quorum.replica_reported(link, offset)
    # primary at 10_000: r1 (gap 0) and r2 (gap 999) are within 1000; r3 (gap exactly 1000) is not.
    assert quorum.links.within_gap(10_000, 1000) == 2
    decision = quorum.admit(10_000)
    assert decision.current_in_sync == 3 and decision.need_acks == 3 and not decision.refused
    assert quorum.admit(10_500).refused  # the primary moved on: only r1 is within the gap now
    quorum.replica_reported("r3", 10_000)
    assert quorum.admit(10_500).current_in_sync == 3


def test_a_replica_yet_to_report_is_alive_but_not_in_sync() -> None:
    quorum, _ = _quorum(total_replicas=2, in_sync_replicas=2)
    quorum.replica_connected("r1")
    assert quorum.links.alive_count == 1 and quorum.links.ack_offsets() == [-1]
    assert quorum.admit(0).refused
    quorum.replica_reported("r1", 0)
    assert not quorum.admit(0).refused


def test_dead_link_detected_after_the_housekeeping_interval() -> None:
    quorum, clock = _quorum(total_replicas=2, in_sync_replicas=2)
    quorum.replica_connected("r1")
    quorum.replica_reported("r1", 100)
    assert quorum.next_wakeup() == clock.monotonic() + 5.0
    clock.advance(4.0)
    quorum.replica_reported("r1", 100)  # a heartbeat report keeps it alive
    clock.advance(4.9)
    assert quorum.tick() == []
    clock.advance(0.2)
    assert quorum.tick() == ["r1"]
    assert quorum.links.alive_count == 0 and quorum.admit(100).refused


def test_a_tick_at_the_next_wakeup_always_finds_the_dead_link() -> None:
    # The HA service arms its one timer for next_wakeup(); if the tick found nothing there, it would re-arm
    # for the same instant at once, and on a clock standing still (ManualClock) never stop.
    quorum, clock = _quorum()
    quorum.replica_connected("r1")
    quorum.replica_reported("r1", 100)
    wakeup = quorum.next_wakeup()
    assert wakeup is not None
    clock.advance(wakeup - clock.monotonic())
    assert clock.monotonic() == wakeup and quorum.tick() == ["r1"]


def test_reports_never_go_back_on_one_link() -> None:
    quorum, _ = _quorum()
    quorum.replica_connected("r1")
    quorum.replica_reported("r1", 50)
    with pytest.raises(HAProtocolError, match="never go back"):
        quorum.replica_reported("r1", 49)
    with pytest.raises(ValueError, match="already connected"):
        quorum.replica_connected("r1")
    with pytest.raises(KeyError):
        quorum.replica_reported("nobody", 1)
    quorum.replica_disconnected("r1")
    quorum.replica_connected("r1")  # a new connection starts over (the replica may have truncated)
    quorum.replica_reported("r1", 10)


# -- ack tracker ------------------------------------------------------------------------------------

def test_an_ack_n_write_waits_for_exactly_n_minus_1_acks_at_or_past_its_end() -> None:
    quorum, _ = _quorum(total_replicas=4, in_sync_replicas=3)
    for link in ("r1", "r2", "r3"):
        quorum.replica_connected(link)
        quorum.replica_reported(link, 0)
    decision = quorum.admit(0)
    assert decision.need_acks == 3
    future = quorum.wait(500, decision)
    quorum.replica_reported("r1", 500)           # 1 replica at the end offset
    assert not future.done()
    quorum.replica_reported("r2", 499)           # one byte short does not count
    assert not future.done()
    quorum.replica_reported("r2", 500)           # 2 = N-1 replicas at or past 500
    assert future.result(timeout=0) is OK
    assert quorum.acks.pending == 0


def test_slave_timeout_gives_flush_slave_timeout_and_never_earlier() -> None:
    quorum, clock = _quorum(total_replicas=2, in_sync_replicas=2)
    quorum.replica_connected("r1")
    quorum.replica_reported("r1", 0)
    future = quorum.wait(100, quorum.admit(0))
    assert quorum.next_wakeup() == pytest.approx(clock.monotonic() + 3.0)
    clock.advance(2.999)
    quorum.tick()
    assert not future.done()
    clock.advance(0.001)
    quorum.tick()
    assert future.result(timeout=0) is TIMEOUT
    quorum.replica_reported("r1", 100)  # a late ack changes nothing
    assert future.result(timeout=0) is TIMEOUT


def test_a_stopped_replica_times_out_while_its_link_is_still_alive() -> None:
    # "replica stopped": connected, silent -> FLUSH_SLAVE_TIMEOUT first (3 s), dead link later (5 s).
    quorum, clock = _quorum(total_replicas=2, in_sync_replicas=2)
    quorum.replica_connected("r1")
    quorum.replica_reported("r1", 0)
    future = quorum.wait(10, quorum.admit(0))
    clock.advance(3.0)
    assert quorum.tick() == [] and future.result(timeout=0) is TIMEOUT
    clock.advance(2.1)
    assert quorum.tick() == ["r1"]
    assert quorum.wait(20, quorum.admit(20)).result(timeout=0) is NOT_ENOUGH


def test_already_acked_and_no_wait_puts_resolve_at_once() -> None:
    quorum, _ = _quorum(total_replicas=2, in_sync_replicas=2)
    quorum.replica_connected("r1")
    quorum.replica_reported("r1", 1000)
    assert quorum.wait(900, quorum.admit(1000)).result(timeout=0) is OK
    assert quorum.wait(5, NO_WAIT).result(timeout=0) is OK
    step = quorum.replica_ack_step()
    assert step.name == "replica-ack"
    assert step.wait(1000, wait_store_msg_ok=False) is None
    pending = step.wait(2000)
    assert pending is not None and not pending.done()
    assert step.admit(2000) is None
    quorum.replica_disconnected("r1")
    refusal = step.admit(2000)
    assert refusal is not None and refusal[0] is NOT_ENOUGH and refusal[1] == "the put needs 2 copies, 1 in sync"


def test_disconnected_replica_acks_stop_counting() -> None:
    quorum, clock = _quorum(total_replicas=3, in_sync_replicas=3)
    for link in ("r1", "r2"):
        quorum.replica_connected(link)
        quorum.replica_reported(link, 0)
    future = quorum.wait(10, quorum.admit(0))
    quorum.replica_reported("r1", 10)
    quorum.replica_disconnected("r1")
    quorum.replica_reported("r2", 10)
    assert not future.done()  # r1's ack left with it: only 1 of 2
    clock.advance(3.0)
    quorum.tick()
    assert future.result(timeout=0) is TIMEOUT


def test_many_pipelined_waiters_resolve_in_offset_order() -> None:
    quorum, _ = _quorum(total_replicas=3, in_sync_replicas=3)
    for link in ("r1", "r2"):
        quorum.replica_connected(link)
        quorum.replica_reported(link, 0)
    order: list[int] = []
    futures = []

    def record(end: int) -> Callable[[object], None]:
        return lambda _: order.append(end)

    for end in range(100, 100_100, 100):
        f = quorum.wait(end, quorum.admit(end))
        f.add_done_callback(record(end))
        futures.append(f)
    assert quorum.acks.pending == 1000
    quorum.replica_reported("r1", 100_000)
    assert order == []
    quorum.replica_reported("r2", 50_050)     # covers 100 .. 50_000
    assert order == list(range(100, 50_100, 100))
    quorum.replica_reported("r2", 100_000)
    assert order == list(range(100, 100_100, 100))
    assert all(f.result(timeout=0) is OK for f in futures) and quorum.acks.pending == 0


def test_acked_puts_leave_the_deadline_heap_and_only_the_first_waiter_rearms_the_timer() -> None:
    quorum, clock = _quorum(total_replicas=2, in_sync_replicas=2)
    rearms: list[float | None] = []
    quorum.on_wakeup_changed = lambda: rearms.append(quorum.next_wakeup())
    quorum.replica_connected("r1")
    quorum.replica_reported("r1", 0)
    rearms.clear()
    for round_ in range(3):
        for end in range(1, 17):
            quorum.wait(round_ * 100 + end, quorum.admit(round_ * 100 + end))
            clock.advance(0.001)
        # deadlines only grow: the first put of each round is the only one that can move the timer
        assert len(rearms) == round_ + 1
        quorum.replica_reported("r1", round_ * 100 + 16)
        # without the sweep the heap would keep every acked put until the next timer tick
        assert quorum.acks.pending == 0 and not quorum.acks._deadlines


def test_mixed_needs_resolve_independently_and_in_offset_order() -> None:
    clock = ManualClock()
    tracker = AckTracker(clock, timeout=1.0)
    order: list[tuple[int, int]] = []

    def record(end: int, need: int) -> Callable[[object], None]:
        return lambda _: order.append((end, need))

    for end, need in [(10, 3), (20, 2), (30, 3), (40, 2)]:
        tracker.wait(end, need, []).add_done_callback(record(end, need))
    tracker.on_acks([40])            # one replica at 40: the need-2 puts are done, need-3 wait
    assert order == [(20, 2), (40, 2)]
    tracker.on_acks([40, 35])
    assert order == [(20, 2), (40, 2), (10, 3), (30, 3)]


def test_cancelled_waiters_are_dropped_and_fail_all_answers_the_rest() -> None:
    clock = ManualClock()
    tracker = AckTracker(clock, timeout=1.0)
    cancelled = tracker.wait(10, 2, [])
    kept = tracker.wait(20, 2, [])
    assert cancelled.cancel()
    assert tracker.on_acks([15]) == 0
    assert tracker.next_deadline() == pytest.approx(clock.monotonic() + 1.0)
    assert tracker.fail_all(PutStatus.FLUSH_SLAVE_TIMEOUT) == 1
    assert kept.result(timeout=0) is TIMEOUT
    assert tracker.pending == 0 and tracker.next_deadline() is None


_op = st.one_of(
    st.tuples(st.just("put"), st.integers(1, 50), st.integers(1, 4)),           # size, need copies
    st.tuples(st.just("ack"), st.integers(0, 2), st.integers(0, 120)),          # replica, advance by
    st.tuples(st.just("tick"), st.floats(0, 2.0), st.just(0)),                  # advance clock
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_op, max_size=60))
def test_tracker_matches_a_model(ops: list[tuple[str, Any, Any]]) -> None:
    """PUT_OK iff need-1 replicas reached the end offset before the deadline, else FLUSH_SLAVE_TIMEOUT."""
    clock = ManualClock()
    tracker = AckTracker(clock, timeout=1.0)
    acks = [0, 0, 0]
    end = 0
    puts: list[tuple[int, int, float, Any]] = []
    covered_at: dict[int, float] = {}   # put index -> clock time it became covered
    for kind, a, b in ops:
        if kind == "put":
            end += a
            puts.append((end, b, clock.monotonic() + 1.0, tracker.wait(end, b, sorted(acks, reverse=True))))
        elif kind == "ack":
            acks[a] += b
            tracker.on_acks(sorted(acks, reverse=True))
        else:
            clock.advance(a)
            tracker.expire()
        for i, (e, need, deadline, _) in enumerate(puts):
            if i not in covered_at and sum(x >= e for x in acks) >= need - 1 and clock.monotonic() < deadline:
                covered_at[i] = clock.monotonic()
    clock.advance(2.0)
    tracker.expire()
    for i, (_, _, _, future) in enumerate(puts):
        assert future.result(timeout=0) is (OK if i in covered_at else TIMEOUT)
    assert tracker.pending == 0


def test_puts_of_one_turn_share_a_waiter_until_sealed() -> None:
    quorum, clock = _quorum(total_replicas=2, in_sync_replicas=2)
    quorum.replica_connected("r1")
    quorum.replica_reported("r1", 0)
    quorum.share_waiters()
    turn = [quorum.wait(end, quorum.admit(end)) for end in (100, 200, 300)]
    assert turn[0] is turn[1] is turn[2] and quorum.acks.pending == 1
    quorum.seal_waiters()
    clock.advance(1.0)
    later = quorum.wait(400, quorum.admit(400))
    assert later is not turn[0] and quorum.acks.pending == 2
    quorum.replica_reported("r1", 200)  # covers the first two puts, not the turn's last: all wait on
    assert not turn[0].done()
    quorum.replica_reported("r1", 300)
    assert turn[0].result(timeout=0) is OK and not later.done()
    clock.advance(2.5)  # the later turn times out at its own first put's deadline (3 s after it)
    quorum.tick()
    assert not later.done()
    clock.advance(0.5)
    quorum.tick()
    assert later.result(timeout=0) is TIMEOUT and quorum.acks.pending == 0


def test_the_ack_step_waits_with_the_decision_its_admit_made() -> None:
    quorum, _ = _quorum(total_replicas=2, in_sync_replicas=2, enable_auto_in_sync_replicas=True)
    step = quorum.replica_ack_step()
    quorum.replica_connected("r1")
    quorum.replica_reported("r1", 0)
    assert step.admit(0) is None            # decided with the replica in sync: 2 copies
    quorum.replica_disconnected("r1")       # (not expected between the two calls of one put)
    future = step.wait(100)
    assert future is not None and not future.done()
    assert step.wait(200) is None           # no admit before it: decided now, downgraded to 1 copy


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["admit", "report", "connect", "disconnect"]),
                          st.integers(0, 3), st.integers(0, 5_000)), max_size=60))
def test_cached_admit_decisions_match_a_fresh_decision(ops: list[tuple[str, int, int]]) -> None:
    # Quorum.admit reuses its last decision over a range of primary offsets until the links change;
    # every answer must equal the one decided from scratch.
    quorum, _ = _quorum(total_replicas=4, in_sync_replicas=3, min_in_sync_replicas=1,
                        enable_auto_in_sync_replicas=True, ha_max_gap_not_in_sync=1000)
    acked: dict[str, int] = {}
    for op, replica, offset in ops:
        link = f"r{replica}"
        if op == "connect" and link not in acked:
            quorum.replica_connected(link)
            acked[link] = -1
        elif op == "disconnect" and link in acked:
            quorum.replica_disconnected(link)
            del acked[link]
        elif op == "report" and link in acked and offset >= acked[link]:
            quorum.replica_reported(link, offset)
            acked[link] = offset
        elif op == "admit":
            fresh = decide_need_acks(quorum.rules, alive_copies=1 + len(acked),
                                     in_sync_copies=1 + sum(1 for a in acked.values() if 0 <= a and offset - a < 1000))
            assert quorum.admit(offset) == fresh
            assert quorum.links.within_gap(offset, 1000) == quorum.links.within_gap_range(offset, 1000)[0]

"""The primary address's plan (``broker.primary_address``): bound only while the broker registers as id 0, after its
promotion; released first at a demotion or a stop; a failed bind retried with a capped back-off on the clock. No
sockets: the test plays the I/O's part; the last test runs the thin I/O on loopback."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable

import pytest

from broker_store.address import split_host_port
from broker_store.broker.primary_address import MAX_RETRY_S, PrimaryAddressPlan, Step, StepKind
from broker_store.broker.primary_address_listener import PrimaryAddressListener
from broker_store.broker.role import RoleStage, RoleState, RoleView
from broker_store.clock import ManualClock
from broker_store.deploy.launcher import HOST, free_port
from broker_store.net.server import RemotingServer


def test_a_replica_binds_nothing() -> None:
    plan = PrimaryAddressPlan(ManualClock())
    assert plan.next_step() == Step(StepKind.IDLE)
    plan.role_changed(False)
    assert plan.next_step() == Step(StepKind.IDLE)


def test_promoted_binds_at_once_and_keeps_it_until_demoted() -> None:
    plan = PrimaryAddressPlan(ManualClock())
    plan.role_changed(True)
    assert plan.next_step() == Step(StepKind.BIND)
    plan.bound()
    assert plan.held and plan.next_step() == Step(StepKind.IDLE)
    plan.role_changed(False)
    assert plan.next_step() == Step(StepKind.RELEASE)
    plan.released()
    assert not plan.held and plan.next_step() == Step(StepKind.IDLE)


def test_a_bind_failing_while_another_holds_it_backs_off_on_the_clock_up_to_the_cap() -> None:
    clock = ManualClock()
    plan = PrimaryAddressPlan(clock, first_retry_s=0.05, max_retry_s=1.0)
    plan.role_changed(True)
    delays = []
    for _ in range(7):
        assert plan.next_step() == Step(StepKind.BIND)
        delay = plan.bind_failed()
        delays.append(delay)
        assert plan.next_step() == Step(StepKind.WAIT, clock.monotonic() + delay)
        clock.advance(delay / 2)
        assert plan.next_step().kind is StepKind.WAIT
        clock.advance(delay)
    assert delays == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    assert plan.failures == 7
    plan.bound()
    assert plan.failures == 0 and plan.next_step() == Step(StepKind.IDLE)


def test_demoted_while_waiting_to_retry_stops_trying_and_a_new_promotion_starts_a_fresh_back_off() -> None:
    clock = ManualClock()
    plan = PrimaryAddressPlan(clock)
    plan.role_changed(True)
    for _ in range(6):
        plan.bind_failed()
    plan.role_changed(False)
    assert plan.next_step() == Step(StepKind.IDLE)
    plan.role_changed(True)
    assert plan.failures == 0 and plan.next_step() == Step(StepKind.BIND)


def test_a_repeated_primary_notice_keeps_the_back_off() -> None:
    clock = ManualClock()
    plan = PrimaryAddressPlan(clock)
    plan.role_changed(True)
    delay = plan.bind_failed()
    plan.role_changed(True)
    assert plan.next_step() == Step(StepKind.WAIT, clock.monotonic() + delay)


def test_demoted_during_a_bind_releases_right_after_it() -> None:
    plan = PrimaryAddressPlan(ManualClock())
    plan.role_changed(True)
    assert plan.next_step().kind is StepKind.BIND
    plan.role_changed(False)  # the demotion's listener ran while the bind was awaited
    plan.bound()
    assert plan.next_step() == Step(StepKind.RELEASE)


def test_stopping_releases_and_never_binds_again() -> None:
    plan = PrimaryAddressPlan(ManualClock())
    plan.role_changed(True)
    plan.bound()
    plan.stopping()
    assert plan.next_step() == Step(StepKind.RELEASE)
    plan.released()
    plan.role_changed(True)
    assert not plan.wanted and plan.next_step() == Step(StepKind.IDLE)


def test_the_cap_bounds_the_wait_after_the_holder_lets_go() -> None:
    clock = ManualClock()
    plan = PrimaryAddressPlan(clock)
    plan.role_changed(True)
    for _ in range(100):
        plan.next_step()
        assert plan.bind_failed() <= MAX_RETRY_S
        clock.advance(MAX_RETRY_S)


@pytest.mark.parametrize(("first", "cap"), [(0.0, 1.0), (2.0, 1.0), (-1.0, 1.0)])
def test_a_back_off_that_cannot_work_is_refused(first: float, cap: float) -> None:
    with pytest.raises(ValueError, match="back-off"):
        PrimaryAddressPlan(ManualClock(), first_retry_s=first, max_retry_s=cap)


def test_the_listener_wants_the_address_from_the_unfenced_end_of_a_promotion_to_the_start_of_a_demotion() -> None:
    """The RoleState listener's edges: id 0 (unfenced PRIMARY, or re-promoting for a newer epoch) and nothing else."""
    state = RoleState(0, replica=True)
    state.set_broker_id(2)

    def no_server(addr: str) -> RemotingServer:
        raise AssertionError("no socket in this test")

    listener = PrimaryAddressListener(["127.0.0.1:1"], no_server, ManualClock(), describe="b")
    state.listeners.append(listener.role_changed)
    seen = []

    def record(*_: object) -> None:
        seen.append(listener.plan.wanted)
    state.listeners.append(record)
    state.begin_promotion(1)
    state.finish()
    state.begin_promotion(2)  # a newer epoch while primary: still id 0, keeps the address
    state.finish()
    state.begin_demotion(3)
    state.finish()
    assert seen == [False, True, True, True, False, False]


def test_the_listener_retries_a_held_address_on_the_clock_and_closes_it_at_a_demotion() -> None:
    """The thin I/O on loopback: a bind refused while another socket holds the port (EADDRINUSE), retried when the
    ManualClock passes the back-off, then closed at the demotion's first step (connections refused again)."""
    clock = ManualClock()
    address = f"{HOST}:{free_port()}"
    replica, primary = RoleView(RoleStage.REPLICA, 2, 1), RoleView(RoleStage.PRIMARY, 0, 2)

    def connects() -> bool:
        with socket.socket() as probe:
            return probe.connect_ex(split_host_port(address)) == 0

    async def settle(done: Callable[[], bool]) -> None:
        for _ in range(500):  # polls the loop, not a deadline: each pass lets the listener's task run
            if done():
                return
            await asyncio.sleep(0.01)
        raise AssertionError("the listener did not get there")

    async def main() -> None:
        holder = socket.socket()
        holder.bind(split_host_port(address))
        holder.listen()
        listener = PrimaryAddressListener(
            [address], lambda addr: RemotingServer(lambda cmd, conn: None, *split_host_port(addr), clock=clock),
            clock, describe="test")
        listener.start()
        try:
            listener.role_changed(replica, primary)
            await settle(lambda: listener.plan.failures == 1)
            assert not listener.serving
            holder.close()
            clock.advance(0.05)
            await settle(lambda: listener.serving)
            assert connects()
            listener.role_changed(primary, RoleView(RoleStage.DEMOTING, 2, 3))
            await settle(lambda: not listener.serving)
            assert not connects()
        finally:
            holder.close()
            await listener.stop()

    asyncio.run(main())

"""The broker's registration timers on a manual clock: a replica that knows no primary yet registers every
second, learns the primary's HA address from the answer, then falls back to the normal period.

The name server here is a stand-in answering REGISTER_BROKER (no socket); real processes run the same path in
tests/integration/test_ha_broker.py and test_broker_server.py."""

from __future__ import annotations

import asyncio
from typing import Any

from broker_store.broker.namesrv_registration import (
    PRIMARY_UNKNOWN_RETRY,
    UNKNOWN_REGISTER_INTERVAL,
    BrokerIdentity,
    NamesrvRegistration,
)
from broker_store.clock import ManualClock
from broker_store.protocol.codes import RequestCode, ResponseCode
from broker_store.protocol.frame import RemotingCommand
from broker_store.protocol.headers import BrokerHeartbeatResponseHeader, RegisterBrokerResponseHeader
from broker_store.protocol.topic import DataVersion, TopicConfigTable, decode_register_broker_body

PRIMARY_HA = "127.0.0.1:10912"


class NamesrvStub:
    """Answers REGISTER_BROKER as the name server does for a replica: the primary's addresses once it has
    registered (``primary_registered``), nothing before."""

    def __init__(self) -> None:
        self.primary_registered = False
        self.registrations = 0
        self.heartbeats = 0
        self.knows_broker: bool | None = True
        """What a heartbeat's answer says (None: nothing, as RocketMQ's name server)."""
        self.bodies: list[bytes] = []

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout: float) -> RemotingCommand:
        if cmd.code == RequestCode.BROKER_HEARTBEAT:
            self.heartbeats += 1
            return cmd.response(ResponseCode.SUCCESS, None, BrokerHeartbeatResponseHeader(self.knows_broker).to_ext())
        assert cmd.code == RequestCode.REGISTER_BROKER
        self.knows_broker = True
        self.registrations += 1
        self.bodies.append(cmd.body)
        header = (RegisterBrokerResponseHeader(ha_server_addr=PRIMARY_HA, master_addr="127.0.0.1:10911")
                  if self.primary_registered else RegisterBrokerResponseHeader())
        return cmd.response(ResponseCode.SUCCESS, None, header.to_ext())


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


def make_registration(namesrv: NamesrvStub, clock: ManualClock, *, broker_id: int = 0, state_version: int = 0,
           table: TopicConfigTable | None = None, heartbeat_interval: float = 30.0,
           **options: Any) -> NamesrvRegistration:
    """The registration of broker ``b`` of cluster ``c`` with one name server, ``namesrv`` (30 s period)."""
    identity = BrokerIdentity("c", "b", broker_id, "127.0.0.1:10915", state_version=state_version)
    return NamesrvRegistration(
        namesrv, ["127.0.0.1:9876"], lambda: identity,  # type: ignore[arg-type]
        lambda: table or TopicConfigTable({}, DataVersion()), register_interval=30.0,
        heartbeat_interval=heartbeat_interval, clock=clock, **options)


def test_replica_registers_every_second_until_the_answer_names_its_primary() -> None:
    clock = ManualClock()
    namesrv = NamesrvStub()
    learnt: list[str] = []

    async def main() -> None:
        registration = make_registration(namesrv, clock, broker_id=1, on_primary_ha_addr=learnt.append,
                              awaiting_primary=lambda: not learnt)
        assert await registration.register_all() and learnt == []  # the first, at start: no primary yet
        registration.start()
        await settle()  # the loops are waiting on the clock
        try:
            for expected in (2, 3):
                clock.advance(PRIMARY_UNKNOWN_RETRY)
                await settle()
                assert namesrv.registrations == expected
            namesrv.primary_registered = True
            clock.advance(PRIMARY_UNKNOWN_RETRY)
            await settle()
            assert learnt == [PRIMARY_HA] and registration.master_ha_addr == PRIMARY_HA
            assert registration.master_addr == "127.0.0.1:10911"
            clock.advance(29.0)  # known now: back to the 30 s period (the wait began at the last round)
            await settle()
            assert namesrv.registrations == 4
            clock.advance(1.0)
            await settle()
            assert namesrv.registrations == 5 and learnt == [PRIMARY_HA] * 2  # every answer is handed on
        finally:
            await registration.stop()

    asyncio.run(main())


def test_a_registration_carries_the_master_epoch_as_its_state_version() -> None:
    """The name server keeps the newer primary by it (route_info's stale rule); the topic table's own version
    (counter, timestamp) goes as it is."""
    namesrv = NamesrvStub()
    registration = make_registration(namesrv, ManualClock(), state_version=7,
                          table=TopicConfigTable({}, DataVersion(timestamp=5, counter=3)))
    assert asyncio.run(registration.register_all())
    assert decode_register_broker_body(namesrv.bodies[0]).data_version == DataVersion(5, 3, 7)


def test_a_name_server_that_does_not_know_the_broker_gets_a_registration_at_its_next_heartbeat() -> None:
    """A name server that restarted, or expired the broker while it was frozen, ignores its heartbeats: its
    answer says so and the broker registers at once instead of at the next 30 s period; at most once per
    UNKNOWN_REGISTER_INTERVAL while the answers go on saying so (a registration it keeps ignoring)."""
    clock = ManualClock()
    namesrv = NamesrvStub()

    async def main() -> None:
        registration = make_registration(namesrv, clock, heartbeat_interval=1.0)
        assert await registration.register_all() and namesrv.registrations == 1
        registration.start()
        await settle()
        try:
            clock.advance(1.0)
            await settle()
            assert (namesrv.heartbeats, namesrv.registrations) == (1, 1)  # known: nothing more
            namesrv.knows_broker = False  # the name server restarted
            clock.advance(1.0)
            await settle()
            assert (namesrv.heartbeats, namesrv.registrations) == (2, 2)  # registered at once, not at +30 s
            namesrv.knows_broker = None  # RocketMQ's name server answers nothing of the kind: heartbeats only
            clock.advance(1.0)
            await settle()
            assert (namesrv.heartbeats, namesrv.registrations) == (3, 2)
        finally:
            await registration.stop()

    asyncio.run(main())


def test_registrations_asked_by_heartbeats_are_spaced() -> None:
    """A name server that keeps ignoring the broker's registration (a stale one) does not get one per heartbeat."""
    clock = ManualClock()
    namesrv = NamesrvStub()
    asked: list[float] = []

    async def main() -> None:
        registration = make_registration(namesrv, clock, heartbeat_interval=1.0)
        registration.request_register = lambda: asked.append(clock.monotonic())  # type: ignore[method-assign]
        namesrv.knows_broker = False
        for _ in range(3 * int(UNKNOWN_REGISTER_INTERVAL)):
            clock.advance(1.0)
            await registration.heartbeat_all()

    asyncio.run(main())
    start = asked[0]
    assert asked == [start, start + UNKNOWN_REGISTER_INTERVAL, start + 2 * UNKNOWN_REGISTER_INTERVAL]

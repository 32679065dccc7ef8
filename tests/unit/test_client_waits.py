"""The client's waits go through its injected clock (broker_store/client/__init__.py): a ManualClock drives
``wait_for_route``'s polls and a send's back-off while its route lists no primary, with no real sleep. The name
server's answers are stand-ins here (no socket); the real-server paths are the integration tests' (wait_for_route
after creating a topic, e.g. tests/integration/test_ha_peers.py; sends across an election,
tests/integration/test_controller_mode.py)."""

from __future__ import annotations

import asyncio

import pytest

from broker_store.client import AsyncAdmin, AsyncProducer, new_message
from broker_store.client.records import MessageQueue
from broker_store.clock import ManualClock
from broker_store.protocol.codes import PERM_READ, PERM_WRITE, ResponseCode
from broker_store.protocol.errors import NoWritableQueueError, RequestTimeoutError, TopicNotExistError
from broker_store.protocol.route import BrokerData, QueueData, TopicRouteData

NOWHERE = "127.0.0.1:1"  # never dialled: the stand-ins answer first


class Sleeps(ManualClock):
    """A ManualClock whose ``sleep`` records each wait and advances the clock by it at once."""

    def __init__(self) -> None:
        super().__init__()
        self.waits: list[float] = []

    async def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.advance(seconds)


def test_wait_for_route_polls_on_the_injected_sleep_until_a_route_appears(monkeypatch: pytest.MonkeyPatch) -> None:
    sleeps = Sleeps()
    route = TopicRouteData((QueueData("b", 4, 4, PERM_READ | PERM_WRITE),), (BrokerData("c", "b", {0: NOWHERE}),))
    answers: list[TopicRouteData | None] = [None, None, route]

    async def fetch(topic: str) -> TopicRouteData:
        answer = answers.pop(0)
        if answer is None:
            raise TopicNotExistError(ResponseCode.TOPIC_NOT_EXIST, f"no route of {topic} yet")
        return answer

    async def main() -> TopicRouteData:
        async with AsyncAdmin(NOWHERE, clock=sleeps) as admin:
            monkeypatch.setattr(admin.routes, "fetch", fetch)
            return await admin.wait_for_route("T", timeout=10.0, poll_interval=0.5)

    assert asyncio.run(main()) is route
    assert sleeps.waits == [0.5, 0.5]


def test_wait_for_route_gives_up_at_its_timeout_on_the_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    sleeps = Sleeps()

    async def fetch(topic: str) -> TopicRouteData:
        raise TopicNotExistError(ResponseCode.TOPIC_NOT_EXIST, f"no route of {topic}")

    async def main() -> None:
        async with AsyncAdmin(NOWHERE, clock=sleeps) as admin:
            monkeypatch.setattr(admin.routes, "fetch", fetch)
            with pytest.raises(RequestTimeoutError, match="no usable route after 2.0s: TOPIC_NOT_EXIST: no route of T"):
                await admin.wait_for_route("T", timeout=2.0, poll_interval=0.5)

    asyncio.run(main())
    assert sleeps.waits == [0.5] * 4


def test_a_send_backs_off_while_the_route_lists_no_primary_until_its_budget_ends(
        monkeypatch: pytest.MonkeyPatch) -> None:
    sleeps = Sleeps()

    async def writable_queues(topic: str) -> list[MessageQueue]:
        raise NoWritableQueueError(ResponseCode.TOPIC_NOT_EXIST, f"no primary of {topic}")

    async def main() -> None:
        async with AsyncProducer(NOWHERE, send_timeout=1.0, clock=sleeps) as producer:
            monkeypatch.setattr(producer, "writable_queues", writable_queues)
            with pytest.raises(NoWritableQueueError):
                await producer.send(new_message("T", b"x"))

    asyncio.run(main())
    # doubling from 50 ms, capped at 400 ms, the last wait cut to what was left of the second
    assert sleeps.waits == pytest.approx([0.05, 0.1, 0.2, 0.4, 0.25])

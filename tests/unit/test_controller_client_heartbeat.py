"""``ControllerClient.heartbeat`` with one controller that never answers (a frozen container, a long GC): the round
ends as soon as another controller accepted, and the frozen one is not sent a second heartbeat while its first
is unanswered. Found by the container tier (tests/containers/test_controllers.py): waiting for every controller
stretched each round to the request timeout while the leader was paused, past the new leader's heartbeat
timeout, so it saw live brokers expire and elected on stale offsets (an acknowledged message was lost)."""

from __future__ import annotations

import asyncio
from collections import Counter

from broker_store.broker.controller_client import BrokerBeat, ControllerClient
from broker_store.protocol.codes import ResponseCode
from broker_store.protocol.errors import TransportError
from broker_store.protocol.frame import RemotingCommand

BEAT = BrokerBeat("c", "g", "127.0.0.1:10911", 1, 1, 100, 100, 0, 1500)


class Controllers:
    """A remoting client stand-in: ``frozen`` never answers, ``down`` refuses, the others accept."""

    def __init__(self, frozen: set[str], down: frozenset[str] = frozenset()) -> None:
        self.frozen, self.down = frozen, down
        self.sent: Counter[str] = Counter()
        self.never = asyncio.Event()

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout: float) -> RemotingCommand:
        self.sent[addr] += 1
        if addr in self.frozen:
            await self.never.wait()
        if addr in self.down:
            raise TransportError(f"cannot connect to {addr}")
        return cmd.response(ResponseCode.SUCCESS)

    async def close(self) -> None:
        pass


def _client(fake: Controllers) -> ControllerClient:
    return ControllerClient(["frozen:1", "live:2", "live:3"], request_timeout=3600.0,
                            client=fake)  # type: ignore[arg-type]


def test_a_round_ends_when_one_controller_accepted_and_a_frozen_one_gets_no_second_beat() -> None:
    async def main() -> None:
        fake = Controllers(frozen={"frozen:1"})
        client = _client(fake)
        for _ in range(3):  # would hang (request_timeout is an hour) if a round waited for the frozen controller
            assert await asyncio.wait_for(client.heartbeat(BEAT), 60)
        assert fake.sent == {"frozen:1": 1, "live:2": 3, "live:3": 3}
        await client.close()
    asyncio.run(main())


def test_no_controller_accepting_is_false() -> None:
    async def main() -> None:
        fake = Controllers(frozen=set(), down=frozenset({"frozen:1", "live:2", "live:3"}))
        client = _client(fake)
        assert not await client.heartbeat(BEAT)
        await client.close()
    asyncio.run(main())

"""The remoting layer's timers run on the injected clock (broker_store/clock.py): a ManualClock the test moves ends a
request that gets no answer, a connect that does not complete, a TLS acceptor's wait for a silent peer's first byte,
and paces the consumer's heartbeat rounds, with no sleeping. The real-clock paths are the integration tests' (request
timeouts and TLS: tests/integration/test_tls.py, test_connection_hygiene.py; heartbeats: test_client_cluster.py)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable

import pytest

from broker_store.client import AsyncPullConsumer
from broker_store.clock import ManualClock
from broker_store.net.client import RemotingClient
from broker_store.net.tls import FIRST_BYTE_TIMEOUT_S, _peek_first_byte
from broker_store.protocol.codes import RequestCode
from broker_store.protocol.errors import RequestTimeoutError, TransportError
from broker_store.protocol.frame import RemotingCommand

NOWHERE = "127.0.0.1:1"  # never dialled: the consumer's heartbeat rounds are recorded instead
PATIENCE = 30.0
"""A bound on waiting for the loop to reach a point (a test that hangs fails instead): never a timed assertion."""


async def _settle() -> None:
    """Let the loop run what a clock advance made ready (ManualClock wakes its timers through call_soon)."""
    for _ in range(10):
        await asyncio.sleep(0)


async def _reached(event: asyncio.Event) -> None:
    async with asyncio.timeout(PATIENCE):
        await event.wait()
    event.clear()


def test_a_request_without_an_answer_times_out_on_the_clients_clock() -> None:
    clock = ManualClock()

    async def main() -> None:
        arrived = asyncio.Event()

        async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.read(1)  # the request is here, so its timer is armed: never answer it
            arrived.set()
            await reader.read()
            writer.close()

        server = await asyncio.start_server(silent, "127.0.0.1", 0)
        addr = f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
        client = RemotingClient(clock=clock)
        try:
            call = asyncio.ensure_future(client.invoke(addr, RemotingCommand(code=RequestCode.HEART_BEAT), 5.0))
            await _reached(arrived)
            clock.advance(4.9)
            await _settle()
            assert not call.done()
            clock.advance(0.1)
            with pytest.raises(RequestTimeoutError, match=f"request code {RequestCode.HEART_BEAT} to {addr} timed "
                                                          "out after 5.0s"):
                await call
        finally:
            await client.close()
            server.close()
            await server.wait_closed()

    asyncio.run(main())


def test_a_connect_that_does_not_complete_ends_at_the_connect_timeout_of_the_clients_clock(
        monkeypatch: pytest.MonkeyPatch) -> None:
    clock = ManualClock()

    async def main() -> None:
        dialling = asyncio.Event()

        async def never_connects(*args: object, **kwargs: object) -> None:
            dialling.set()
            await asyncio.Event().wait()

        monkeypatch.setattr(asyncio.get_running_loop(), "create_connection", never_connects)
        client = RemotingClient(clock=clock, connect_timeout=3.0)
        call = asyncio.ensure_future(client.invoke(NOWHERE, RemotingCommand(code=RequestCode.HEART_BEAT), 60.0))
        await _reached(dialling)
        clock.advance(2.5)
        await _settle()
        assert not call.done()
        clock.advance(0.5)
        with pytest.raises(TransportError, match=f"connect to {NOWHERE} timed out after 3.0s"):
            await call

    asyncio.run(main())


def test_the_tls_acceptor_waits_for_a_first_byte_on_the_servers_clock() -> None:
    clock = ManualClock()

    async def main() -> None:
        loop = asyncio.get_running_loop()
        ours, theirs = socket.socketpair()
        with ours, theirs:
            ours.setblocking(False)
            silent = asyncio.ensure_future(_peek_first_byte(loop, ours, clock))
            await _settle()
            clock.advance(FIRST_BYTE_TIMEOUT_S - 1)
            await _settle()
            assert not silent.done()
            clock.advance(1)
            with pytest.raises(TimeoutError):
                await silent
            speaking = asyncio.ensure_future(_peek_first_byte(loop, ours, clock))
            theirs.send(b"\x16")
            assert await speaking == b"\x16"  # peeked, not read
            assert ours.recv(1) == b"\x16"

    asyncio.run(main())


class ArmingClock(ManualClock):
    """A ManualClock that reports each ``wait_for`` armed (its timer is set before the caller first suspends)."""

    def __init__(self) -> None:
        super().__init__()
        self.armed = asyncio.Event()

    async def wait_for(self, awaitable: Awaitable[object], timeout: float) -> bool:
        waiting = super().wait_for(awaitable, timeout)
        self.armed.set()
        return await waiting


def test_the_consumers_heartbeat_rounds_follow_its_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """A round right after the first pull of a topic (no clock move), then one per ``heartbeat_interval`` of the
    consumer's clock."""

    async def main() -> None:
        clock = ArmingClock()
        beat = asyncio.Event()
        rounds: list[float] = []

        async def heartbeat() -> None:
            rounds.append(clock.monotonic())
            beat.set()

        consumer = AsyncPullConsumer(NOWHERE, "cg", heartbeat_interval=30.0, clock=clock)
        monkeypatch.setattr(consumer, "heartbeat", heartbeat)
        start = clock.monotonic()
        async with consumer:
            await _reached(clock.armed)
            consumer._subscribe("T", None)  # what a pull of a new topic does
            await _reached(beat)
            assert rounds == [start]
            await _reached(clock.armed)
            clock.advance(29.9)
            await _settle()
            assert rounds == [start]
            clock.advance(0.1)
            await _reached(beat)
            assert rounds == [start, start + 30.0]

    asyncio.run(main())

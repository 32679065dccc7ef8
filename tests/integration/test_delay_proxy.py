"""tests/support/delay_proxy on real sockets: echo round trips through it on loopback take at least the two
one-way delays (a lower bound: physics, not performance), bytes arrive intact and in order with many requests
in flight. In-process and as a child. (That the delay does not cap throughput is the schedule's, unit-tested.)"""

from __future__ import annotations

import asyncio
import os
import socket
import time

import pytest

from tests.support.delay_proxy import DelayProxy, DelayProxyProcess, LinkShape, Route

pytestmark = pytest.mark.integration

DELAY = 0.040


async def _echo_server() -> asyncio.Server:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        writer.close()

    return await asyncio.start_server(echo, "127.0.0.1", 0)


def _addr(server: asyncio.Server) -> str:
    host, port = server.sockets[0].getsockname()[:2]
    return f"{host}:{port}"


async def _round_trips(addr: str, payload: bytes, in_flight: int) -> tuple[float, bytes]:
    """Send ``payload`` ``in_flight`` times without waiting, then read all echoes: (seconds, bytes read)."""
    host, port = addr.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    start = time.monotonic()
    for _ in range(in_flight):
        writer.write(payload)
    await writer.drain()
    got = await reader.readexactly(len(payload) * in_flight)
    elapsed = time.monotonic() - start
    writer.close()
    return elapsed, got


def test_a_round_trip_through_the_proxy_takes_both_delays_and_keeps_the_bytes() -> None:
    payload = os.urandom(300_000)

    async def main() -> None:
        echo = await _echo_server()
        async with DelayProxy([Route("127.0.0.1:0", _addr(echo))], LinkShape(DELAY)) as proxy:
            one, got = await _round_trips(proxy.listening[0], payload, 1)
            assert got == payload
            assert one >= 2 * DELAY
            many, got = await _round_trips(proxy.listening[0], payload[:1000], 20)  # 20 in flight, in order
            assert got == payload[:1000] * 20 and many >= 2 * DELAY
        echo.close()
        await echo.wait_closed()

    asyncio.run(main())


def test_the_child_proxy_delays_both_directions_and_closes_with_the_upstream() -> None:
    async def main() -> None:
        echo = await _echo_server()
        with DelayProxyProcess([Route("127.0.0.1:0", _addr(echo))], DELAY * 1000, inbound_delay_ms=10) as proxy:
            elapsed, got = await _round_trips(proxy.listening[0], b"ping", 1)
            assert got == b"ping" and elapsed >= DELAY + 0.010
        echo.close()
        await echo.wait_closed()

    asyncio.run(main())


def test_a_connection_to_a_dead_upstream_is_closed() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"  # bound, never listening: refused

    async def main() -> None:
        async with DelayProxy([Route("127.0.0.1:0", dead)], LinkShape(0.0)) as proxy:
            host, port = proxy.listening[0].rsplit(":", 1)
            reader, writer = await asyncio.open_connection(host, int(port))
            assert await reader.read() == b""
            writer.close()

    asyncio.run(main())

"""Connection hygiene of the remoting server over loopback sockets, time driven by a ManualClock (issue 17):
idle connections and frames that never complete are closed at their deadline and not before, and requests past
the in-flight or connection cap are answered SYSTEM_BUSY "[OVERLOAD] ...". The decisions are
tests/unit/test_net_hygiene.py.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Awaitable, Callable

import pytest

from broker_store.clock import ManualClock
from broker_store.net.framing import FrameReader
from broker_store.net.hygiene import ConnectionLimits
from broker_store.net.server import Connection, HandlerResult, RemotingServer
from broker_store.protocol.codes import ResponseCode
from broker_store.protocol.frame import RemotingCommand, encode_frame

pytestmark = pytest.mark.integration

HOLD = 7  # a request code the test handler never answers (a held pull)


async def serve(limits: ConnectionLimits, clock: ManualClock,
                body: Callable[[RemotingServer], Awaitable[None]]) -> None:
    held: asyncio.Future[RemotingCommand | None] = asyncio.get_running_loop().create_future()

    def handler(cmd: RemotingCommand, _conn: Connection) -> HandlerResult:
        if cmd.code == HOLD:
            return held
        return cmd.response(ResponseCode.SUCCESS)

    server = RemotingServer(handler, "127.0.0.1", 0, limits=limits, clock=clock)
    await server.start()
    try:
        await body(server)
    finally:
        held.cancel()
        await server.stop()


async def connect(server: RemotingServer) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", server.port)


async def call(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, code: int, opaque: int) -> RemotingCommand:
    writer.write(encode_frame(RemotingCommand(code=code, opaque=opaque)))
    frames = FrameReader()
    while True:
        data = await asyncio.wait_for(reader.read(65536), 5)
        assert data, "the server closed the connection"
        got = frames.feed(data)
        if got:
            return got[0]


async def closed_by_server(reader: asyncio.StreamReader) -> bool:
    try:
        return await asyncio.wait_for(reader.read(65536), 2) == b""
    except (TimeoutError, ConnectionResetError):
        return False


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0.02)


def test_idle_connections_close_at_the_deadline_and_held_requests_keep_theirs_open() -> None:
    clock = ManualClock()

    async def body(server: RemotingServer) -> None:
        idle = await connect(server)
        holding = await connect(server)
        assert (await call(*idle, 1, 1)).code == ResponseCode.SUCCESS
        holding[1].write(encode_frame(RemotingCommand(code=HOLD, opaque=2)))
        await settle()
        clock.advance(119)
        await settle()
        assert (await call(*idle, 1, 3)).code == ResponseCode.SUCCESS  # 119 s: open, and active again now
        clock.advance(119)
        await settle()
        assert len(server._connections) == 2
        clock.advance(30)  # past the deadline by up to one sweep interval (120 s / 4)
        await settle()
        assert await closed_by_server(idle[0])
        assert len(server._connections) == 1  # the one holding a request stays
        for _, writer in (idle, holding):
            writer.close()

    asyncio.run(serve(ConnectionLimits(max_idle_seconds=120, partial_frame_seconds=None), clock, body))


def test_a_frame_that_never_completes_closes_its_connection() -> None:
    clock = ManualClock()

    async def body(server: RemotingServer) -> None:
        reader, writer = await connect(server)
        writer.write(struct.pack(">i", 1000) + b"\x00" * 10)  # 14 of 1004 bytes
        await settle()
        clock.advance(29)
        await settle()
        assert len(server._connections) == 1
        clock.advance(7.5)  # past the deadline by up to one sweep interval (30 s / 4)
        await settle()
        assert await closed_by_server(reader)
        writer.close()

    asyncio.run(serve(ConnectionLimits(max_idle_seconds=None, partial_frame_seconds=30), clock, body))


def test_requests_past_the_in_flight_cap_and_connections_past_the_cap_are_answered_overload() -> None:
    clock = ManualClock()

    async def body(server: RemotingServer) -> None:
        reader, writer = await connect(server)
        for opaque in (1, 2):
            writer.write(encode_frame(RemotingCommand(code=HOLD, opaque=opaque)))
        busy = await call(reader, writer, 1, 3)
        assert busy.code == ResponseCode.SYSTEM_BUSY and busy.opaque == 3
        remark = busy.remark or ""
        assert remark.startswith("[OVERLOAD]") and "server_max_requests_in_flight 2" in remark

        other = await connect(server)  # the second connection: past max_connections 1
        refused = await call(*other, 1, 4)
        assert refused.code == ResponseCode.SYSTEM_BUSY and "server_max_connections 1" in (refused.remark or "")
        assert await closed_by_server(other[0])
        for w in (writer, other[1]):
            w.close()

    limits = ConnectionLimits(max_idle_seconds=None, partial_frame_seconds=None, max_connections=1,
                              max_requests_in_flight=2)
    asyncio.run(serve(limits, clock, body))


def test_a_peer_that_does_not_read_its_answers_gets_no_more_served_until_it_does() -> None:
    """Requests pipelined by a peer that reads nothing: the server answers until about
    ``MAX_QUEUED_ANSWER_BYTES`` (plus what the kernel buffers) wait for it, keeps the rest undispatched, serves
    other connections meanwhile, and answers every request in order once the peer reads."""
    import socket

    handled = 0

    def handler(cmd: RemotingCommand, _conn: Connection) -> HandlerResult:
        nonlocal handled
        handled += 1
        return cmd.response(ResponseCode.SUCCESS, ext_fields={}, body=b"a" * 16384)

    async def main() -> None:
        server = RemotingServer(handler, "127.0.0.1", 0)
        await server.start()
        try:
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
            sock.setblocking(False)
            await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", server.port))
            reader, writer = await asyncio.open_connection(sock=sock)
            count = 2000
            writer.write(b"".join(encode_frame(RemotingCommand(code=1, opaque=i)) for i in range(count)))
            await writer.drain()
            for _ in range(20):
                await asyncio.sleep(0.05)
            assert handled < count // 2, f"{handled} of {count} answered for a peer that reads nothing"
            other = await connect(server)
            assert (await call(*other, code=1, opaque=99999)).opaque == 99999
            frames, opaques = FrameReader(), list[int]()
            while len(opaques) < count:
                data = await asyncio.wait_for(reader.read(1 << 20), 5)
                assert data, "the server closed the connection"
                opaques += [f.opaque for f in frames.feed(data)]
            assert opaques == list(range(count))
            writer.close()
            other[1].close()
        finally:
            await server.stop()

    asyncio.run(main())

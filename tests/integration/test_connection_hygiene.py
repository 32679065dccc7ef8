"""Connection hygiene of the remoting server over loopback sockets, time driven by a ManualClock (docs/security.md,
"Connection hygiene"): idle connections and frames that never complete are closed at their deadline and not before, and
requests past the in-flight or connection cap are answered SYSTEM_BUSY "[OVERLOAD] ...". The decisions are
tests/unit/test_net_hygiene.py. """

from __future__ import annotations

import asyncio
import socket
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


async def non_reader(server: RemotingServer, requests: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A peer with a small receive window (64 KiB) that pipelines ``requests`` requests in one write; the caller
    never reads the answers."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", server.port))
    reader, writer = await asyncio.open_connection(sock=sock)
    writer.write(b"".join(encode_frame(RemotingCommand(code=1, opaque=i)) for i in range(requests)))
    return reader, writer


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
    ``MAX_QUEUED_ANSWER_BYTES`` (plus what the kernel buffers) wait for it, keeps the rest undispatched and (but for
    ``max_decoded_ahead`` of them) undecoded, serves other connections meanwhile, and answers every request in order
    once the peer reads."""
    from broker_store.net.answer_flow import DEFAULT_FLOW

    handled = 0

    def handler(cmd: RemotingCommand, _conn: Connection) -> HandlerResult:
        nonlocal handled
        handled += 1
        return cmd.response(ResponseCode.SUCCESS, ext_fields={}, body=b"a" * 16384)

    async def main() -> None:
        server = RemotingServer(handler, "127.0.0.1", 0)
        await server.start()
        try:
            count = 2000
            reader, writer = await non_reader(server, count)
            await writer.drain()
            for _ in range(20):
                await asyncio.sleep(0.05)
            assert handled < count // 2, f"{handled} of {count} answered for a peer that reads nothing"
            # what waits is held as the bytes it came in, not decoded: at most max_decoded_ahead requests are
            (conn,) = server._connections
            assert conn.held and conn.decoded_waiting <= DEFAULT_FLOW.max_decoded_ahead, conn.decoded_waiting
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


def test_peers_that_do_not_read_their_answers_cannot_starve_a_client_that_does() -> None:
    """Four peers pipeline requests for 16 KiB answers and read none. While a normal client makes 200 calls on its
    own connection, each of them is served no more than the answers the server queues (``max_queued_answer_bytes``)
    plus what its socket may hold unsent (``kernel_unsent_bytes``) and its peer's receive window: their requests
    cost the server a bounded amount of work, not a share of it that grows with time. Without the socket's
    unsent cap the kernel absorbs megabytes per peer first (``AnswerFlow(kernel_unsent_bytes=None)``)."""
    from broker_store.net.answer_flow import DEFAULT_FLOW

    answer = 16384
    served: dict[Connection, int] = {}

    def handler(cmd: RemotingCommand, conn: Connection) -> HandlerResult:
        served[conn] = served.get(conn, 0) + 1
        return cmd.response(ResponseCode.SUCCESS, ext_fields={}, body=b"a" * answer)

    async def main() -> None:
        server = RemotingServer(handler, "127.0.0.1", 0)
        await server.start()
        try:
            writers = []
            for _ in range(4):
                writers.append((await non_reader(server, 3000))[1])
            reader, writer = await connect(server)
            for i in range(200):
                assert (await call(reader, writer, code=1, opaque=i)).opaque == i
            normal = next(conn for conn in served if conn.remote_addr.endswith(
                f":{writer.get_extra_info('sockname')[1]}"))
            slow = sorted(count for conn, count in served.items() if conn is not normal)
            # per peer: queued answers + unsent in the socket + its receive window (SO_RCVBUF doubled by Linux)
            # + the transport's high-water mark, in answers, with room for one more of each
            assert DEFAULT_FLOW.kernel_unsent_bytes is not None
            bound = (DEFAULT_FLOW.max_queued_answer_bytes + DEFAULT_FLOW.kernel_unsent_bytes + 2 * 65536
                     + 65536) // answer + 4
            assert len(slow) == 4 and slow[-1] <= bound, f"served {slow} to peers that read nothing (bound {bound})"
            for w in [*writers, writer]:
                w.close()
        finally:
            await server.stop()

    asyncio.run(main())


def test_a_connection_pipelining_many_requests_yields_to_the_others_after_its_turn() -> None:
    """One connection sends 1,000 cheap requests in one write, another one request right after: the second is
    served after at most a few turns of the first (``max_requests_per_pass``), not after all 1,000."""
    from broker_store.net.answer_flow import DEFAULT_FLOW

    order: list[int] = []

    def handler(cmd: RemotingCommand, _conn: Connection) -> HandlerResult:
        order.append(cmd.opaque)
        return cmd.response(ResponseCode.SUCCESS)

    async def main() -> None:
        server = RemotingServer(handler, "127.0.0.1", 0)
        await server.start()
        try:
            busy = await connect(server)
            other = await connect(server)
            busy[1].write(b"".join(encode_frame(RemotingCommand(code=1, opaque=i)) for i in range(1000)))
            await busy[1].drain()
            assert (await call(*other, code=1, opaque=-1)).opaque == -1
            assert DEFAULT_FLOW.max_requests_per_pass is not None
            assert order.index(-1) <= 4 * DEFAULT_FLOW.max_requests_per_pass, f"served after {order.index(-1)}"
            frames, opaques = FrameReader(), list[int]()
            while len(opaques) < 1000:  # and the busy connection has all its answers, in order
                data = await asyncio.wait_for(busy[0].read(1 << 20), 5)
                assert data, "the server closed the connection"
                opaques += [f.opaque for f in frames.feed(data)]
            assert opaques == list(range(1000))
            for _, w in (busy, other):
                w.close()
        finally:
            await server.stop()

    asyncio.run(main())


def test_a_connection_held_because_its_peer_does_not_read_is_closed_as_idle() -> None:
    """A peer pipelines requests and never reads: its connection is held (nothing more dispatched, its socket not
    read) with answers stuck in the server's transport. Nothing of it is in flight, so the idle rule closes it
    ``max_idle_seconds`` after its last answer was written, and really closes it: a graceful close would wait for
    the stuck answers to be read, i.e. forever, keeping the connection, its descriptor and its buffers."""
    clock = ManualClock()

    def handler(cmd: RemotingCommand, _conn: Connection) -> HandlerResult:
        return cmd.response(ResponseCode.SUCCESS, ext_fields={}, body=b"a" * 16384)

    async def main() -> None:
        limits = ConnectionLimits(max_idle_seconds=120, partial_frame_seconds=None)
        server = RemotingServer(handler, "127.0.0.1", 0, limits=limits, clock=clock)
        await server.start()
        try:
            reader, writer = await non_reader(server, 2000)
            for _ in range(100):  # until the server holds it (real time: the bytes cross loopback)
                await asyncio.sleep(0.02)
                if server._connections and next(iter(server._connections)).held:
                    break
            (conn,) = server._connections
            assert conn.held and conn.in_flight == 0
            clock.advance(119)
            await settle()
            assert not conn.closed and conn in server._connections
            clock.advance(31)  # past the deadline by up to one sweep interval (120 s / 4)
            await settle()
            assert conn.closed and not server._connections, "the held connection was not closed"
            writer.close()
            reader.feed_eof()
        finally:
            await server.stop()

    asyncio.run(main())


def test_a_held_connection_s_unfinished_frame_waits_for_the_server_to_read_again() -> None:
    """A peer that reads its answers slowly is held (its socket not read), so the rest of a frame it began cannot
    arrive: the partial-frame deadline does not run while held, and starts again when the server reads again."""
    clock = ManualClock()

    def handler(cmd: RemotingCommand, _conn: Connection) -> HandlerResult:
        return cmd.response(ResponseCode.SUCCESS, ext_fields={}, body=b"a" * 16384)

    async def main() -> None:
        limits = ConnectionLimits(max_idle_seconds=None, partial_frame_seconds=30)
        server = RemotingServer(handler, "127.0.0.1", 0, limits=limits, clock=clock)
        await server.start()
        try:
            requests = 2000
            reader, writer = await non_reader(server, requests)
            writer.write(encode_frame(RemotingCommand(code=1, opaque=requests))[:20])  # a frame begun
            for _ in range(100):  # until the server holds it (real time: the bytes cross loopback)
                await asyncio.sleep(0.02)
                if server._connections and next(iter(server._connections)).held:
                    break
            (conn,) = server._connections
            assert conn.held and not conn.reading
            # the server's last read ended mid-frame (set here: where a read ends is the kernel's choice)
            conn.partial_since = clock.monotonic()
            clock.advance(40)
            await settle()
            assert not conn.closed, "closed for a frame the server itself did not read"
            frames, opaques = FrameReader(), list[int]()
            while len(opaques) < requests:  # the peer reads its answers: the server reads again
                data = await asyncio.wait_for(reader.read(1 << 20), 5)
                assert data, "the server closed the connection"
                opaques += [f.opaque for f in frames.feed(data)]
            assert opaques == list(range(requests))
            await settle()
            assert conn.reading and conn.partial_since == clock.monotonic()  # the frame's time starts again
            clock.advance(29)
            await settle()
            assert not conn.closed
            clock.advance(7.5)  # past the deadline by up to one sweep interval (30 s / 4)
            await settle()
            assert conn.closed, "the frame never completed after the server read again"
            writer.close()
        finally:
            await server.stop()

    asyncio.run(main())

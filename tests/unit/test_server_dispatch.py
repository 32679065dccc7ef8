"""How many pipelined requests one read pass of a server connection runs (``Connection._dispatch``): as many as
``AnswerFlow.hold`` allows when asked before every request, the rest held (decoded in the backlog, or left
undecoded past the decode-ahead cap). A
transport stand-in records the writes and holds every byte written (a peer that reads nothing); the real-socket
tests of the same path are tests/integration/test_connection_hygiene.py (non-readers, pipelining)."""

from __future__ import annotations

import asyncio
import concurrent.futures
from typing import Any

from broker_store.net.answer_flow import AnswerFlow
from broker_store.net.server import Connection, HandlerResult, RemotingServer
from broker_store.protocol.codes import ResponseCode
from broker_store.protocol.frame import RemotingCommand, encode_frame

BODY = b"a" * 16384


class HoldingTransport(asyncio.Transport):
    """Keeps every byte written (the peer takes none) and never reports its buffer full itself (a high-water mark
    above the flow's limit), so only the server's own count of queued answers can hold the requests."""

    def __init__(self) -> None:
        super().__init__()
        self.buffered = 0
        self.reading = True

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.buffered += len(data)

    def get_write_buffer_size(self) -> int:
        return self.buffered

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass


def _answer(cmd: RemotingCommand) -> RemotingCommand:
    return cmd.response(ResponseCode.SUCCESS, ext_fields={}, body=BODY)


def _requests(count: int) -> bytes:
    return b"".join(encode_frame(RemotingCommand(code=1, opaque=i)) for i in range(count))


def _run(flow: AnswerFlow, written_at_once: bool, count: int) -> tuple[list[int], Connection, HoldingTransport]:
    """Feed ``count`` pipelined requests in one read; the opaques the handler ran in that pass. With
    ``written_at_once`` each answer leaves during the pass (``reply_when_done`` on a resolved future writes at
    once), else it waits in the connection's queue for the loop's next iteration."""
    ran: list[int] = []

    def handler(cmd: RemotingCommand, conn: Connection) -> HandlerResult:
        ran.append(cmd.opaque)
        if not written_at_once:
            return _answer(cmd)
        done: concurrent.futures.Future[None] = concurrent.futures.Future()
        done.set_result(None)
        conn.reply_when_done(cmd, done, lambda _: _answer(cmd))
        return None

    async def main() -> tuple[Connection, HoldingTransport]:
        conn = Connection(RemotingServer(handler, flow=flow))
        transport = HoldingTransport()
        conn.connection_made(transport)
        conn.data_received(_requests(count))
        return conn, transport

    conn, transport = asyncio.run(main())
    return ran, conn, transport


def _waiting(conn: Connection) -> int:
    """Requests held: decoded ones in the backlog and whole frames left undecoded (the decode-ahead cap)."""
    return len(conn._backlog) + conn._reader.whole_frames()


def _frame(opaque: int) -> int:
    return len(encode_frame(_answer(RemotingCommand(code=1, opaque=opaque))))


def _run_before_hold(flow: AnswerFlow) -> int:
    """Requests run before ``hold`` says ANSWERS when each one's answer stays queued: asked before each request."""
    queued = index = 0
    while flow.hold(queued_bytes=queued, writer_paused=False, run_this_pass=index) is None:
        queued += _frame(index)
        index += 1
    return index


def test_answers_queued_in_the_pass_hold_the_next_request_at_the_limit() -> None:
    flow = AnswerFlow(max_requests_per_pass=None)
    ran, conn, transport = _run(flow, written_at_once=False, count=100)
    assert len(ran) == _run_before_hold(flow)
    assert not transport.reading and _waiting(conn) == 100 - len(ran)


def test_answers_written_during_the_pass_count_as_the_transport_holds_them() -> None:
    """Each answer goes to the transport as it is made: the queue in the connection stays empty, and only the
    transport's buffer, read again after each write, says the peer takes nothing."""
    flow = AnswerFlow(max_requests_per_pass=None)
    ran, conn, transport = _run(flow, written_at_once=True, count=100)
    assert transport.buffered == sum(_frame(i) for i in ran)  # every answer was written in the pass
    assert len(ran) == _run_before_hold(flow)
    assert not transport.reading and _waiting(conn) == 100 - len(ran)


def test_a_pass_runs_its_turn_of_requests_and_the_next_pass_the_next_turn() -> None:
    flow = AnswerFlow(max_queued_answer_bytes=1 << 30, max_requests_per_pass=16)
    ran: list[int] = []

    def handler(cmd: RemotingCommand, _conn: Connection) -> HandlerResult:
        ran.append(cmd.opaque)
        return cmd.response(ResponseCode.SUCCESS)

    async def main() -> list[int]:
        conn = Connection(RemotingServer(handler, flow=flow))
        transport = HoldingTransport()
        conn.connection_made(transport)
        conn.data_received(_requests(40))
        passes = [len(ran)]
        while _waiting(conn):
            await asyncio.sleep(0)  # one more pass of the loop: no time passes
            passes.append(len(ran))
        assert transport.reading
        return passes

    assert asyncio.run(main()) == [16, 32, 40]
    assert ran == list(range(40))

"""Remoting server: accepts connections, decodes frames, runs the handler per request concurrently.

Called by the broker and the name server. A peer that sends garbage or an oversized frame loses
only its own connection; a handler that raises gets a SYSTEM_ERROR response naming the error.

Handler contract: ``handler(cmd, conn)`` runs on the loop as soon as the request is decoded and
returns the response (or None), or an awaitable of it when it must wait (a held pull). Only awaitables
get a task: creating one per request costs more than a whole in-memory send (an ``async def`` handler
therefore always takes the task path; the broker's hot processors answer synchronously). A handler
waiting on a ``concurrent.futures.Future`` (a put's durability: SYNC_FLUSH, replica acks) returns None
after ``conn.reply_when_done``, which answers from the future's callback: no task, no asyncio future,
and no cross-thread wake-up when the future is resolved on the loop's own thread (replica acks are).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import logging
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from broker_store.net.framing import FrameReader
from broker_store.net.tls import TLS_HANDSHAKE_BYTE, ServerTls, TlsAcceptor
from broker_store.net.tls_settings import TlsMode
from broker_store.protocol.codes import ResponseCode
from broker_store.protocol.errors import ProtocolError, RocketMQError
from broker_store.protocol.frame import RemotingCommand, encode_frame

log = logging.getLogger(__name__)

T = TypeVar("T")
_PendingReply = tuple[RemotingCommand, Callable[[Any], RemotingCommand]]
HandlerResult = RemotingCommand | None | Awaitable[RemotingCommand | None]
Handler = Callable[[RemotingCommand, "Connection"], HandlerResult]


class Connection(asyncio.Protocol):
    """One accepted client connection."""

    def __init__(self, server: RemotingServer) -> None:
        self._server = server
        self._reader = FrameReader()
        self._transport: asyncio.Transport | None = None
        self.remote_addr = "?"
        self.closed = False
        self._tasks: set[asyncio.Task[None]] = set()
        # Responses produced in one loop iteration leave in one write (one syscall, not one each).
        self._out: list[bytes] = []
        self._flush_scheduled = False
        self._loop = asyncio.get_running_loop()
        """Cached: ``asyncio.get_running_loop()`` costs a getpid() system call, and sends call it per frame."""
        self._loop_thread = threading.get_ident()
        self._replies: dict[concurrent.futures.Future[Any], list[_PendingReply]] = {}
        """Requests waiting on each durability future (``reply_when_done``), answered in arrival order."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        self.remote_addr = f"{peer[0]}:{peer[1]}" if peer else "?"
        self._server._connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._server._connections.discard(self)
        for listener in self._server.disconnect_listeners:
            listener(self)

    def pause_writing(self) -> None:
        # The peer is not reading its responses: stop reading its requests until it catches up.
        if self._transport is not None:
            self._transport.pause_reading()

    def resume_writing(self) -> None:
        if self._transport is not None and not self.closed:
            self._transport.resume_reading()

    def data_received(self, data: bytes) -> None:
        try:
            commands = self._reader.feed(data)
        except ProtocolError as exc:
            if data[:1] == bytes([TLS_HANDSHAKE_BYTE]) and self._server.tls_mode is TlsMode.DISABLED:
                # A ClientHello reads as a frame of ~370 MB: say what it is (RocketMQ closes these too).
                log.warning("closing connection from %s: a TLS handshake, and tls.server.mode is disabled",
                            self.remote_addr)
            else:
                log.warning("closing connection from %s: %s", self.remote_addr, exc)
            self.close()
            return
        handler = self._server.handler
        for cmd in commands:
            if cmd.is_response:
                continue  # we never send requests on accepted connections
            try:
                result = handler(cmd, self)
            except Exception as exc:  # noqa: BLE001 - one bad request must not take the server down
                result = self._error_response(cmd, exc)
            if result is None or isinstance(result, RemotingCommand):
                if result is not None and not cmd.is_oneway:
                    self.send(result)
                continue
            if not inspect.isawaitable(result):
                result = self._error_response(cmd, TypeError(
                    f"handler returned {type(result).__name__}, not a response or an awaitable"))
                if not cmd.is_oneway:
                    self.send(result)
                continue
            task = self._loop.create_task(self._serve(cmd, result))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _error_response(self, cmd: RemotingCommand, exc: Exception) -> RemotingCommand:
        if not isinstance(exc, RocketMQError):
            log.error("handler failed for request code %s from %s", cmd.code, self.remote_addr,
                      exc_info=exc)
        return cmd.response(ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}")

    async def _serve(self, cmd: RemotingCommand, pending: Awaitable[RemotingCommand | None]) -> None:
        try:
            response = await pending
        except Exception as exc:  # noqa: BLE001 - one bad request must not take the server down
            response = self._error_response(cmd, exc)
        if response is not None and not cmd.is_oneway:
            self.send(response)

    def reply_when_done(self, cmd: RemotingCommand, future: concurrent.futures.Future[T],
                        respond: Callable[[T], RemotingCommand]) -> None:
        """Answer ``cmd`` with ``respond(result)`` once ``future`` resolves (call on the loop's thread).

        The answer runs on the thread that resolves the future: on the loop's thread the response is
        queued at once (many puts resolved by one replica ack leave in one write); from another thread
        (the flush thread) it hops onto the loop. Requests waiting on the same future (puts sharing an
        ack waiter) are answered by one callback, in arrival order. A failed or cancelled future, or a
        raising ``respond``, answers SYSTEM_ERROR naming the error.
        """
        replies = self._replies.get(future)
        if replies is not None:  # puts sharing one durability future: one callback answers them all
            replies.append((cmd, respond))
            return
        self._replies[future] = [(cmd, respond)]
        future.add_done_callback(self._replies_due)  # may run at once: the entry is in place first

    def _replies_due(self, future: concurrent.futures.Future[Any]) -> None:
        if threading.get_ident() == self._loop_thread:
            self._answer_replies(future)
            return
        try:
            self._loop.call_soon_threadsafe(self._answer_replies, future)
        except RuntimeError:  # the loop is closed: the server stopped and this connection with it
            log.debug("dropping responses to %s: the event loop is closed", self.remote_addr)

    def _answer_replies(self, future: concurrent.futures.Future[Any]) -> None:
        # Normally run from a replica's report or the flush thread, not from this connection's reads: the
        # answers leave in one write now rather than a loop iteration later (that wait is on every
        # synchronous put's round trip). The flag keeps ``send`` from scheduling a flush; frames queued
        # earlier leave first, so the order on the connection holds either way.
        self._flush_scheduled = True
        try:
            for cmd, respond in self._replies.pop(future, ()):
                try:
                    response = respond(future.result())
                except (Exception, concurrent.futures.CancelledError) as exc:  # noqa: BLE001 - answered, not raised
                    response = self._error_response(cmd, exc)
                if not cmd.is_oneway:
                    self.send(response)
        finally:
            self._flush()

    def send(self, cmd: RemotingCommand) -> None:
        """Queue a frame; frames queued in the same loop iteration are written together."""
        if self._transport is None or self.closed:
            return
        try:
            frame = encode_frame(cmd)
        except ProtocolError as exc:
            log.error("cannot send response to %s: %s", self.remote_addr, exc)
            frame = encode_frame(RemotingCommand(
                code=ResponseCode.SYSTEM_ERROR, opaque=cmd.opaque, flag=cmd.flag, remark=str(exc),
                serialize_type=cmd.serialize_type))
        self._out.append(frame)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        out, self._out = self._out, []
        if self._transport is not None and not self.closed and out:
            self._transport.write(out[0] if len(out) == 1 else b"".join(out))

    def close(self) -> None:
        if self._transport is not None:
            self._flush()
            self._transport.close()


class RemotingServer:
    """TCP server for remoting frames bound to ``host:port`` (port 0 picks a free one).

    ``tls``: RocketMQ's tls.server.mode (``net.tls``); None or disabled serves plain connections only.
    """

    def __init__(self, handler: Handler, host: str = "127.0.0.1", port: int = 0, *,
                 tls: ServerTls | None = None) -> None:
        self.handler = handler
        self.host = host
        self._port = port
        self.tls_mode = TlsMode.DISABLED if tls is None else tls.mode
        self._tls = tls
        self._acceptor: TlsAcceptor | None = None
        self._server: asyncio.Server | None = None
        self._connections: set[Connection] = set()
        self.disconnect_listeners: list[Callable[[Connection], None]] = []

    @property
    def port(self) -> int:
        if self._acceptor is not None:
            return self._acceptor.port
        if self._server is None:
            return self._port
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> None:
        if self._tls is not None and self._tls.mode is not TlsMode.DISABLED:
            acceptor = TlsAcceptor(lambda: Connection(self), self._tls)
            await acceptor.start(self.host, self._port)
            self._acceptor = acceptor
            return
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: Connection(self), self.host, self._port,
                                                reuse_address=True, backlog=1024)

    async def stop(self) -> None:
        if self._acceptor is not None:
            await self._acceptor.stop()
            self._acceptor = None
            for conn in list(self._connections):
                conn.close()
            return
        if self._server is None:
            return
        self._server.close()
        for conn in list(self._connections):
            conn.close()
        await self._server.wait_closed()
        self._server = None

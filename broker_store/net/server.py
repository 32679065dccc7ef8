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

With ``limits`` (``net.hygiene``) the server closes idle connections and frames that never complete (a timer
on the injected clock looks every ``sweep_interval``) and answers requests past its caps SYSTEM_BUSY
"[OVERLOAD] ...". A connection held because its peer does not read (below) is idle like any other once nothing of
it is in flight, and its close does not wait for the peer to read the answers stuck in it (``Connection.close``).

Flow control and fairness (``net.answer_flow``, the pure rules): a peer that sends requests without reading the
answers holds at most ``max_queued_answer_bytes`` of answers (plus one) in the server and ``kernel_unsent_bytes`` in
its socket (``TCP_NOTSENT_LOWAT``, so the kernel's send buffer cannot absorb megabytes first): past that its further
requests wait undispatched (and its socket unread) until it reads, resumed by asyncio's ``resume_writing``; they
wait as the bytes they came in, at most ``max_decoded_ahead`` of them decoded. One connection runs at most
``max_requests_per_pass`` requests per event-loop pass, then the others have their turn.
Pipelined requests from a peer that does not read cost the server neither unbounded memory nor the CPU other
clients need, and none is dropped: each is answered once the peer reads, or the server closes the connection and
logs how many it leaves unanswered.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import logging
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from broker_store.clock import SYSTEM_CLOCK, Clock, TimerHandle
from broker_store.net.answer_flow import DEFAULT_FLOW, AnswerFlow, Hold
from broker_store.net.framing import FrameReader
from broker_store.net.hygiene import ConnectionLimits, close_reason, connection_overload, request_overload
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
        self.in_flight = 0
        """Requests received and not answered yet (tasks and ``reply_when_done``)."""
        self.last_activity = server.clock.monotonic()
        self.partial_since: float | None = None
        """When the buffered incomplete frame's first byte arrived (None: at a frame boundary)."""
        self.overloaded: str | None = None
        """Past the server's connection cap: every request is answered SYSTEM_BUSY with this, then closed."""
        self._out_bytes = 0
        """Bytes in ``_out`` (answers queued in this loop iteration, not yet written)."""
        self._backlog: list[RemotingCommand] = []
        """Requests decoded and held undispatched (at most ``flow.max_decoded_ahead``); those after them wait
        undecoded in ``_reader``."""
        self._held = False
        """Requests wait (``_backlog``, or whole frames in ``_reader``) and the socket is not read."""
        self._closing = False
        """``close`` was called: nothing more is dispatched (``closed`` waits for the transport's end)."""
        self._write_paused = False
        self._backlog_scheduled = False
        self._flow = server.flow

    @property
    def held(self) -> bool:
        """Requests wait for the peer to take its answers, or for the next pass of the loop (the socket is not
        read meanwhile)."""
        return self._held

    @property
    def reading(self) -> bool:
        """Whether the server reads the socket (not held, not paused for the peer to read its answers)."""
        return not (self._held or self._write_paused)

    @property
    def decoded_waiting(self) -> int:
        """Requests decoded and waiting (at most ``AnswerFlow.max_decoded_ahead``; the rest wait as bytes)."""
        return len(self._backlog)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        self.remote_addr = f"{peer[0]}:{peer[1]}" if peer else "?"
        sock = transport.get_extra_info("socket")
        if sock is not None:
            for level, option, value in self._flow.socket_options():
                try:
                    sock.setsockopt(level, option, value)
                except OSError as exc:  # not TCP: the server's own count of queued answers still bounds them
                    log.debug("socket option %s for %s not set: %s", option, self.remote_addr, exc)
        limits = self._server.limits
        if limits is not None:
            self.overloaded = connection_overload(limits, len(self._server._connections))
            if self.overloaded is not None:
                log.warning("connection from %s over the cap: %s", self.remote_addr, self.overloaded)
                self._server._overloaded.add(self)  # not counted; answered SYSTEM_BUSY, closed by the next sweep
                return
        self._server._connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._server._connections.discard(self)
        self._server._overloaded.discard(self)
        for listener in self._server.disconnect_listeners:
            listener(self)

    def pause_writing(self) -> None:
        # The peer is not reading its responses: stop reading its requests until it catches up.
        self._write_paused = True
        if self._transport is not None:
            self._transport.pause_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        if self._transport is not None and not self.closed:
            self._dispatch_backlog()

    def _hold(self, run_this_pass: int) -> Hold | None:
        """``AnswerFlow.hold`` for this connection now."""
        queued = self._out_bytes
        if self._transport is not None:
            queued += self._transport.get_write_buffer_size()
        return self._flow.hold(queued_bytes=queued, writer_paused=self._write_paused, run_this_pass=run_this_pass)

    def _schedule_backlog(self) -> None:
        if not self._backlog_scheduled:
            self._backlog_scheduled = True
            self._loop.call_soon(self._dispatch_backlog)

    def _dispatch_backlog(self) -> None:
        """Dispatch the waiting requests while the answers flow; read the socket again once none wait."""
        self._backlog_scheduled = False
        if self._transport is None or self._closing:
            return
        if self._held:
            self._held = False
            waiting, self._backlog = self._backlog, []
            ran = self._dispatch(waiting, 0) if waiting else 0
            if not self._held and not self._closing:
                self._serve_requests(b"", ran)
        if not self._held and not self._write_paused and not self._closing:
            if self.partial_since is not None:  # the peer could not send the rest while we did not read
                self.partial_since = self._server.clock.monotonic()
            self._transport.resume_reading()

    def data_received(self, data: bytes) -> None:
        if self._closing:
            return
        if self._held:  # requests before these wait for the peer to read: keep the bytes, decode them later
            self._reader.keep(data)
        else:
            self._serve_requests(data, 0)
        limits = self._server.limits
        if limits is not None and not self._closing:
            now = self.last_activity = self._server.clock.monotonic()
            self.partial_since = (self.partial_since or now) if self._reader.buffered and self._reader.partial \
                else None

    def _serve_requests(self, data: bytes, run_this_pass: int) -> None:
        """Decode the requests of what ``_reader`` holds plus ``data``, ``max_decoded_ahead`` at a time, and
        dispatch them until ``AnswerFlow.hold`` holds the connection (the rest stay undecoded)."""
        batch = self._flow.max_decoded_ahead
        while True:
            if run_this_pass and self._reader.ready:  # decode no more than may run now
                hold = self._hold(run_this_pass)
                if hold is not None:
                    self._hold_requests([], hold)
                    return
            try:
                commands = self._reader.feed(data, batch)
            except ProtocolError as exc:
                if data[:1] == bytes([TLS_HANDSHAKE_BYTE]) and self._server.tls_mode is TlsMode.DISABLED:
                    # A ClientHello reads as a frame of ~370 MB: say what it is (RocketMQ closes these too).
                    log.warning("closing connection from %s: a TLS handshake, and tls.server.mode is disabled",
                                self.remote_addr)
                else:
                    log.warning("closing connection from %s: %s", self.remote_addr, exc)
                self.close()
                return
            data = b""
            if commands:
                run_this_pass = self._dispatch(commands, run_this_pass)
            if self._held or self._closing or len(commands) < batch:
                return

    def _hold_requests(self, waiting: list[RemotingCommand], hold: Hold | None) -> None:
        """Hold the connection: ``waiting`` (decoded) and the undecoded rest wait, the socket is not read."""
        self._backlog = waiting
        self._held = True
        if self._transport is not None:
            self._transport.pause_reading()
        if hold is Hold.TURN:
            self._schedule_backlog()

    def _dispatch(self, commands: list[RemotingCommand], run_this_pass: int) -> int:
        """Run the handler for each request in order, ``run_this_pass`` having run before them; as soon as
        ``AnswerFlow.hold`` says so the rest wait (``_hold_requests``): until the answers drain, or until the next
        pass of the loop. Returns the requests run in this pass."""
        limits = self._server.limits
        handler = self._server.handler
        for index, cmd in enumerate(commands):
            hold = self._hold(run_this_pass)
            if hold is not None:
                self._hold_requests(commands[index:], hold)
                break
            run_this_pass += 1
            if cmd.is_response:
                continue  # we never send requests on accepted connections
            if limits is not None:
                busy = self.overloaded or request_overload(limits, self.in_flight)
                if busy is not None:
                    if not cmd.is_oneway:
                        self.send(cmd.response(ResponseCode.SYSTEM_BUSY, busy))
                    continue
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
            self.in_flight += 1
            task = self._loop.create_task(self._serve(cmd, result))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        if self.overloaded is not None:
            self.close()
        return run_this_pass

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
        finally:
            self.in_flight -= 1
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
        self.in_flight += 1
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
                self.in_flight -= 1
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
        self._out_bytes += len(frame)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        out, self._out = self._out, []
        self._out_bytes = 0
        if self._transport is not None and not self.closed and out:
            self._transport.write(out[0] if len(out) == 1 else b"".join(out))
            if self._server.limits is not None:
                self.last_activity = self._server.clock.monotonic()
            if self._held and self._hold(0) is None:  # the answers left: serve the next requests
                self._schedule_backlog()

    def close(self) -> None:
        """Close the connection: the answers queued leave first, unless the peer is not taking them (its socket
        is full): a graceful close would then wait for a peer that may never read, and the connection, its
        descriptor and its buffers would stay, so it is aborted (a reset) and those answers are dropped."""
        self._closing = True
        if self._held and not self.closed:
            waiting = len(self._backlog) + self._reader.whole_frames()
            if waiting:
                log.warning("closing connection from %s with %d of its requests not served (it was not reading "
                            "its answers)", self.remote_addr, waiting)
            self._backlog, self._held = [], False
        if self._transport is not None:
            self._flush()
            if self._transport.get_write_buffer_size():
                self._transport.abort()
            else:
                self._transport.close()


class RemotingServer:
    """TCP server for remoting frames bound to ``host:port`` (port 0 picks a free one).

    ``tls``: RocketMQ's tls.server.mode (``net.tls``); None or disabled serves plain connections only.
    ``limits``: connection hygiene (``net.hygiene``; None: none), timed by ``clock``; the same for plain and
    TLS connections. ``flow``: answer flow control and per-pass fairness (``net.answer_flow``).
    """

    def __init__(self, handler: Handler, host: str = "127.0.0.1", port: int = 0, *,
                 tls: ServerTls | None = None, limits: ConnectionLimits | None = None,
                 clock: Clock = SYSTEM_CLOCK, flow: AnswerFlow = DEFAULT_FLOW) -> None:
        self.handler = handler
        self.limits = limits
        self.flow = flow
        self.clock = clock
        self._sweep_timer: TimerHandle | None = None
        self.host = host
        self._port = port
        self.tls_mode = TlsMode.DISABLED if tls is None else tls.mode
        self._tls = tls
        self._acceptor: TlsAcceptor | None = None
        self._server: asyncio.Server | None = None
        self._connections: set[Connection] = set()
        self._overloaded: set[Connection] = set()
        """Connections past ``limits.max_connections``: answered SYSTEM_BUSY, closed by the next sweep."""
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
            acceptor = TlsAcceptor(lambda: Connection(self), self._tls, self.clock)
            await acceptor.start(self.host, self._port)
            self._acceptor = acceptor
            self._arm_sweep()
            return
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: Connection(self), self.host, self._port,
                                                reuse_address=True, backlog=1024)
        self._arm_sweep()

    def _arm_sweep(self) -> None:
        if self.limits is not None and (self.limits.sweeps or self.limits.max_connections is not None):
            self._sweep_timer = self.clock.call_later(self.limits.sweep_interval(), self._sweep)

    def _sweep(self) -> None:
        """Close the connections ``net.hygiene`` says are idle or stuck in a frame; look again later."""
        self._sweep_timer = None
        if (self._server is None and self._acceptor is None) or self.limits is None:
            return
        now = self.clock.monotonic()
        for conn in list(self._overloaded):
            conn.close()
        for conn in list(self._connections):
            reason = close_reason(self.limits, now, last_activity=conn.last_activity,
                                  partial_since=conn.partial_since, in_flight=conn.in_flight, reading=conn.reading)
            if reason is not None:
                log.info("closing connection from %s: %s", conn.remote_addr, reason)
                conn.close()
        self._arm_sweep()

    async def stop(self) -> None:
        if self._sweep_timer is not None:
            self._sweep_timer.cancel()
            self._sweep_timer = None
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

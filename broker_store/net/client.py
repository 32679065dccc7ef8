"""Remoting client: one multiplexed connection per address, requests matched to responses by opaque.

Used by ``broker_store.client`` (producers, consumers, admin) and by brokers talking to the name
server. All methods run on one asyncio loop; the sync facade in ``broker_store.client`` owns that loop.
Requests to one address are written in call order, also while its connection is being opened. The request
timeouts and the connect wait run on the client's ``Clock`` (a ``ManualClock`` in tests: no sleeping).
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import ssl
from collections.abc import Awaitable, Callable

from broker_store.clock import SYSTEM_CLOCK, Clock
from broker_store.net.call_order import CallOrder
from broker_store.net.framing import FrameReader
from broker_store.net.tls import client_context
from broker_store.net.tls_settings import TlsClientSettings
from broker_store.protocol.codes import ResponseCode
from broker_store.protocol.errors import ProtocolError, RequestTimeoutError, TransportError, is_tls_refusal
from broker_store.protocol.frame import FLAG_ONEWAY, RemotingCommand, encode_frame

log = logging.getLogger(__name__)

PushHandler = Callable[[RemotingCommand], Awaitable[RemotingCommand | None]]
_opaques = itertools.count(1)


def _split_addr(addr: str) -> tuple[str, int]:
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit():
        raise TransportError(f"address {addr!r} is not host:port")
    return host, int(port)


def _expire(fut: asyncio.Future[RemotingCommand], code: int, addr: str, timeout: float) -> None:
    if not fut.done():
        fut.set_exception(RequestTimeoutError(f"request code {code} to {addr} timed out after {timeout}s"))


class _ClientConnection(asyncio.Protocol):
    def __init__(self, addr: str, push_handler: PushHandler | None, *, tls: bool = False) -> None:
        self.addr = addr
        self._tls = tls
        self._heard = False
        """Whether the server sent anything (with TLS: a connection closed before that was refused by the
        server's certificate check, which TLS 1.3 makes after the client's side of the handshake is done)."""
        self._reader = FrameReader()
        self._push_handler = push_handler
        self.transport: asyncio.Transport | None = None
        self.pending: dict[int, asyncio.Future[RemotingCommand]] = {}
        self.closed = False
        self._drained = asyncio.Event()
        self._drained.set()
        # Requests issued in one loop iteration leave in one write (one syscall, not one each).
        self._out: list[bytes] = []
        self._flush_scheduled = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._drained.set()
        reason = f": {exc}" if exc else ""
        if self._tls and not self._heard and (exc is None or isinstance(exc, OSError)):  # OSError: SSLError too
            reason = (f": the server ended the TLS session before answering{f' ({exc})' if exc else ''}; it may "
                      "require a client certificate signed by a CA it trusts (tls.server.need.client.auth; "
                      "tls.client.certPath / keyPath)")
        error = TransportError(f"connection to {self.addr} closed{reason}")
        for fut in self.pending.values():
            if not fut.done():
                fut.set_exception(error)
        self.pending.clear()

    def pause_writing(self) -> None:
        self._drained.clear()

    def resume_writing(self) -> None:
        self._drained.set()

    def data_received(self, data: bytes) -> None:
        self._heard = True
        try:
            commands = self._reader.feed(data)
        except ProtocolError as exc:
            log.warning("closing connection to %s: %s", self.addr, exc)
            if self.transport is not None:
                self.transport.close()
            return
        for cmd in commands:
            if cmd.is_response:
                fut = self.pending.pop(cmd.opaque, None)
                if fut is not None and not fut.done():
                    fut.set_result(cmd)
            else:
                asyncio.get_running_loop().create_task(self._serve_push(cmd))

    async def _serve_push(self, cmd: RemotingCommand) -> None:
        response = None
        if self._push_handler is not None:
            response = await self._push_handler(cmd)
        elif not cmd.is_oneway:
            response = cmd.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f"request code {cmd.code} not supported")
        if response is not None and not cmd.is_oneway and self.transport is not None and not self.closed:
            self.transport.write(encode_frame(response))

    async def write(self, frame: bytes) -> None:
        if self.closed or self.transport is None:
            raise TransportError(f"connection to {self.addr} is closed")
        self._out.append(frame)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)
        if not self._drained.is_set():
            await self._drained.wait()

    def _flush(self) -> None:
        self._flush_scheduled = False
        out, self._out = self._out, []
        if self.transport is not None and not self.closed and out:
            self.transport.write(out[0] if len(out) == 1 else b"".join(out))


class RemotingClient:
    """Async request/response over pooled connections. ``timeout`` is per request, in seconds.

    ``tls``: connect with TLS (RocketMQ's tls.enable with its tls.client.* settings) to every address;
    None: plain connections. Raises ``ConfigError`` when a certificate file does not load.
    ``clock``: what the request timeouts and ``connect_timeout`` count on.
    """

    def __init__(self, *, connect_timeout: float = 3.0, push_handler: PushHandler | None = None,
                 tls: TlsClientSettings | None = None, clock: Clock = SYSTEM_CLOCK) -> None:
        self.connect_timeout = connect_timeout
        self.tls = tls
        self.clock = clock
        self._ssl: ssl.SSLContext | None = None if tls is None else client_context(tls)
        self._push_handler = push_handler
        self._conns: dict[str, _ClientConnection] = {}
        self._connecting: dict[str, asyncio.Future[_ClientConnection]] = {}
        self._call_order: CallOrder[str] = CallOrder()
        """Per address: requests waiting for the connection are written in call order, and a request started
        while they still wait is written after them (``net.call_order``)."""

    def _ready(self, addr: str) -> _ClientConnection | None:
        """The open connection to ``addr`` if a request may be written on it at once."""
        conn = self._conns.get(addr)
        if conn is None or conn.closed or self._call_order.waiting(addr):
            return None
        return conn

    async def _connection(self, addr: str) -> _ClientConnection:
        conn = self._ready(addr)
        if conn is not None:
            return conn
        turn = self._call_order.enter(addr)
        try:
            conn = self._conns.get(addr)
            if conn is None or conn.closed:
                conn = await self._connect(addr)
            await turn.wait_ahead()
            return conn
        finally:
            turn.end()

    async def _connect(self, addr: str) -> _ClientConnection:
        """One connection attempt per address at a time, shared by everyone waiting for it."""
        pending = self._connecting.get(addr)
        if pending is not None:
            return await asyncio.shield(pending)
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[_ClientConnection] = loop.create_future()
        self._connecting[addr] = fut
        try:
            host, port = _split_addr(addr)
            context = self._ssl
            tls = context is not None
            try:
                async with self.clock.timeout(self.connect_timeout):
                    _, new_conn = await loop.create_connection(
                        lambda: _ClientConnection(addr, self._push_handler, tls=tls), host, port,
                        ssl=context, server_hostname=host if tls else None)
            except TimeoutError as exc:
                raise TransportError(f"connect to {addr} timed out after {self.connect_timeout}s") from exc
            except ssl.SSLError as exc:
                raise TransportError(f"TLS handshake with {addr} failed: {exc.reason or exc}") from exc
            except ConnectionError as exc:
                if context is None or isinstance(exc, ConnectionRefusedError):
                    raise TransportError(f"cannot connect to {addr}: {exc.strerror or exc}") from exc
                raise TransportError(f"TLS handshake with {addr} failed: the server closed the connection "
                                     f"({exc.strerror or type(exc).__name__}); a server with tls.server.mode "
                                     "disabled refuses TLS") from exc
            except OSError as exc:
                raise TransportError(f"cannot connect to {addr}: {exc.strerror or exc}") from exc
            self._conns[addr] = new_conn
            fut.set_result(new_conn)
            return new_conn
        except BaseException as exc:
            fut.set_exception(exc)
            fut.exception()  # mark retrieved: waiters re-raise it themselves
            raise
        finally:
            del self._connecting[addr]

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout: float) -> RemotingCommand:
        """Send a request and wait for its response; TransportError / RequestTimeoutError on failure.

        ``timeout`` counts from the call (a write held back by a full socket buffer included).
        """
        conn = self._ready(addr)
        if conn is None:
            conn = await self._connection(addr)
        cmd.opaque = opaque = next(_opaques) & 0x7FFFFFFF
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[RemotingCommand] = loop.create_future()
        conn.pending[opaque] = fut
        # A timer that fails the future is much cheaper than a wait_for's waiter and task hops.
        timer = self.clock.call_later(timeout, functools.partial(_expire, fut, cmd.code, addr, timeout))
        try:
            await conn.write(encode_frame(cmd))
            resp = await fut
        finally:
            timer.cancel()
            conn.pending.pop(opaque, None)
        if is_tls_refusal(resp.code, resp.remark) and self._conns.get(addr) is conn:
            # a TLS-enforcing server answers a plain connection's first request so, then closes it: the connection
            # is never handed to another call, which would meet the close as a reset instead of this answer
            self.close_connection(addr)
        return resp

    async def invoke_oneway(self, addr: str, cmd: RemotingCommand) -> None:
        conn = await self._connection(addr)
        cmd.opaque = next(_opaques) & 0x7FFFFFFF
        cmd.flag |= FLAG_ONEWAY
        await conn.write(encode_frame(cmd))

    def close_connection(self, addr: str) -> None:
        conn = self._conns.pop(addr, None)
        if conn is not None and conn.transport is not None:
            conn._flush()  # requests already issued (oneway ones included) still leave
            conn.transport.close()

    async def close(self) -> None:
        for addr in list(self._conns):
            self.close_connection(addr)
        await asyncio.sleep(0)

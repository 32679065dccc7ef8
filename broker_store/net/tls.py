"""TLS on the remoting transport: ``ssl.SSLContext``s from ``net.tls_settings`` and the server's accept loop
for RocketMQ's permissive and enforcing modes.

Used by ``net.server.RemotingServer`` (``TlsAcceptor``) and ``net.client.RemotingClient``
(``client_context``). As RocketMQ's TlsModeHandler, the server looks at the first byte a client sends
before anything reads it: 0x16 opens a TLS record (a ClientHello), anything else is a plain remoting
frame. Here the byte is peeked (``MSG_PEEK``) on the accepted socket, so the stdlib's TLS transport
(``loop.connect_accepted_socket(ssl=...)``) still sees the whole ClientHello. ``disabled`` keeps the
plain ``loop.create_server`` path (no peek, no extra task per connection); a TLS handshake reaching it
fails frame decoding and ``net.server`` logs it as one. The acceptor's timers (first byte, handshake, a refused
plain client's close, the pause after a failed accept) run on the server's ``Clock``.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass

from broker_store.clock import Clock, TimerHandle
from broker_store.net.framing import FrameReader
from broker_store.net.tls_settings import ClientAuth, TlsClientSettings, TlsMode, TlsServerSettings
from broker_store.protocol.codes import ResponseCode
from broker_store.protocol.errors import TLS_REQUIRED_MARK, ConfigError, ProtocolError
from broker_store.protocol.frame import encode_frame

log = logging.getLogger(__name__)

TLS_HANDSHAKE_BYTE = 0x16
"""First byte of a TLS handshake record (RocketMQ's HANDSHAKE_MAGIC_CODE)."""
FIRST_BYTE_TIMEOUT_S = 30.0
"""How long an accepted connection may stay silent before it is closed unclassified (the client speaks
first in the remoting protocol, so a silent peer holds only a socket until then)."""
HANDSHAKE_TIMEOUT_S = 10.0
"""How long a TLS handshake may take once its ClientHello arrived (on the server's clock)."""
LOOP_HANDSHAKE_TIMEOUT_S = 60.0
"""asyncio's own handshake timer (its default), which cannot be put on a clock: only a backstop, the clock's
``HANDSHAKE_TIMEOUT_S`` ends a real handshake first."""
ACCEPT_RETRY_S = 0.1
"""The pause after a failed accept (out of descriptors): the loop does not spin."""
PLAIN_REFUSAL_TIMEOUT_S = 5.0
"""Enforcing mode: how long a plain client has to complete the frame its refusal answers."""
TLS_REQUIRED_REMARK = (f"{TLS_REQUIRED_MARK} this server runs tls.server.mode=enforcing and refuses plain "
                       "connections; connect with TLS (tls.enable=true)")
"""The SYSTEM_ERROR remark a plain client's first request gets from an enforcing server."""

_VERIFY_MODES = {ClientAuth.NONE: ssl.CERT_NONE, ClientAuth.OPTIONAL: ssl.CERT_OPTIONAL,
                 ClientAuth.REQUIRE: ssl.CERT_REQUIRED}


def _load(context: ssl.SSLContext, what: str, action: Callable[[], None]) -> None:
    try:
        action()
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"{what}: cannot load: {exc}") from exc


def server_context(settings: TlsServerSettings) -> ssl.SSLContext:
    """The server side of ``settings`` (mode not ``disabled``); ``ConfigError`` naming the keys when a file
    does not load (not PEM, the key does not match the certificate...)."""
    if settings.cert_path is None or settings.key_path is None:
        raise ConfigError("tls.server: certPath and keyPath are required unless mode is disabled")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    cert, key = settings.cert_path, settings.key_path
    _load(context, f"tls.server.certPath / tls.server.keyPath ({cert}, {key})",
          lambda: context.load_cert_chain(cert, key))
    trust = settings.trust_cert_path
    if trust is not None:
        _load(context, f"tls.server.trustCertPath ({trust})", lambda: context.load_verify_locations(trust))
    context.verify_mode = _VERIFY_MODES[settings.need_client_auth]
    return context


def client_context(settings: TlsClientSettings) -> ssl.SSLContext:
    """The client side of ``settings``; ``ConfigError`` naming the keys when a file does not load."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.check_hostname = False  # as RocketMQ: servers are dialled by the IPs their routes name
    if settings.auth_server:
        context.verify_mode = ssl.CERT_REQUIRED
        trust = settings.trust_cert_path
        if trust is not None:
            _load(context, f"tls.client.trustCertPath ({trust})", lambda: context.load_verify_locations(trust))
        else:
            context.load_default_certs()
    else:
        context.verify_mode = ssl.CERT_NONE
    cert, key = settings.cert_path, settings.key_path
    if cert is not None and key is not None:
        _load(context, f"tls.client.certPath / tls.client.keyPath ({cert}, {key})",
              lambda: context.load_cert_chain(cert, key))
    return context


@dataclass(frozen=True)
class ServerTls:
    """A server's TLS mode with its context built once (shared by a broker's two ports)."""

    mode: TlsMode
    context: ssl.SSLContext | None
    """None only when ``mode`` is disabled."""

    @classmethod
    def from_settings(cls, settings: TlsServerSettings) -> ServerTls:
        if settings.mode is TlsMode.DISABLED:
            return cls(TlsMode.DISABLED, None)
        return cls(settings.mode, server_context(settings))


class _PlainRefusal(asyncio.Protocol):
    """Enforcing mode, plain client: answer its first request SYSTEM_ERROR ``TLS_REQUIRED_REMARK`` (so the
    client reports why, instead of a bare closed connection as RocketMQ's), then close."""

    def __init__(self, peer: str, clock: Clock) -> None:
        self._peer = peer
        self._clock = clock
        self._reader = FrameReader()
        self._transport: asyncio.Transport | None = None
        self._timer: TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        self._timer = self._clock.call_later(PLAIN_REFUSAL_TIMEOUT_S, transport.close)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()

    def data_received(self, data: bytes) -> None:
        if self._transport is None or self._transport.is_closing():
            return
        try:
            commands = self._reader.feed(data)
        except ProtocolError:
            self._transport.close()
            return
        if commands:
            first = commands[0]
            if not first.is_response and not first.is_oneway:
                self._transport.write(encode_frame(first.response(ResponseCode.SYSTEM_ERROR, TLS_REQUIRED_REMARK)))
            self._transport.close()


async def _peek_first_byte(loop: asyncio.AbstractEventLoop, sock: socket.socket, clock: Clock) -> bytes:
    """The first byte the peer sent, left unread in the socket (b"" if it closed first); ``TimeoutError`` when
    none came within ``FIRST_BYTE_TIMEOUT_S`` of ``clock``."""
    readable: asyncio.Future[None] = loop.create_future()

    def ready() -> None:
        if not readable.done():
            readable.set_result(None)

    fd = sock.fileno()
    loop.add_reader(fd, ready)
    try:
        if not await clock.wait_for(readable, FIRST_BYTE_TIMEOUT_S):
            raise TimeoutError
    finally:
        loop.remove_reader(fd)
    return sock.recv(1, socket.MSG_PEEK)


class TlsAcceptor:
    """The listening socket and accept loop of a permissive or enforcing server.

    Each accepted connection is classified by its first byte, then handed to the event loop's own
    transports: TLS (``protocol_factory`` behind the handshake), plain (``protocol_factory`` as is, in
    permissive mode) or refused (enforcing mode). A failed handshake costs only its own connection and
    is logged with the peer and the reason. Its timers run on ``clock``.
    """

    def __init__(self, protocol_factory: Callable[[], asyncio.Protocol], tls: ServerTls, clock: Clock) -> None:
        if tls.mode is TlsMode.DISABLED or tls.context is None:
            raise ValueError("TlsAcceptor serves the permissive and enforcing modes")
        self._factory = protocol_factory
        self._tls = tls
        self._clock = clock
        self._context: ssl.SSLContext = tls.context
        self._sock: socket.socket | None = None
        self._accepting: asyncio.Task[None] | None = None
        self._admitting: set[asyncio.Task[None]] = set()

    @property
    def port(self) -> int:
        return 0 if self._sock is None else int(self._sock.getsockname()[1])

    async def start(self, host: str, port: int) -> None:
        sock = socket.create_server((host, port), backlog=1024)  # SO_REUSEADDR on POSIX, as create_server
        sock.setblocking(False)
        self._sock = sock
        self._accepting = asyncio.get_running_loop().create_task(self._accept_loop(sock))

    async def _accept_loop(self, listener: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                sock, peer = await loop.sock_accept(listener)
            except OSError as exc:  # out of descriptors, a connection aborted before accept
                log.warning("accept failed on port %s: %s", self.port, exc)
                await self._clock.sleep(ACCEPT_RETRY_S)
                continue
            sock.setblocking(False)
            task = loop.create_task(self._admit(sock, f"{peer[0]}:{peer[1]}"))
            self._admitting.add(task)
            task.add_done_callback(self._admitting.discard)

    async def _admit(self, sock: socket.socket, peer: str) -> None:
        loop = asyncio.get_running_loop()
        try:
            first = await _peek_first_byte(loop, sock, self._clock)
        except asyncio.CancelledError:  # the server stops
            sock.close()
            raise
        except (OSError, TimeoutError) as exc:
            log.info("closing connection from %s before its first byte: %s", peer, exc or "timed out")
            sock.close()
            return
        if not first:
            sock.close()
            return
        try:
            if first[0] == TLS_HANDSHAKE_BYTE:
                async with self._clock.timeout(HANDSHAKE_TIMEOUT_S):
                    await loop.connect_accepted_socket(self._factory, sock, ssl=self._context,
                                                       ssl_handshake_timeout=LOOP_HANDSHAKE_TIMEOUT_S)
            elif self._tls.mode is TlsMode.ENFORCING:
                log.warning("refusing a plain connection from %s: tls.server.mode is enforcing", peer)
                clock = self._clock
                await loop.connect_accepted_socket(lambda: _PlainRefusal(peer, clock), sock)
            else:
                await loop.connect_accepted_socket(self._factory, sock)
        except TimeoutError:  # the clock's timeout (asyncio's own would be a ConnectionAbortedError)
            log.warning("TLS handshake with %s failed: not done within %s s", peer, HANDSHAKE_TIMEOUT_S)
            sock.close()
        except (OSError, ssl.SSLError) as exc:  # SSLError is an OSError; named for the reader
            log.warning("TLS handshake with %s failed: %s", peer, exc or type(exc).__name__)
            sock.close()

    async def stop(self) -> None:
        """Stop accepting (connections already handed over are the caller's to close)."""
        tasks = [t for t in (self._accepting, *self._admitting) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._accepting = None
        if self._sock is not None:
            self._sock.close()
            self._sock = None

"""The primary's HA port: one CommitLog shipping stream per connected replica, acks fed to the quorum.

asyncio I/O only; the decisions live in ``replica_start`` (where a replica starts), ``quorum`` (links,
acks, timeouts) and ``wire`` (bytes). The broker (lead's wiring) builds one ``PrimaryService`` per
primary over its MessageStore and ``Quorum``, calls ``notify_appended()`` from the store's arrival
listener so idle streams wake at once, and awaits ``Quorum.wait`` futures on the send path. A role
change away from primary stops the service (which answers waiting puts). Controller mode later adds
the epoch handshake before the first batch (its own codec) and feeds SyncStateSet membership from
the same per-link acks.

Per connection: the replica's first 8-byte report is its max offset; ``decide_replica_start`` picks
FOLLOW (ship from there), RESTART (ship from the primary's min offset) or DIVERGED (send one heartbeat
at the primary's max offset, so the replica can tell, and close). Then a sender task ships
``ha_transfer_batch_size`` batches until caught up, waits for new data, and sends a heartbeat after
``ha_send_heartbeat_interval_ms`` of silence; the reader feeds every later report to the quorum as an
ack. A link silent for ``ha_housekeeping_interval_ms`` is closed by ``Quorum.tick``. Every timer (the first
report's deadline, heartbeats, the quorum's tick) reads the injected ``Clock``.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from broker_store.acl.peers import PeerDecision
from broker_store.acl.refusal_log import RefusalLog, unlogged_suffix
from broker_store.clock import Clock, TimerHandle
from broker_store.ha.errors import HALinkError, HAProtocolError
from broker_store.ha.peer_auth import (
    HELLO_SIZE,
    MAGIC_SIZE,
    OPEN,
    PROOF_SIZE,
    PeerPolicy,
    encode_challenge,
    is_hello_magic,
    random_nonce,
)
from broker_store.ha.quorum import Quorum
from broker_store.ha.replica_links import LinkId
from broker_store.ha.replica_start import StartAction, decide_replica_start
from broker_store.ha.settings import HASettings
from broker_store.ha.store_view import PrimaryLog
from broker_store.ha.wire import ReportDecoder, encode_batch_header, encode_heartbeat
from broker_store.store import PutStatus

log = logging.getLogger(__name__)

READ_CHUNK = 64 * 1024
"""Bytes asked of a link's socket per read (the opening, then the acks), by this service and its subclasses."""
_WRITE_BUFFER_HIGH = 4 * 1024 * 1024
"""Bytes queued in the transport before ``drain`` waits: several batches in flight when catching up."""
_YIELD_EVERY = 1024 * 1024
"""A catching-up stream lets the loop run other work (puts, acks) after this many bytes: ``drain``
only yields when the socket pushes back, which a fast replica on loopback rarely does."""


@dataclass(eq=False)
class ReplicaStream:
    """One replica's link as the service sees it: what ``PrimaryService`` and a subclass's hooks read and set."""

    link: LinkId
    writer: asyncio.StreamWriter
    next_offset: int = -1
    """Next CommitLog byte to ship (-1 before the first report)."""
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    sender: asyncio.Task[None] | None = None
    parked: bool = False
    """The sender waits for new data: caught up, nothing queued beyond the transport's limit."""
    last_sent: float = 0.0
    """Clock time of the last batch or heartbeat written (a heartbeat follows a silence this long)."""
    broker_id: int = -1
    """Controller mode: the replica's broker id from its handshake (-1 on a classic link)."""
    async_learner: bool = False
    """Controller mode: the replica never joins the SyncStateSet."""
    dropped: bool = False
    """The transport was found closing and nothing more is written to it (``PrimaryService._writable``)."""


class PrimaryService:
    """Listens on the HA port and ships ``log`` to every replica that connects.

    Contract: runs on one event loop; ``log`` is read on that loop's thread; ``quorum`` is only touched
    from it (the send path must call ``Quorum.admit``/``wait`` on the same loop). ``peers`` (``peer_auth``)
    decides who may connect before anything else is read: a refused peer is closed and logged (each reason at
    once, its repeats at most once a second).

    A subclass speaks another link format (``epoch_primary_service``: controller mode) by overriding the hooks
    ``_open_stream``, ``_stream_opened``, ``_stream_closed``, ``_report``, ``_batch_header``, ``_heartbeat_frame``
    and ``_batch_limit``; each sees a link as a ``ReplicaStream`` and reads its socket ``READ_CHUNK`` at a time.
    """

    _controller_mode = False
    """Which link format this service speaks (the HA hello names it, so a mismatch is refused by name)."""

    def __init__(self, log_: PrimaryLog, quorum: Quorum, settings: HASettings, *, host: str = "127.0.0.1",
                 port: int = 0, clock: Clock, peers: PeerPolicy = OPEN) -> None:
        self._log = log_
        self._quorum = quorum
        self._host, self._port = host, port
        self._clock = clock
        self._batch = settings.ha_transfer_batch_size
        self._heartbeat = settings.ha_send_heartbeat_interval_ms / 1000
        self._first_report_timeout = settings.ha_housekeeping_interval_ms / 1000
        self._streams: dict[LinkId, ReplicaStream] = {}
        self._server: asyncio.Server | None = None
        self._tick_handle: TimerHandle | None = None
        self._tick_at: float | None = None
        self._ids = itertools.count(1)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ship_scheduled = False
        self._stopped = False
        self._peers = peers
        self.refused = RefusalLog()
        """Peers refused so far (``refused.refusals``) and the rate limit of their log lines."""

    @property
    def port(self) -> int:
        """The bound HA port (the OS's pick when configured 0)."""
        if self._server is None:
            raise HALinkError("the HA service is not started")
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> None:
        try:
            self._server = await asyncio.start_server(self._serve, self._host, self._port)
        except OSError as exc:
            raise HALinkError(f"cannot listen for replicas on {self._host}:{self._port}: {exc}") from exc
        self._loop = asyncio.get_running_loop()
        self._quorum.on_wakeup_changed = self._arm_tick
        self._quorum.share_waiters()  # sealed by _ship_to_parked, once per loop turn with appends

    async def stop(self) -> None:
        """Close the listener and every link; answer puts still waiting (FLUSH_SLAVE_TIMEOUT)."""
        self._stopped = True
        self._quorum.on_wakeup_changed = None
        if self._tick_handle is not None:
            self._tick_handle.cancel()
            self._tick_handle = None
        if self._server is not None:
            self._server.close()
        for stream in list(self._streams.values()):
            stream.writer.close()
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None
        self._quorum.fail_pending(PutStatus.FLUSH_SLAVE_TIMEOUT)

    def notify_appended(self) -> None:
        """The log grew: ship to idle streams (call from the store's arrival listener, on the loop thread).

        Puts decoded together (one read of a producer connection) are shipped together: one callback per
        loop turn ships everything new to each caught-up replica, without waking its sender task, and
        seals the turn's shared ack waiter (the puts of one turn share one future).
        """
        if not self._ship_scheduled and self._loop is not None:
            self._ship_scheduled = True
            self._loop.call_soon(self._ship_to_parked)

    def _ship_to_parked(self) -> None:
        self._ship_scheduled = False
        self._quorum.seal_waiters()
        if self._stopped:
            return  # stopped since the append: its links are closing
        log_ = self._log
        for stream in list(self._streams.values()):
            if not self._writable(stream):
                continue  # one closed link never costs the others their batch
            if not stream.parked:
                stream.wake.set()  # shipping or held back by a full transport: its sender goes on
                continue
            transport = stream.writer.transport
            if (stream.next_offset >= log_.min_physical_offset
                    and transport.get_write_buffer_size() < _WRITE_BUFFER_HIGH and self._ship_batch(stream)):
                if log_.max_physical_offset > stream.next_offset:
                    stream.wake.set()  # more than one batch: the sender ships the rest (and drains)
            else:
                stream.wake.set()

    def _writable(self, stream: ReplicaStream) -> bool:
        """False once ``stream``'s transport is closing: closed by the housekeeping tick, by a newer link of the same
        replica, or by the peer, while its reader has not yet run its end (which unregisters it). Nothing more is
        written to it (uvloop raises on a write to a closed transport; a primary thawed after a freeze meets this
        with appends and the tick due in one loop turn). Logged once per stream, at INFO: the tick or the reader
        already said why the link ended."""
        if not stream.writer.is_closing():
            return True
        if not stream.dropped:
            stream.dropped = True
            log.info("HA link %s: closed; no longer shipping to it", stream.link)
        return False

    def _ship_batch(self, stream: ReplicaStream) -> int:
        """Write the next batch (at most ``ha_transfer_batch_size``) to ``stream``; its size, 0 if none.
        Header and data leave in one write: a lone 12-byte header would cost the replica a wake-up.
        The caller has checked ``_writable`` since its last await."""
        data = self._log.read_commit_log(stream.next_offset, self._batch_limit(stream.next_offset))
        if data:
            stream.writer.write(self._batch_header(stream.next_offset, len(data)) + data)
            stream.next_offset += len(data)
            stream.last_sent = self._clock.monotonic()
        return len(data)

    # -- one replica -----------------------------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        link: LinkId = f"{peer[0]}:{peer[1]}#{next(self._ids)}" if peer else f"replica#{next(self._ids)}"
        writer.transport.set_write_buffer_limits(high=_WRITE_BUFFER_HIGH)
        stream = ReplicaStream(link, writer)
        registered = False
        try:
            if not await self._admit(reader, stream, str(peer[0]) if peer else "?"):
                return
            opened = await self._open_stream(reader, stream)
            if opened is None:
                return
            first, pending, feed = opened
            self._streams[link] = stream
            self._quorum.replica_connected(link)
            registered = True
            self._stream_opened(stream)
            self._report(stream, first)
            for offset in pending:
                self._report(stream, offset)
            stream.sender = asyncio.create_task(self._send_loop(stream), name=f"ha-ship {link}")
            while True:
                data = await reader.read(READ_CHUNK)
                if not data:
                    return
                for offset in feed(data):
                    self._report(stream, offset)
        except (HAProtocolError, HALinkError) as exc:
            log.warning("HA link %s closed: %s", link, exc)
        except (OSError, asyncio.IncompleteReadError) as exc:
            log.info("HA link %s lost: %s", link, exc)
        finally:
            if registered:
                self._quorum.replica_disconnected(link)
                self._stream_closed(stream)
            self._streams.pop(link, None)
            if stream.sender is not None:
                stream.sender.cancel()
                with contextlib.suppress(asyncio.CancelledError, OSError):
                    await stream.sender
            writer.close()

    async def _admit(self, reader: asyncio.StreamReader, stream: ReplicaStream, host: str) -> bool:
        """The peer policy before the link's opening: the address, then (with a secret) the challenge-response.
        False after refusing the peer (logged per reason, repeats rate-limited); the caller closes."""
        decision = self._peers.address(host)
        if decision.allowed and self._peers.secret is not None:
            decision = await self._authenticate(reader, stream.writer, self._peers.secret)
        if not decision.allowed:
            unlogged = self.refused.note(f"{host}: {decision.reason}", self._clock.monotonic())
            if unlogged is not None:
                log.warning("HA port refused %s: %s%s", stream.link, decision.reason, unlogged_suffix(unlogged))
        return decision.allowed

    async def _authenticate(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                            secret: bytes) -> PeerDecision:
        """The primary's half of ``peer_auth``'s exchange: hello in, challenge out, proof in."""
        policy = self._peers
        try:
            async with self._clock.timeout(self._first_report_timeout):
                head = await reader.readexactly(MAGIC_SIZE)
                if is_hello_magic(head):  # a secretless replica's opening is refused on its first 4 bytes
                    head += await reader.readexactly(HELLO_SIZE - MAGIC_SIZE)
                decision, hello = policy.hello(head, controller_mode=self._controller_mode)
                if hello is None:
                    return decision
                nonce = random_nonce()
                writer.write(encode_challenge(secret, hello, nonce))
                proof = await reader.readexactly(PROOF_SIZE)
        except TimeoutError:
            return PeerDecision(False, f"no HA authentication within {self._first_report_timeout:g} s")
        except asyncio.IncompleteReadError:
            return PeerDecision(False, "the peer closed the link during HA authentication (it may have refused "
                                       "this primary's proof: ha.ha_secret_file differs)")
        return policy.replica_proved(hello, nonce, proof)

    async def _open_stream(self, reader: asyncio.StreamReader,
                           stream: ReplicaStream) -> tuple[int, list[int], Callable[[bytes], list[int]]] | None:
        """The link's opening (classic: the first 8-byte report): sets ``stream.next_offset`` and returns the
        first ack, acks that came with it, and the decoder of later acks; None after refusing the replica."""
        decoder = ReportDecoder()
        first, pending = await self._first_report(reader, decoder)
        if not self._place(stream, first):
            await stream.writer.drain()
            return None
        return first, pending, decoder.feed

    def _place(self, stream: ReplicaStream, first: int) -> bool:
        """Where shipping to a replica whose first ack is ``first`` starts (``decide_replica_start``); False
        after refusing it (DIVERGED: one heartbeat at the primary's max offset so the replica can tell)."""
        decision = decide_replica_start(replica_max=first, primary_min=self._log.min_physical_offset,
                                        primary_max=self._log.max_physical_offset)
        if decision.action is StartAction.DIVERGED:
            log.error("HA link %s: refusing replica: %s", stream.link, decision.reason)
            stream.writer.write(self._heartbeat_frame(decision.offset))
            return False
        log.info("HA link %s: %s", stream.link, decision.reason)
        stream.next_offset = decision.offset
        return True

    def _stream_opened(self, stream: ReplicaStream) -> None:
        """Hook: a stream joined the quorum (controller mode tracks its SyncStateSet membership)."""

    def _stream_closed(self, stream: ReplicaStream) -> None:
        """Hook: a stream left the quorum."""

    def _batch_header(self, offset: int, size: int) -> bytes:
        """The header of a batch of ``size`` bytes at ``offset`` (classic: 12 bytes)."""
        return encode_batch_header(offset, size)

    def _heartbeat_frame(self, next_offset: int) -> bytes:
        return encode_heartbeat(next_offset)

    def _batch_limit(self, offset: int) -> int:
        """Most bytes one batch from ``offset`` may carry (controller mode also stops at an epoch's end)."""
        return self._batch

    async def _first_report(self, reader: asyncio.StreamReader, decoder: ReportDecoder) -> tuple[int, list[int]]:
        async with self._clock.timeout(self._first_report_timeout):
            while True:
                data = await reader.read(READ_CHUNK)
                if not data:
                    raise HALinkError("replica closed the link before reporting its offset")
                offsets = decoder.feed(data)
                if offsets:
                    return offsets[0], offsets[1:]

    def _report(self, stream: ReplicaStream, offset: int) -> None:
        if offset > stream.next_offset:
            raise HAProtocolError(f"replica acked offset {offset}, past the {stream.next_offset} shipped to it")
        self._quorum.replica_reported(stream.link, offset)

    async def _send_loop(self, stream: ReplicaStream) -> None:
        writer, log_ = stream.writer, self._log
        stream.last_sent = self._clock.monotonic()
        since_yield = 0
        try:
            while self._writable(stream):  # checked after every await: no write below awaits before it
                if stream.next_offset < log_.min_physical_offset:
                    # Retention deleted what this replica needs next: it restarts from the new min.
                    decision = decide_replica_start(replica_max=stream.next_offset,
                                                    primary_min=log_.min_physical_offset,
                                                    primary_max=log_.max_physical_offset)
                    log.warning("HA link %s: %s", stream.link, decision.reason)
                    stream.next_offset = decision.offset
                shipped = self._ship_batch(stream)
                if shipped:
                    await writer.drain()
                    since_yield += shipped
                    if since_yield >= _YIELD_EVERY:
                        since_yield = 0
                        await asyncio.sleep(0)
                    continue
                stream.wake.clear()
                if log_.max_physical_offset > stream.next_offset:
                    continue  # grew between the read and the clear
                idle = self._clock.monotonic() - stream.last_sent
                if idle < self._heartbeat:
                    # Parked: new data is shipped by ``_ship_to_parked`` without waking this task; it
                    # wakes for more than one batch, a full transport, or the heartbeat.
                    stream.parked = True
                    try:
                        with contextlib.suppress(TimeoutError):
                            async with self._clock.timeout(self._heartbeat - idle):
                                await stream.wake.wait()
                    finally:
                        stream.parked = False
                    continue
                writer.write(self._heartbeat_frame(stream.next_offset))
                stream.last_sent = self._clock.monotonic()
                await writer.drain()
        except OSError as exc:
            log.info("HA link %s: send failed: %s", stream.link, exc)
            writer.close()

    # -- timers ----------------------------------------------------------------------------------------

    def _arm_tick(self) -> None:
        """Keep one timer armed at the quorum's next wakeup (dead links, slave timeouts)."""
        when = self._quorum.next_wakeup()
        if when is None or (self._tick_at is not None and self._tick_at <= when):
            return
        if self._tick_handle is not None:
            self._tick_handle.cancel()
        self._tick_at = when
        self._tick_handle = self._clock.call_later(max(when - self._clock.monotonic(), 0.0), self._on_tick)

    def _on_tick(self) -> None:
        self._tick_handle = None
        self._tick_at = None
        for link in self._quorum.tick():
            stream = self._streams.get(link)
            if stream is not None:
                log.warning("HA link %s: nothing heard for the housekeeping interval, closing it", link)
                stream.writer.close()
        self._arm_tick()

"""A replica's HA link: connect to the primary's HA port, report the max offset, append what arrives.

asyncio I/O only; what a batch's offset means is ``replica_start.interpret_batch_offset``, the bytes
are ``wire``. The broker (lead's wiring) runs one ``ReplicaClient`` per SLAVE over its MessageStore;
the store's own dispatch builds the replica's ConsumeQueues from the appended bytes. A role change
to primary stops the client first. Controller mode later adds the epoch handshake (truncate to the
last consistent point) before the first batch, in its own codec.

The session: report ``max_physical_offset`` (8 bytes); then for every read, apply the batches in
order, on the loop for a small read and on a worker thread for a large one (a batch at the replica's
max offset is appended; one past it means the primary's log starts beyond ours: RESTART, drop the log
and continue there; one below it means we hold bytes the primary does not: DIVERGED, stop following and
keep ``diverged`` for an operator), then report the new max offset, which is the ack the primary's
quorum counts: one report per read, sent once the bytes are in the CommitLog and, for a small read,
before its records are indexed. A report also goes out
every ``ha_send_heartbeat_interval_ms``. Nothing received for ``ha_housekeeping_interval_ms`` (the
primary heartbeats more often than that) is a dead link: close, wait ``reconnect_delay``, connect
again and resume from the max offset. Every one of these timers reads the injected ``Clock``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor

from broker_store.address import split_host_port
from broker_store.clock import Clock, TimerHandle
from broker_store.ha.errors import HALinkClosedError, HALinkError, HAProtocolError, ReplicaLogDivergedError
from broker_store.ha.peer_auth import (
    CHALLENGE_SIZE,
    OPEN,
    PeerPolicy,
    encode_hello,
    random_nonce,
    replica_proof,
    split_challenge,
)
from broker_store.ha.replica_start import StartAction, interpret_batch_offset
from broker_store.ha.settings import HASettings
from broker_store.ha.store_view import ReplicaLog
from broker_store.ha.wire import BatchDecoder, TransferBatch, encode_report
from broker_store.protocol.errors import RefusedRecordError, StoreError

log = logging.getLogger(__name__)

_READ_CHUNK = 1024 * 1024
INLINE_APPLY_BYTES = 64 * 1024
"""A read up to this size is written and indexed on the loop thread; larger ones (catching up) on the
worker thread, so the loop keeps reading the next chunk while the last one is indexed. The rule of every link
format's ``_follow`` (this client's and its subclasses')."""


def link_end_level(error: Exception, *, was_up: bool, failures_in_row: int) -> int:
    """The log level of a session's end. A link that was up and that the primary closed is INFO: a clean stop
    of the primary (every ``up`` shutdown, a restart) looks the same, and a crash shows as the next attempt's
    failure. Otherwise (a dead link, a refused or failed attempt) WARNING for the first failure of a run, DEBUG
    for the repeats every reconnect delay (``failures_in_row`` counts attempts that never came up, this one
    included); the link coming back is reported at INFO."""
    if was_up and isinstance(error, HALinkClosedError):
        return logging.INFO
    return logging.WARNING if failures_in_row <= 1 else logging.DEBUG


class DamageReport:
    """Whether a replica reports a damaged record its primary sends (``RefusedRecordError``). Pure.

    While the primary's own copy is damaged every session ends on the same record (the replica reconnects every
    ``reconnect_delay``, asks from its max offset, is sent it again): a WARNING when that starts (or moves to
    another offset), DEBUG for the repeats, and an INFO when it clears (the replica's log reaches the record's
    end: it came intact, e.g. from a new primary)."""

    def __init__(self) -> None:
        self.standing: RefusedRecordError | None = None
        """The damage last refused and not cleared."""

    def refused(self, error: RefusedRecordError) -> int:
        """A session ended on ``error``: the log level to report it at."""
        repeat = self.standing is not None and self.standing.offset == error.offset
        self.standing = error
        return logging.DEBUG if repeat else logging.WARNING

    def progressed(self, max_offset: int) -> RefusedRecordError | None:
        """The replica's log reached ``max_offset``: the damage that cleared with it (to report), else None."""
        standing = self.standing
        if standing is None or max_offset < standing.end:
            return None
        self.standing = None
        return standing


class ReplicaClient:
    """Follows the primary at ``primary_address`` (default: ``settings.ha_primary_address``) into ``log``.

    Contract: ``log`` is written only by this client, one append at a time (on the loop thread or its
    one worker thread). With ``peers.secret`` every session first proves the secret and checks the primary's
    proof (``peer_auth``); a primary that fails it is never followed (the session ends, and is retried).

    A subclass speaks another link format (``epoch_replica_client``: controller mode) by overriding the hooks
    ``_begin``, ``_start``, ``_ack`` and ``_follow``; its ``_follow`` applies on the loop up to
    ``INLINE_APPLY_BYTES`` as this one does.
    """

    _controller_mode = False
    """Which link format this client speaks (named in the HA hello)."""

    def __init__(self, log_: ReplicaLog, settings: HASettings, *, clock: Clock, primary_address: str | None = None,
                 reconnect_delay: float = 1.0, peers: PeerPolicy = OPEN) -> None:
        address = primary_address or settings.ha_primary_address
        if address is None:
            raise HALinkError("a replica needs the primary's HA address (ha.ha_primary_address)")
        self._host, self._port = split_host_port(address)
        self._log = log_
        self._clock = clock
        self._heartbeat = settings.ha_send_heartbeat_interval_ms / 1000
        self._dead_after = settings.ha_housekeeping_interval_ms / 1000
        self._reconnect_delay = reconnect_delay
        self._peers = peers
        self._task: asyncio.Task[None] | None = None
        self._appender: ThreadPoolExecutor | None = None
        """One worker thread for appends, so a stopped client's last append ends before anyone reads the
        max offset again (a restarted client would otherwise report a max offset about to move)."""
        self.connected = False
        """True while a session with the primary is up."""
        self.sessions = 0
        """Sessions started so far (reconnects = sessions - 1)."""
        self.last_error: str = ""
        """Why the last session ended."""
        self.diverged: ReplicaLogDivergedError | None = None
        """Set when the replica stopped following because its log reaches past the primary's."""
        self._decoder = BatchDecoder()
        """The current session's (``_begin``)."""
        self._failures_in_row = 0
        """Sessions in a row that ended without coming up (``link_end_level``)."""
        self._reported_down = False
        """A WARNING said the link is down: its return is reported once at INFO."""
        self._damage = DamageReport()

    async def start(self) -> None:
        if self._task is None:
            self._appender = ThreadPoolExecutor(1, thread_name_prefix="ha-replica-append")
            self._task = asyncio.create_task(self._run(), name=f"ha-replica {self._host}:{self._port}")

    async def stop(self) -> None:
        """Stop following; returns once no append is in flight."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._appender is not None:
            await asyncio.to_thread(self._appender.shutdown, wait=True)
            self._appender = None
        self.connected = False

    async def _run(self) -> None:
        while True:
            try:
                await self._session()
            except ReplicaLogDivergedError as exc:
                self.diverged = exc
                self.last_error = str(exc)
                log.error("HA replica stops following %s:%s: %s", self._host, self._port, exc)
                return
            except RefusedRecordError as exc:  # the link works; the primary's copy of a record is damaged
                self.last_error = str(exc)
                log.log(self._damage.refused(exc), "HA link to %s:%s ended: %s (asked again every %g s; reported "
                        "again when it clears)", self._host, self._port, exc, self._reconnect_delay)
            except (HALinkError, HAProtocolError, StoreError) as exc:
                self.last_error = str(exc)
                was_up = self.connected
                self._failures_in_row = 0 if was_up else self._failures_in_row + 1
                level = link_end_level(exc, was_up=was_up, failures_in_row=self._failures_in_row)
                self._reported_down = self._reported_down or level >= logging.WARNING
                log.log(level, "HA link to %s:%s ended: %s (reconnecting every %g s)", self._host, self._port, exc,
                        self._reconnect_delay)
            finally:
                self.connected = False
            await self._clock.sleep(self._reconnect_delay)

    async def _session(self) -> None:
        """One connection, the loop both link formats share: connect, send the opening (``_begin``), the
        format's start (``_start``: the controller-mode handshake and truncation; nothing here), then
        heartbeats beside ``_follow`` of every read until the link fails. The format is in the hooks."""
        try:
            async with self._clock.timeout(self._dead_after):
                reader, writer = await asyncio.open_connection(self._host, self._port)
        except (OSError, TimeoutError) as exc:
            raise HALinkError(f"cannot connect to the primary's HA port {self._host}:{self._port}: "
                              f"{exc or 'timed out'}") from exc
        self.sessions += 1
        heartbeat: asyncio.Task[None] | None = None
        clock, dead_after = self._clock, self._dead_after
        read_since: float | None = None
        watchdog: TimerHandle | None = None

        def check_silence() -> None:
            # One timer re-armed from when the current read began, not a timeout context per read (a read
            # is on every synchronous put's round trip): a read waiting dead_after fails. While no read is
            # pending (a catch-up chunk applying) nothing counts, so detection may come up to dead_after late.
            nonlocal watchdog
            silent = 0.0 if read_since is None else clock.monotonic() - read_since
            if silent >= dead_after:
                watchdog = None
                reader.set_exception(HALinkError(f"nothing from the primary for {dead_after:g} s: dead link"))
            else:
                watchdog = clock.call_later(dead_after - silent, check_silence)

        async def read(during: str = "") -> bytes:
            nonlocal read_since
            read_since = clock.monotonic()
            data = await reader.read(_READ_CHUNK)
            read_since = None
            if not data:
                raise HALinkClosedError(f"the primary closed the link{during}")
            return data

        try:
            if self._peers.secret is not None:
                await self._authenticate(reader, writer, self._peers.secret)
            writer.write(self._begin())
            watchdog = clock.call_later(dead_after, check_silence)
            await self._start(read, writer)
            self.connected = True
            if self._reported_down:
                log.info("HA link to %s:%s is up again", self._host, self._port)
                self._reported_down = False
            heartbeat = asyncio.create_task(self._heartbeat_loop(writer))
            data = b""  # units the start left buffered are followed before the first read
            while True:
                await self._follow(data, writer)
                if self._damage.standing is not None:
                    self._report_cleared()
                data = await read()
        except OSError as exc:
            raise HALinkError(f"HA link to {self._host}:{self._port} failed: {exc}") from exc
        finally:
            if watchdog is not None:
                watchdog.cancel()
            if heartbeat is not None:
                heartbeat.cancel()
            writer.close()

    def _report_cleared(self) -> None:
        cleared = self._damage.progressed(self._log.max_physical_offset)
        if cleared is not None:
            log.info("HA replica: the record at commit log offset %d came intact from %s:%s (it was refused: %s)",
                     cleared.offset, self._host, self._port, cleared)

    async def _authenticate(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, secret: bytes) -> None:
        """The replica's half of ``peer_auth``'s exchange: hello out, the primary's challenge in (its proof
        checked before anything else is believed), this replica's proof out. HALinkError when it fails."""
        where = f"{self._host}:{self._port}"
        hello = encode_hello(random_nonce(), controller_mode=self._controller_mode)
        writer.write(hello)
        try:
            async with self._clock.timeout(self._dead_after):
                challenge = await reader.readexactly(CHALLENGE_SIZE)
        except asyncio.IncompleteReadError as exc:
            raise HALinkError(f"the primary {where} closed the link during HA authentication: it refused this "
                              "replica (its ha.ha_allowed_peers or ha.ha_secret_file) or has no ha_secret_file"
                              ) from exc
        except TimeoutError as exc:
            raise HALinkError(f"no HA challenge from the primary {where} within {self._dead_after:g} s") from exc
        nonce, proof = split_challenge(challenge)
        if not self._peers.primary_proved(hello, nonce, proof):
            raise HALinkError(f"the primary {where} failed the HA secret proof (ha.ha_secret_file differs): "
                              "not following it")
        writer.write(replica_proof(secret, hello, nonce))

    # -- the classic format's hooks (``EpochReplicaClient`` has the controller-mode ones) --------------------

    def _begin(self) -> bytes:
        """A new session's decoder, and the first bytes to send: the max offset report."""
        self._decoder = BatchDecoder()
        return self._ack()

    async def _start(self, read: Callable[[str], Awaitable[bytes]], writer: asyncio.StreamWriter) -> None:
        """Before following: nothing in the classic format (the primary places its stream at the report)."""

    def _ack(self) -> bytes:
        """The ack / heartbeat: the max offset report, which the primary's quorum counts."""
        return encode_report(self._log.max_physical_offset)

    async def _follow(self, data: bytes, writer: asyncio.StreamWriter) -> None:
        """Apply the batches ``data`` completed, then ack once."""
        batches = self._decoder.feed(data)
        if not batches:
            return
        if len(data) <= INLINE_APPLY_BYTES:
            # Following closely (a few puts per read): write on the loop, ack at once, index after
            # the ack is on its way. A thread hop each way would add two wake-ups to every
            # synchronous put's round trip for a write of a few KiB to the page cache.
            self._write(batches)
            writer.write(self._ack())
            self._log.index_commit_log()
        else:
            await asyncio.get_running_loop().run_in_executor(self._appender, self._apply, batches)
            writer.write(self._ack())

    def _apply(self, batches: list[TransferBatch]) -> None:
        """Worker thread: write the batches, then index them."""
        self._write(batches)
        self._log.index_commit_log()

    def _write(self, batches: list[TransferBatch]) -> None:
        """Write each batch at the log's max offset (or restart/refuse per its offset), unindexed."""
        log_ = self._log
        for batch in batches:
            if batch.offset != log_.max_physical_offset:
                replica_min, replica_max = log_.min_physical_offset, log_.max_physical_offset
                decision = interpret_batch_offset(replica_min=replica_min, replica_max=replica_max,
                                                  batch_offset=batch.offset)
                decision.raise_if_diverged(replica_min=replica_min, replica_max=replica_max,
                                           primary_min=-1, primary_max=batch.offset)
                if decision.action is StartAction.RESTART:
                    log.warning("HA replica: %s", decision.reason)
                    log_.restart_commit_log(decision.offset)
            if batch.data:
                log_.write_commit_log(batch.offset, batch.data)

    async def _heartbeat_loop(self, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError):
            while True:
                await self._clock.sleep(self._heartbeat)
                writer.write(self._ack())

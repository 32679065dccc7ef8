"""The controller-mode primary's HA port: the classic shipping streams over RocketMQ 5's epoch wire, with the
SyncStateSet and the confirm offset it drives.

asyncio I/O only, a ``PrimaryService`` whose hooks speak ``wire_epoch``: each link opens with the replica's
16-byte handshake (its broker id), the primary's handshake (max offset, epoch entries), then the replica's
first ack (its max offset after its own truncation, ``epoch_start``), placed by the classic rule
(``replica_start``). Batches carry the 36-byte transfer header and stop at an epoch's end. Acks feed the quorum
(counting SyncStateSet members only) and the ``sync_state_set.SyncStateSetTracker``, whose confirm offset
this service advances in the store (records become visible once every counted member holds them) and sends
to the replicas (a heartbeat frame to caught-up ones whenever it moves, so their consumers see it too).
Changes of the set go to the controller through the injected ``alterer`` (the broker's controller client:
CONTROLLER_ALTER_SYNC_STATE_SET); without one the primary is its own authority and applies them at once
(tests, and a controller-mode broker run by hand). Every timer reads the injected ``Clock``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from broker_store.clock import Clock, TimerHandle
from broker_store.ha.errors import HALinkError, HAProtocolError
from broker_store.ha.peer_auth import OPEN, PeerPolicy
from broker_store.ha.primary_service import READ_CHUNK, PrimaryService, ReplicaStream
from broker_store.ha.quorum import Quorum
from broker_store.ha.settings import HASettings
from broker_store.ha.store_view import EpochPrimaryLog
from broker_store.ha.sync_state_set import SyncStateSetTracker
from broker_store.ha.wire_epoch import (
    ReplicaHandshake,
    ReplicaStreamDecoder,
    encode_primary_handshake,
    encode_transfer,
    encode_transfer_header,
)
from broker_store.protocol.controller import SyncStateSet
from broker_store.protocol.errors import RocketMQError
from broker_store.store.epoch_cache import EpochEntry

log = logging.getLogger(__name__)

SyncStateSetAlterer = Callable[[frozenset[int], int], Awaitable[SyncStateSet]]
"""``alterer(new_members, set_epoch)``: ask the controller to replace the SyncStateSet of epoch ``set_epoch``
by ``new_members``; returns the set the controller now holds, raises a ``RocketMQError`` when refused."""


class EpochPrimaryService(PrimaryService):
    """Ships ``log`` to controller-mode replicas and keeps the SyncStateSet (see the module docstring).

    ``self_id`` is this broker's controller-assigned id; ``sync_state_set`` the set the controller elected it
    with (``set_sync_state_set`` takes later ones). Contract as ``PrimaryService``'s.
    """

    _controller_mode = True

    def __init__(self, log_: EpochPrimaryLog, quorum: Quorum, settings: HASettings, *, host: str = "127.0.0.1",
                 port: int = 0, clock: Clock, self_id: int, sync_state_set: SyncStateSet | None = None,
                 alterer: SyncStateSetAlterer | None = None, peers: PeerPolicy = OPEN) -> None:
        super().__init__(log_, quorum, settings, host=host, port=port, clock=clock, peers=peers)
        self._elog = log_
        last = log_.epoch_cache.last_entry
        self.tracker = SyncStateSetTracker(
            clock, self_id=self_id, sync_state_set=sync_state_set or SyncStateSet(frozenset({self_id}), 0),
            max_not_catchup=settings.ha_max_time_slave_not_catchup_ms / 1000, confirm_offset=log_.confirm_offset,
            epoch_start_offset=0 if last is None else last.start_offset)
        self._all_ack = settings.all_ack_in_sync_state_set
        self._alterer = alterer
        self._alter_task: asyncio.Task[None] | None = None
        self._sss_timer: TimerHandle | None = None
        self._sss_at: float | None = None
        self._counted_version = -1
        self.on_sync_state_set_changed: Callable[[SyncStateSet], None] | None = None
        """Called after the controller (or the local authority) answered an alter with a new set."""

    async def start(self) -> None:
        await super().start()
        self._sync()

    async def stop(self) -> None:
        if self._sss_timer is not None:
            self._sss_timer.cancel()
            self._sss_timer = None
        if self._alter_task is not None:
            self._alter_task.cancel()
        await super().stop()

    def set_sync_state_set(self, sync_state_set: SyncStateSet) -> None:
        """The controller's current set (a notification or a role change's answer)."""
        self.tracker.set_sync_state_set(sync_state_set)
        self._sync()

    def notify_appended(self) -> None:
        super().notify_appended()
        self._sync()  # a primary alone in its set confirms each write at once

    # -- the link's hooks ---------------------------------------------------------------------------------------

    async def _open_stream(self, reader: asyncio.StreamReader,
                           stream: ReplicaStream) -> tuple[int, list[int], Callable[[bytes], list[int]]] | None:
        decoder = ReplicaStreamDecoder()
        units: list[ReplicaHandshake | int] = []
        async with self._clock.timeout(self._first_report_timeout):
            while not any(isinstance(u, int) for u in units):
                data = await reader.read(READ_CHUNK)
                if not data:
                    raise HALinkError("replica closed the link during the handshake")
                units.extend(decoder.feed(data))
                if units and isinstance(units[0], ReplicaHandshake) and stream.broker_id < 0:
                    handshake = units[0]
                    stream.broker_id, stream.async_learner = handshake.broker_id, handshake.async_learner
                    stream.writer.write(encode_primary_handshake(self._elog.max_physical_offset,
                                                                 self._elog.epoch_cache))
        if not isinstance(units[0], ReplicaHandshake):
            raise HAProtocolError("replica acked before its handshake")
        acks = [u for u in units[1:] if isinstance(u, int)]
        if not self._place(stream, acks[0]):
            await stream.writer.drain()
            return None

        def feed(data: bytes) -> list[int]:
            return [u for u in decoder.feed(data) if isinstance(u, int)]
        return acks[0], acks[1:], feed

    def _stream_opened(self, stream: ReplicaStream) -> None:
        old = self.tracker.link_of(stream.broker_id)
        if old is not None and old in self._streams:
            log.warning("HA: broker %d reconnected (link %s); closing its older link %s", stream.broker_id,
                        stream.link, old)
            self._streams[old].writer.close()
        self.tracker.connected(stream.broker_id, stream.link, async_learner=stream.async_learner)
        self._sync()

    def _stream_closed(self, stream: ReplicaStream) -> None:
        self.tracker.disconnected(stream.broker_id, stream.link)
        self._sync()

    def _report(self, stream: ReplicaStream, offset: int) -> None:
        super()._report(stream, offset)
        if stream.broker_id >= 0:
            self.tracker.acked(stream.broker_id, stream.link, offset, self._elog.max_physical_offset)
            self._sync()

    def _epoch_at(self, offset: int) -> tuple[EpochEntry, int | None]:
        """The epoch entry holding ``offset`` and where its range ends (None: the newest, open-ended)."""
        cache = self._elog.epoch_cache
        entries = cache.entries
        for i in range(len(entries) - 1, -1, -1):
            if entries[i].start_offset <= offset:
                return entries[i], (entries[i + 1].start_offset if i + 1 < len(entries) else None)
        if entries:  # below the first entry: bytes from before controller mode, shipped under the first epoch
            return entries[0], entries[0].start_offset if entries[0].start_offset > offset else None
        return EpochEntry(0, 0), None

    def _batch_limit(self, offset: int) -> int:
        _, end = self._epoch_at(offset)
        return self._batch if end is None else max(min(self._batch, end - offset), 0)

    def _batch_header(self, offset: int, size: int) -> bytes:
        entry, _ = self._epoch_at(offset)
        return encode_transfer_header(offset, size, entry, self._elog.confirm_offset)

    def _heartbeat_frame(self, next_offset: int) -> bytes:
        entry, _ = self._epoch_at(next_offset)
        if entry.start_offset > next_offset:
            entry = EpochEntry(entry.epoch, next_offset)
        return encode_transfer(next_offset, b"", entry, self._elog.confirm_offset)

    # -- the SyncStateSet ---------------------------------------------------------------------------------------

    def _sync(self) -> None:
        """After any event: recount the quorum's members, advance the confirm offset (telling parked replicas),
        start an alter the tracker proposes, and re-arm the catch-up timer."""
        tracker = self.tracker
        if self._counted_version != tracker.version:
            self._counted_version = tracker.version
            counted = tracker.counted()
            links = frozenset(link for m in counted if (link := tracker.link_of(m)) is not None)
            self._quorum.count_only(links, need_all=len(counted) if self._all_ack and len(counted) > 1 else None)
        before = self._elog.confirm_offset
        confirm = tracker.confirm_offset(self._elog.max_physical_offset)
        if confirm > before:
            self._elog.advance_confirm_offset(confirm)
            for stream in self._streams.values():
                if (stream.parked and stream.next_offset >= self._elog.max_physical_offset
                        and self._writable(stream)):
                    stream.writer.write(self._heartbeat_frame(stream.next_offset))
        if self._loop is None or self._stopped:
            return
        proposed = tracker.proposal()
        if proposed is not None:
            tracker.alter_started(proposed)
            self._alter_task = self._loop.create_task(self._alter(proposed, tracker.sync_state_set.epoch),
                                                      name="ha-alter-sync-state-set")
        self._arm_sss_timer()

    async def _alter(self, proposed: frozenset[int], set_epoch: int) -> None:
        result: SyncStateSet | None = None
        try:
            if self._alterer is None:
                result = SyncStateSet(proposed, set_epoch + 1)
            else:
                result = await self._alterer(proposed, set_epoch)
            log.info("HA: SyncStateSet %s (epoch %d)", sorted(result.members), result.epoch)
        except RocketMQError as exc:
            log.warning("HA: altering the SyncStateSet to %s refused or failed: %s", sorted(proposed), exc)
        self.tracker.alter_done(result)
        if result is not None and self.on_sync_state_set_changed is not None:
            self.on_sync_state_set_changed(self.tracker.sync_state_set)
        if result is None and not self._stopped:
            await self._clock.sleep(1.0)  # do not hammer a controller that refuses
        self._sync()

    def _arm_sss_timer(self) -> None:
        """One timer at the tracker's next wakeup, re-armed only when that moved (this runs on every ack)."""
        when = self.tracker.next_wakeup()
        if when == self._sss_at:
            return
        if self._sss_timer is not None:
            self._sss_timer.cancel()
            self._sss_timer = None
        self._sss_at = when
        if when is not None:
            self._sss_timer = self._clock.call_later(max(when - self._clock.monotonic(), 0.0), self._on_sss_timer)

    def _on_sss_timer(self) -> None:
        self._sss_timer = self._sss_at = None
        self._sync()

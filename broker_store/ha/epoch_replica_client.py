"""A controller-mode replica's HA link: the epoch handshake, the truncation it decides, then following.

asyncio I/O only: ``ReplicaClient``'s session loop with the controller-mode hooks (opening, handshake, ack,
follow); the bytes are ``wire_epoch``, the decision ``epoch_start``, the crash-safe truncation the log's
(``store.epoch_store.EpochStore.truncate_to``). The session:

    1. send the 16-byte handshake (this broker's controller id, from ``broker_id()`` at connect time)
    2. read the primary's handshake (max offset, epoch entries); ``decide_epoch_start``: REFUSE stops following
       (``diverged``, for an operator; nothing is changed), FOLLOW truncates to the consistent point first
       (CommitLog, ConsumeQueues, epoch file, then the broker's offset hooks), SHIP_FROM_PRIMARY acks 0
    3. ack the max offset (12 bytes); the primary places the stream (FOLLOW there, or RESTART at its min offset)
    4. per read, in order: a frame at the max offset is appended; a frame past it restarts the empty log there
       (a new replica, or the primary's min offset moved past ours: RESTART); one below it is a broken primary.
       A frame of an epoch newer than the local newest records the entry (epoch file first) before its bytes;
       an older epoch, or the same epoch from another start, is a protocol error (the link restarts and
       truncates again). Then the confirm offset becomes min(primary's confirm offset, max offset) (records up
       to it are indexed, so visible), and one ack goes out per read that carried bytes.

The replica's own heartbeat ack goes out every ``ha_send_heartbeat_interval_ms``; nothing heard for
``ha_housekeeping_interval_ms`` is a dead link: reconnect after ``reconnect_delay``, handshake again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from broker_store.clock import Clock
from broker_store.ha.epoch_start import EpochStartAction, decide_epoch_start
from broker_store.ha.errors import HAProtocolError, ReplicaLogDivergedError
from broker_store.ha.peer_auth import OPEN, PeerPolicy
from broker_store.ha.replica_client import INLINE_APPLY_BYTES, ReplicaClient
from broker_store.ha.settings import HASettings
from broker_store.ha.store_view import EpochReplicaLog
from broker_store.ha.wire_epoch import (
    PrimaryHandshake,
    PrimaryStreamDecoder,
    ReplicaHandshake,
    TransferFrame,
    encode_replica_ack,
    encode_replica_handshake,
)
from broker_store.store.epoch_cache import EpochEntry

log = logging.getLogger(__name__)


class EpochReplicaClient(ReplicaClient):
    """Follows a controller-mode primary into ``log`` (see the module docstring). Contract as ``ReplicaClient``'s:
    ``log`` is written only by this client, one step at a time."""

    _controller_mode = True

    def __init__(self, log_: EpochReplicaLog, settings: HASettings, *, clock: Clock, primary_address: str,
                 broker_id: Callable[[], int], reconnect_delay: float = 1.0, peers: PeerPolicy = OPEN) -> None:
        super().__init__(log_, settings, clock=clock, primary_address=primary_address,
                         reconnect_delay=reconnect_delay, peers=peers)
        self._elog = log_
        self._broker_id = broker_id
        self._fresh = False
        """SHIP_FROM_PRIMARY: the (empty) log restarts wherever the first frame starts."""
        self.last_decision: str = ""
        """The last handshake's decision, for ``ha-status`` and logs."""
        self._frame_decoder = PrimaryStreamDecoder()
        """The current session's (``_begin``)."""
        self._pending: list[TransferFrame] = []
        """Frames that arrived with the handshake, followed before the first read."""

    # -- the controller-mode hooks of ``ReplicaClient._session`` ---------------------------------------------

    def _begin(self) -> bytes:
        """A new session's decoder, and the first bytes to send: the handshake with this broker's id."""
        self._frame_decoder = PrimaryStreamDecoder()
        self._pending = []
        return encode_replica_handshake(ReplicaHandshake(self._broker_id()))

    async def _start(self, read: Callable[[str], Awaitable[bytes]], writer: asyncio.StreamWriter) -> None:
        """Read the primary's handshake, decide and truncate (worker thread), ack; the frames that came with
        the handshake are followed first."""
        pending: list[PrimaryHandshake | TransferFrame] = []
        while not pending:
            pending = self._frame_decoder.feed(await read(" during the handshake"))
        handshake = pending.pop(0)
        if not isinstance(handshake, PrimaryHandshake):
            raise HAProtocolError("the primary sent a transfer frame before its handshake")
        await asyncio.get_running_loop().run_in_executor(self._appender, self._start_from, handshake)
        writer.write(self._ack())
        self._pending = [f for f in pending if isinstance(f, TransferFrame)]

    def _ack(self) -> bytes:
        """The opening ack and the heartbeat: 0 while a SHIP_FROM_PRIMARY log waits for its first frame."""
        return encode_replica_ack(0 if self._fresh else self._elog.max_physical_offset)

    async def _follow(self, data: bytes, writer: asyncio.StreamWriter) -> None:
        """Apply the frames ``data`` completed (and any the handshake left), then ack once if bytes were written."""
        units = self._frame_decoder.feed(data)
        if any(isinstance(u, PrimaryHandshake) for u in units):
            raise HAProtocolError("the primary sent a second handshake")
        frames = self._pending + [u for u in units if isinstance(u, TransferFrame)]
        self._pending = []
        if not frames:
            return
        if sum(len(f.data) for f in frames) <= INLINE_APPLY_BYTES:
            wrote = self._apply_frames(frames)
        else:
            wrote = await asyncio.get_running_loop().run_in_executor(self._appender, self._apply_frames, frames)
        if wrote:  # the bytes are in: the true max offset, also while ``_fresh`` (the heartbeat's 0 is a placeholder)
            writer.write(encode_replica_ack(self._elog.max_physical_offset))

    def _start_from(self, handshake: PrimaryHandshake) -> None:
        """Worker thread: decide (``epoch_start``) and truncate before the first ack."""
        log_ = self._elog
        local_min, local_max = log_.min_physical_offset, log_.max_physical_offset
        decision = decide_epoch_start(local=log_.epoch_cache, local_min=local_min, local_max=local_max,
                                      primary=handshake.epochs, primary_max=handshake.max_offset)
        self.last_decision = decision.reason
        decision.raise_if_refused(replica_min=local_min, replica_max=local_max, primary_max=handshake.max_offset)
        self._fresh = decision.action is EpochStartAction.SHIP_FROM_PRIMARY
        if decision.truncates:
            log.warning("HA replica: %s", decision.reason)
            log_.truncate_to(decision.offset)
        else:
            log.info("HA replica: %s", decision.reason)

    def _apply_frames(self, frames: list[TransferFrame]) -> bool:
        """Append the frames' bytes (recording new epochs first), then take the primary's confirm offset.
        Returns whether any bytes were written (an ack is due)."""
        log_ = self._elog
        wrote = False
        confirm = -1
        for frame in frames:
            if frame.offset != log_.max_physical_offset:
                self._reposition(frame.offset)
            self._fresh = False  # the stream is placed: from now on every ack (heartbeats too) is what it holds
            if frame.data:
                self._check_epoch(frame)
                log_.write_commit_log(frame.offset, frame.data)
                wrote = True
            confirm = frame.confirm_offset
        if confirm >= 0:
            log_.advance_confirm_offset(min(confirm, log_.max_physical_offset))
        return wrote

    def _reposition(self, offset: int) -> None:
        log_ = self._elog
        local_min, local_max = log_.min_physical_offset, log_.max_physical_offset
        if offset > local_max or (self._fresh and local_min == local_max):
            log.warning("HA replica: the primary ships from %d, this log is [%d, %d): restarting it empty at %d",
                        offset, local_min, local_max, offset)
            log_.restart_at(offset)
            self._fresh = False
            return
        raise ReplicaLogDivergedError(f"the primary shipped from {offset}, below this replica's max offset "
                                      f"{local_max} after the handshake placed it there", replica_min=local_min,
                                      replica_max=local_max, primary_min=-1, primary_max=offset)

    def _check_epoch(self, frame: TransferFrame) -> None:
        log_ = self._elog
        last = log_.epoch_cache.last_entry
        entry = EpochEntry(frame.epoch, frame.epoch_start_offset)
        if last is None or frame.epoch > last.epoch:
            log.info("HA replica: epoch %d starts at %d", frame.epoch, frame.epoch_start_offset)
            log_.append_epoch_entry(entry)
        elif entry != last:
            raise HAProtocolError(f"the primary shipped bytes of epoch entry {entry} at {frame.offset}; this replica's "
                                  f"newest is {last}")

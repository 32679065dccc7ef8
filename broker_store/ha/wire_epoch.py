"""The controller-mode HA link's wire format (RocketMQ 5's AutoSwitchHAClient/Connection), and its decoders.

Bytes only: no sockets, no store. Selected by the HA mode on both ends before a connection is made
(``enable_controller_mode``); nothing guesses the format from the bytes, and the classic format
(``wire``) is untouched. ``epoch_primary_service`` and ``epoch_replica_client`` frame with these and
feed whatever ``read()`` returned into the incremental decoders, which cope with any split of the
stream and raise ``HAProtocolError`` on malformed input. All integers big-endian, as RocketMQ's.

Every frame starts with the sender's link state (``LinkState``, RocketMQ's HAConnectionState ordinal).
The conversation::

    replica -> primary: one handshake, then acks

        handshake, 16 bytes (state HANDSHAKE)
        0          4                        6                      8                      16
        +----------+------------------------+----------------------+----------------------+
        | state i32| isSyncFromLastFile i16 | isAsyncLearner i16   | brokerId i64         |
        +----------+------------------------+----------------------+----------------------+

        ack, 12 bytes (state TRANSFER), after the handshake's truncation, per applied read, and as heartbeat
        0          4                      12
        +----------+----------------------+
        | state i32| maxOffset i64        |   the replica's CommitLog max offset: it holds every byte below
        +----------+----------------------+

    primary -> replica: one handshake, then transfer frames

        handshake, 20-byte header (state HANDSHAKE) + bodySize bytes of 12-byte epoch entries, oldest first
        0          4             8                      16           20
        +----------+-------------+----------------------+------------+
        | state i32| bodySize i32| maxOffset i64        | epoch i32  |   maxOffset: the primary's max offset;
        +----------+-------------+----------------------+------------+   epoch: its newest epoch
        entry:  | epoch i32 | startOffset i64 |

        transfer, 36-byte header (state TRANSFER) + bodySize bytes of CommitLog; bodySize 0 = heartbeat
        0          4             8                      16           20                    28                 36
        +----------+-------------+----------------------+------------+---------------------+------------------+
        | state i32| bodySize i32| offset i64           | epoch i32  | epochStartOffset i64| confirmOffset i64|
        +----------+-------------+----------------------+------------+---------------------+------------------+
        offset: CommitLog offset of the body's first byte (for a heartbeat, where the next body starts);
        epoch / epochStartOffset: the epoch entry the body was written under (a body never spans two
        epochs, nor a segment end); confirmOffset: the primary's confirm offset when sent.

Version: RocketMQ's layout has no version field; this module is version 1 of the controller-mode link
and would be replaced by a new module, selected the same way, rather than changed in place.
"""

from __future__ import annotations

import enum
import struct
from typing import Any, ClassVar, Generic, NamedTuple, TypeVar

from broker_store.ha.errors import HAProtocolError
from broker_store.ha.wire import MAX_BATCH_BYTES, StreamDecoder
from broker_store.protocol.errors import StoreError
from broker_store.store.epoch_cache import EpochCache, EpochEntry


class LinkState(enum.IntEnum):
    """RocketMQ's HAConnectionState, whose ordinal leads every frame."""

    READY = 0
    HANDSHAKE = 1
    TRANSFER = 2
    SUSPEND = 3
    SHUTDOWN = 4


REPLICA_HANDSHAKE = struct.Struct(">ihhq")
"""Replica -> primary: state i32, isSyncFromLastFile i16, isAsyncLearner i16, brokerId i64."""
REPLICA_HANDSHAKE_SIZE = REPLICA_HANDSHAKE.size  # 16

REPLICA_ACK = struct.Struct(">iq")
"""Replica -> primary: state i32, maxOffset i64."""
REPLICA_ACK_SIZE = REPLICA_ACK.size  # 12

PRIMARY_HANDSHAKE = struct.Struct(">iiqi")
"""Primary -> replica: state i32, bodySize i32, maxOffset i64, epoch i32; then the epoch entries."""
PRIMARY_HANDSHAKE_SIZE = PRIMARY_HANDSHAKE.size  # 20

EPOCH_ENTRY = struct.Struct(">iq")
"""One epoch entry in the primary's handshake body: epoch i32, startOffset i64."""
EPOCH_ENTRY_SIZE = EPOCH_ENTRY.size  # 12

TRANSFER_HEADER = struct.Struct(">iiqiqq")
"""Primary -> replica: state, bodySize, offset, epoch, epochStartOffset, confirmOffset; then the body."""
TRANSFER_HEADER_SIZE = TRANSFER_HEADER.size  # 36

MAX_EPOCH_ENTRIES = 1 << 16
"""Most entries a handshake may carry (a decoder refuses a larger bodySize before buffering it)."""


class ReplicaHandshake(NamedTuple):
    """What a replica says first: who it is and how it wants to be fed."""

    broker_id: int
    """The replica's controller-assigned broker id (RocketMQ 5.1.1+: >= 1)."""
    sync_from_last_file: bool = False
    """An empty replica asks to start at the primary's last segment instead of its min offset."""
    async_learner: bool = False
    """The replica never joins the SyncStateSet (RocketMQ's asyncLearner)."""


class PrimaryHandshake(NamedTuple):
    """The primary's answer: its max offset and epoch entries (what the replica's truncation needs)."""

    max_offset: int
    epochs: EpochCache
    """Oldest first; the newest epoch is the header's epoch."""


class TransferFrame(NamedTuple):
    """One primary -> replica unit after the handshake: CommitLog bytes under one epoch, or a heartbeat."""

    offset: int
    """CommitLog offset of ``data[0]``; for a heartbeat, where the next body starts."""
    epoch: int
    """The epoch ``data`` was written under (for a heartbeat, the epoch of ``offset``)."""
    epoch_start_offset: int
    """That epoch's first offset, so a replica can record the entry when the epoch is new to it."""
    confirm_offset: int
    """The primary's confirm offset: a replica may show consumers its records up to min(this, its max)."""
    data: bytes
    """Raw CommitLog bytes, as in ``wire.TransferBatch`` (empty for a heartbeat)."""


# -- encoders -------------------------------------------------------------------------------------------


def encode_replica_handshake(handshake: ReplicaHandshake) -> bytes:
    if handshake.broker_id < 0:
        raise HAProtocolError(f"replica broker id must be >= 0, got {handshake.broker_id}")
    return REPLICA_HANDSHAKE.pack(LinkState.HANDSHAKE, int(handshake.sync_from_last_file),
                                  int(handshake.async_learner), handshake.broker_id)


def encode_replica_ack(max_offset: int) -> bytes:
    if max_offset < 0:
        raise HAProtocolError(f"replica ack offset must be >= 0, got {max_offset}")
    return REPLICA_ACK.pack(LinkState.TRANSFER, max_offset)


def encode_primary_handshake(max_offset: int, epochs: EpochCache) -> bytes:
    """Header and body in one buffer. The header's epoch is the newest entry's (0 for an empty cache)."""
    if max_offset < 0:
        raise HAProtocolError(f"primary max offset must be >= 0, got {max_offset}")
    body = b"".join(EPOCH_ENTRY.pack(e.epoch, e.start_offset) for e in epochs.entries)
    last_epoch = epochs.last_epoch
    return PRIMARY_HANDSHAKE.pack(LinkState.HANDSHAKE, len(body), max_offset,
                                  0 if last_epoch is None else last_epoch) + body


def encode_transfer_header(offset: int, size: int, epoch_entry: EpochEntry, confirm_offset: int) -> bytes:
    """The 36-byte header of a body of ``size`` bytes at ``offset`` (send the body right after it)."""
    if offset < 0 or not 0 <= size <= MAX_BATCH_BYTES or confirm_offset < 0:
        raise HAProtocolError(f"transfer header out of range: offset {offset}, size {size}, confirm offset "
                              f"{confirm_offset} (allowed: offsets >= 0, 0 <= size <= {MAX_BATCH_BYTES})")
    return TRANSFER_HEADER.pack(LinkState.TRANSFER, size, offset, epoch_entry.epoch, epoch_entry.start_offset,
                                confirm_offset)


def encode_transfer(offset: int, data: bytes, epoch_entry: EpochEntry, confirm_offset: int) -> bytes:
    """Header and body in one buffer (empty ``data``: a heartbeat)."""
    return encode_transfer_header(offset, len(data), epoch_entry, confirm_offset) + data


# -- decoders -------------------------------------------------------------------------------------------

H = TypeVar("H")
F = TypeVar("F")


def _check_state(state: int, expected: LinkState, what: str) -> None:
    if state != expected:
        name = LinkState(state).name if state in LinkState._value2member_map_ else str(state)
        raise HAProtocolError(f"{what} in link state {name}, expected {expected.name}")


class _HandshakeThenFrames(StreamDecoder, Generic[H, F]):
    """A stream that opens with one handshake, then carries frames of one header struct (``_frames``):
    the shape of both directions of the link. Subclasses read the handshake and check and build frames."""

    _frame_header: ClassVar[struct.Struct]

    def __init__(self) -> None:
        super().__init__()
        self._handshake_seen = False

    def feed(self, data: bytes | bytearray | memoryview) -> list[H | F]:
        self._buf += data
        out: list[H | F] = []
        pos = 0
        if not self._handshake_seen:
            opened = self._handshake()
            if opened is None:
                return out
            handshake, pos = opened
            out.append(handshake)
            self._handshake_seen = True
        frames, pos = self._frames(pos, self._frame_header, self._body_size)
        self._consume(pos)
        out.extend(self._frame(fields, body) for fields, body in frames)
        return out

    def _handshake(self) -> tuple[H, int] | None:
        """The handshake at the buffer's head and its length, or None while it is incomplete."""
        raise NotImplementedError

    def _body_size(self, fields: tuple[Any, ...]) -> int:
        """Check a frame header (``HAProtocolError``) and return its body's length."""
        raise NotImplementedError

    def _frame(self, fields: tuple[Any, ...], body: bytes) -> F:
        raise NotImplementedError


class ReplicaStreamDecoder(_HandshakeThenFrames[ReplicaHandshake, int]):
    """Primary side: the replica's stream as one ``ReplicaHandshake`` followed by acked offsets (ints)."""

    _frame_header = REPLICA_ACK

    def _handshake(self) -> tuple[ReplicaHandshake, int] | None:
        if len(self._buf) < REPLICA_HANDSHAKE_SIZE:
            return None
        state, last_file, learner, broker_id = REPLICA_HANDSHAKE.unpack_from(self._buf, 0)
        _check_state(state, LinkState.HANDSHAKE, "replica handshake")
        if broker_id < 0 or last_file not in (0, 1) or learner not in (0, 1):
            raise HAProtocolError(f"malformed replica handshake: broker id {broker_id}, flags "
                                  f"{last_file}/{learner} (allowed: id >= 0, flags 0 or 1)")
        return ReplicaHandshake(broker_id, bool(last_file), bool(learner)), REPLICA_HANDSHAKE_SIZE

    def _body_size(self, fields: tuple[Any, ...]) -> int:
        state, offset = fields
        _check_state(state, LinkState.TRANSFER, "replica ack")
        if offset < 0:
            raise HAProtocolError(f"replica acked a negative offset {offset}")
        return 0

    def _frame(self, fields: tuple[Any, ...], body: bytes) -> int:
        return int(fields[1])


class PrimaryStreamDecoder(_HandshakeThenFrames[PrimaryHandshake, TransferFrame]):
    """Replica side: the primary's stream as one ``PrimaryHandshake`` followed by ``TransferFrame`` units.

    ``max_batch_bytes`` bounds a transfer's bodySize: a larger or negative one, a negative offset, a body
    size that is not whole epoch entries, or entries out of order raise ``HAProtocolError`` as soon as the
    header (or the handshake body) is complete.
    """

    _frame_header = TRANSFER_HEADER

    def __init__(self, max_batch_bytes: int = MAX_BATCH_BYTES) -> None:
        super().__init__()
        self._max = max_batch_bytes

    def _handshake(self) -> tuple[PrimaryHandshake, int] | None:
        buf = self._buf
        if len(buf) < PRIMARY_HANDSHAKE_SIZE:
            return None
        state, body_size, max_offset, epoch = PRIMARY_HANDSHAKE.unpack_from(buf, 0)
        _check_state(state, LinkState.HANDSHAKE, "primary handshake")
        if (max_offset < 0 or body_size < 0 or body_size % EPOCH_ENTRY_SIZE
                or body_size > MAX_EPOCH_ENTRIES * EPOCH_ENTRY_SIZE):
            raise HAProtocolError(f"malformed primary handshake: max offset {max_offset}, body size {body_size} "
                                  f"(allowed: max offset >= 0, whole {EPOCH_ENTRY_SIZE}-byte entries, at most "
                                  f"{MAX_EPOCH_ENTRIES})")
        end = PRIMARY_HANDSHAKE_SIZE + body_size
        if len(buf) < end:
            return None
        body = memoryview(buf)[PRIMARY_HANDSHAKE_SIZE:end]
        entries = [EpochEntry(e, s) for e, s in EPOCH_ENTRY.iter_unpack(body)]
        body.release()  # a live view would stop ``_consume`` from resizing the buffer
        try:
            epochs = EpochCache(entries)
        except StoreError as exc:
            raise HAProtocolError(f"primary handshake carries invalid epoch entries: {exc}") from exc
        if (epochs.last_epoch or 0) != epoch:
            raise HAProtocolError(f"primary handshake names epoch {epoch}, its newest entry is {epochs.last_entry}")
        if epochs.last_entry is not None and epochs.last_entry.start_offset > max_offset:
            raise HAProtocolError(f"primary handshake: newest epoch entry {epochs.last_entry} starts past the "
                                  f"max offset {max_offset}")
        return PrimaryHandshake(max_offset, epochs), end

    def _body_size(self, fields: tuple[Any, ...]) -> int:
        state, size, offset, epoch, epoch_start, confirm = fields
        _check_state(state, LinkState.TRANSFER, "transfer frame")
        if offset < 0 or not 0 <= size <= self._max or epoch < 0 or not 0 <= epoch_start <= offset \
                or confirm < 0:
            raise HAProtocolError(f"malformed transfer header: offset {offset}, size {size}, epoch {epoch} "
                                  f"from {epoch_start}, confirm offset {confirm} (allowed: 0 <= epoch start "
                                  f"<= offset, 0 <= size <= {self._max}, epoch and confirm offset >= 0)")
        return int(size)

    def _frame(self, fields: tuple[Any, ...], body: bytes) -> TransferFrame:
        _state, _size, offset, epoch, epoch_start, confirm = fields
        return TransferFrame(offset, epoch, epoch_start, confirm, body)

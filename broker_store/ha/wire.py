"""The classic (non-controller) CommitLog shipping wire format of an HA link, and its decoders.

Bytes only: no sockets, no store. ``primary_service`` and ``replica_client`` frame with these and
feed whatever ``read()`` returned into the incremental decoders, which cope with any split of the
stream and raise ``HAProtocolError`` on malformed input.

The link is a plain TCP stream on the HA port (listen port + 1) carrying two unframed directions::

    replica -> primary: an offset report, 8 bytes, repeated (RocketMQ's slave ack)

        0                   8
        +-------------------+
        | max_offset  i64   |   replica's CommitLog max offset = next byte it expects
        +-------------------+

    primary -> replica: a transfer batch, 12-byte header then ``size`` bytes of CommitLog

        0                   8            12
        +-------------------+------------+------------------------+
        | offset      i64   | size  i32  | data (size bytes)      |
        +-------------------+------------+------------------------+
        offset: CommitLog physical offset of data[0]; size 0 = heartbeat, and then offset is where
        the primary's next batch for this replica starts. data never crosses a segment end.

All integers big-endian (network order), as RocketMQ's DefaultHAConnection/DefaultHAClient.

Versioning: the classic format has no version or flags field and must stay byte-compatible, so it
is never extended in place. RocketMQ 5's controller-mode link (states, epoch handshake, 36-byte
transfer header with confirm offset; docs/architecture.md, "Replication and quorum writes") is a different conversation
from the first byte: it goes in its own codec module (e.g. ``wire_epoch.py``) selected by the HA mode on both ends
before the connection is made, reusing ``StreamDecoder`` for framing. Nothing here guesses the format from the bytes.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any, NamedTuple

from broker_store.ha.errors import HAProtocolError

REPORT = struct.Struct(">q")
"""Replica -> primary: max_offset i64."""
REPORT_SIZE = REPORT.size  # 8

BATCH_HEADER = struct.Struct(">qi")
"""Primary -> replica: offset i64, size i32, then ``size`` data bytes."""
BATCH_HEADER_SIZE = BATCH_HEADER.size  # 12

MAX_BATCH_BYTES = 64 * 1024 * 1024
"""Largest ``size`` a decoder accepts by default. A batch is at most ha_transfer_batch_size (32 KiB
by default; ``settings`` caps it here) and never crosses a segment; anything larger is garbage."""


class TransferBatch(NamedTuple):
    """One primary -> replica unit: CommitLog bytes at an offset, or a heartbeat."""

    offset: int
    """Physical CommitLog offset of ``data[0]``; for a heartbeat, where the next batch will start."""
    data: bytes
    """Raw CommitLog bytes (possibly ending inside a record); empty for a heartbeat."""

    @property
    def is_heartbeat(self) -> bool:
        return not self.data

    @property
    def end_offset(self) -> int:
        """Offset just past ``data``: the replica's max offset once it has appended the batch."""
        return self.offset + len(self.data)


def encode_report(max_offset: int) -> bytes:
    """The 8 bytes a replica sends to report (and acknowledge) its CommitLog max offset."""
    if max_offset < 0:
        raise HAProtocolError(f"replica offset report must be >= 0, got {max_offset}")
    return REPORT.pack(max_offset)


def encode_batch_header(offset: int, size: int) -> bytes:
    """The 12-byte header of a batch of ``size`` bytes at ``offset`` (send the data right after it)."""
    if offset < 0 or not 0 <= size <= MAX_BATCH_BYTES:
        raise HAProtocolError(f"transfer batch header out of range: offset {offset}, size {size} "
                              f"(allowed: offset >= 0, 0 <= size <= {MAX_BATCH_BYTES})")
    return BATCH_HEADER.pack(offset, size)


def encode_batch(offset: int, data: bytes) -> bytes:
    """Header and data in one buffer (small batches, tests); large ones send header and data apart."""
    return encode_batch_header(offset, len(data)) + data


def encode_heartbeat(next_offset: int) -> bytes:
    """An empty batch: keeps an idle link alive and tells the replica where the next batch starts."""
    return encode_batch_header(next_offset, 0)


class StreamDecoder:
    """Buffering for an unframed byte stream: ``feed`` whatever arrived, complete units come out.

    Subclasses say how long the unit at the buffer's head is and how to decode it, most through ``_frames``
    (a fixed header, then a body whose size the header gives). Not thread-safe: one decoder per connection
    direction, fed by that connection's reader.
    """

    def __init__(self) -> None:
        self._buf = bytearray()

    @property
    def buffered(self) -> int:
        """Bytes received but not yet part of a complete unit (0 at a unit boundary)."""
        return len(self._buf)

    def _frames(self, pos: int, header: struct.Struct,
                body_size: Callable[[tuple[Any, ...]], int]) -> tuple[list[tuple[tuple[Any, ...], bytes]], int]:
        """The complete frames buffered from ``pos``, as (header fields, body), and where the first incomplete
        one starts. ``body_size(fields)`` checks a header as soon as it is complete (raising
        ``HAProtocolError`` before its body is buffered) and returns the body's length. The caller drops the
        consumed bytes (``_consume``)."""
        buf = self._buf
        size = header.size
        frames: list[tuple[tuple[Any, ...], bytes]] = []
        while len(buf) - pos >= size:
            fields = header.unpack_from(buf, pos)
            end = pos + size + body_size(fields)
            if end > len(buf):
                break
            frames.append((fields, bytes(buf[pos + size:end])))
            pos = end
        return frames, pos

    def _consume(self, pos: int) -> None:
        """Drop the first ``pos`` buffered bytes (decoded units)."""
        if pos:
            del self._buf[:pos]


class ReportDecoder(StreamDecoder):
    """Primary side: turns the replica's byte stream into its reported max offsets, in order."""

    def feed(self, data: bytes | bytearray | memoryview) -> list[int]:
        """Offsets completed by ``data`` (possibly none); raises ``HAProtocolError`` on a negative one."""
        buf = self._buf
        buf += data
        whole = len(buf) - len(buf) % REPORT_SIZE
        if not whole:
            return []
        offsets = [value for (value,) in REPORT.iter_unpack(memoryview(buf)[:whole])]
        del buf[:whole]
        for value in offsets:
            if value < 0:
                raise HAProtocolError(f"replica reported a negative offset {value}")
        return offsets


class BatchDecoder(StreamDecoder):
    """Replica side: turns the primary's byte stream into ``TransferBatch`` units, in order.

    ``max_batch_bytes`` bounds the ``size`` field: a larger or negative size, or a negative offset,
    raises ``HAProtocolError`` as soon as its header is complete (before buffering the data).
    """

    def __init__(self, max_batch_bytes: int = MAX_BATCH_BYTES) -> None:
        super().__init__()
        self._max = max_batch_bytes

    def feed(self, data: bytes | bytearray | memoryview) -> list[TransferBatch]:
        self._buf += data
        frames, pos = self._frames(0, BATCH_HEADER, self._body_size)
        self._consume(pos)
        return [TransferBatch(offset, body) for (offset, _size), body in frames]

    def _body_size(self, fields: tuple[Any, ...]) -> int:
        offset, size = fields
        if offset < 0 or not 0 <= size <= self._max:
            raise HAProtocolError(f"malformed transfer batch header: offset {offset}, size {size} "
                                  f"(allowed: offset >= 0, 0 <= size <= {self._max})")
        return int(size)

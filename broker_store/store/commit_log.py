"""CommitLog: fixed-size segment files holding every stored record back to back.

Owned by ``MessageStore``, which holds the store lock around every call (this class is not
thread-safe). Records use the V1 layout of ``broker_store.protocol.message`` unchanged.

Directory ``<store_dir>/commitlog/``, one file per segment, named by its 20-digit start offset::

    00000000000000000000   00000000000000065536   00000000000000131072 (active)
    +------+------+-----+  +------+-----+------+  +------+------+..........+
    | rec  | rec  |blank|  | rec  | rec |blank |  | rec  | rec  |  zeros   |
    +------+------+-----+  +------+-----+------+  +------+------+..........+

Every segment file is ``segment_size`` bytes from the moment it is created (extended with ftruncate, so
the unwritten tail is a hole that reads as zeros and takes no disk): the valid records end at the first
position that does not hold a valid record (recovery's scan), never at the file's end. Pre-sizing lets
``MessageStore``'s warmer populate the page cache ahead of the writer, as RocketMQ pre-allocates and warms
its mapped files. ``truncate`` cuts the bytes and zero-extends again.

A record (or a batch) never crosses a segment end. When the next write does not fit, the writer puts
a blank record at the tail if at least 8 bytes remain and moves to the next segment::

    blank record:  TOTALSIZE 4 (= bytes left in the segment) | MAGICCODE 4 (BLANK_MAGIC) | zeros

Fewer than 8 bytes left: no blank, the zero padding alone ends the segment.
"""

from __future__ import annotations

import errno
import os
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

from broker_store.protocol.errors import StoreError
from broker_store.protocol.message import (
    BLANK_MAGIC,
    MAGIC_V1,
    MIN_RECORD_SIZE,
    STORED_HEADER,
    STORED_HEADER_SIZE,
    stored_header_view,
    tags_hash_code,
)
from broker_store.protocol.properties import tags_code_of_properties
from broker_store.store.delay_levels import DEFAULT_DELAY_LEVELS, SCHEDULE_TOPIC, DelayLevels, schedule_tags_code
from broker_store.store.files import FdPool, list_segments, segment_name

BLANK_RECORD = struct.Struct(">ii")
MIN_BLANK_SIZE = BLANK_RECORD.size  # 8: below this a segment tail is padding only
_SCAN_CHUNK = 1 << 20
_BOUNDARY_VIEW = stored_header_view("MAGICCODE", "PHYSICALOFFSET")


@dataclass(frozen=True, slots=True)
class DispatchRecord:
    """What a ConsumeQueue needs of one CommitLog record."""

    topic: str
    queue_id: int
    queue_offset: int
    physical_offset: int
    size: int
    tags_code: int



def describe_cut(start: int, end: int, what: str) -> str:
    """How every log line that truncates the CommitLog names the bytes it drops: ``cutting bytes [start, end)
    (n bytes <what>)``, the range half-open and in the log's order, so no reader takes it for a move from one
    offset to another."""
    return f"cutting bytes [{start}, {end}) ({end - start} bytes {what})"

class CommitLog:
    """Segment files plus the offsets that delimit them. ``delay_levels`` gives the tags code ``scan`` reports for
    SCHEDULE_TOPIC records (their delivery time), the one a put of them got."""

    def __init__(self, directory: Path, segment_size: int, pool: FdPool,
                 delay_levels: DelayLevels = DEFAULT_DELAY_LEVELS) -> None:
        self.directory = directory
        self.segment_size = segment_size
        self.segments: list[int] = []
        """Start offsets of existing segment files, ascending."""
        self.max_offset = 0
        """Next byte to be written."""
        self._pool = pool
        self._active_start = -1
        self._active_fd = -1
        self._topic_cache: dict[bytes, str] = {}
        self._delay_levels = delay_levels

    # -- files ---------------------------------------------------------------------------------------

    @property
    def min_offset(self) -> int:
        return self.segments[0] if self.segments else self.max_offset

    def path(self, start: int) -> str:
        return str(self.directory / segment_name(start))

    def load_segments(self) -> None:
        os.makedirs(self.directory, exist_ok=True)
        self.segments = list_segments(self.directory)
        for start in self.segments:
            if start % self.segment_size:
                raise StoreError(f"{self.path(start)}: start offset is not a multiple of the segment size "
                                 f"{self.segment_size}; was commit_log_segment_size changed?")

    def _fd(self, start: int, *, create: bool = False) -> int:
        if start == self._active_start:
            return self._active_fd
        return self._pool.get(self.path(start), create=create)

    def _activate(self, start: int) -> int:
        """The descriptor of the segment writes go to, kept open outside the LRU pool."""
        if start != self._active_start:
            self.close_active()
            path = self.path(start)
            self._pool.close(path)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                if os.fstat(fd).st_size < self.segment_size:
                    os.ftruncate(fd, self.segment_size)  # full size from the start (a hole; see above)
            except OSError:
                os.close(fd)
                raise
            self._active_fd = fd
            self._active_start = start
            if not self.segments or self.segments[-1] < start:
                self.segments.append(start)
        return self._active_fd

    def close_active(self) -> None:
        if self._active_fd >= 0:
            os.close(self._active_fd)
        self._active_fd, self._active_start = -1, -1

    def dup_or_path(self, start: int) -> int | str:
        """For the flush thread: a private dup of an open descriptor, else the path to open itself."""
        if start == self._active_start:
            return os.dup(self._active_fd)
        fd = self._pool.dup(self.path(start))
        return self.path(start) if fd is None else fd

    # -- writing -------------------------------------------------------------------------------------

    def room_at_max(self) -> int:
        return self.segment_size - self.max_offset % self.segment_size

    def roll(self) -> None:
        """End the current segment (blank record or padding) and move max offset to the next one."""
        start = self.max_offset - self.max_offset % self.segment_size
        room = self.segment_size - (self.max_offset - start)
        fd = self._activate(start)
        if room >= MIN_BLANK_SIZE:
            os.pwrite(fd, BLANK_RECORD.pack(room, BLANK_MAGIC), self.max_offset - start)
        os.ftruncate(fd, self.segment_size)
        self.max_offset = start + self.segment_size

    def write(self, offset: int, data: bytes | bytearray | memoryview) -> None:
        """pwrite ``data`` at ``offset`` (must not cross a segment end); advances max offset past it."""
        start = offset - offset % self.segment_size
        fd = self._activate(start) if start >= self._active_start else self._fd(start, create=True)
        written = os.pwrite(fd, data, offset - start)
        if written != len(data):  # a short write (the disk filling up): the rest raises the real error
            view = memoryview(data)
            while written < len(data):
                n = os.pwrite(fd, view[written:], offset - start + written)
                if n <= 0:
                    raise OSError(errno.EIO, f"short write to {self.path(start)}: {written} of {len(data)} bytes")
                written += n
        if offset + len(data) > self.max_offset:
            self.max_offset = offset + len(data)

    # -- reading -------------------------------------------------------------------------------------

    def read(self, offset: int, size: int) -> bytes:
        """Up to ``size`` bytes at ``offset`` within one segment; short or b"" past the file's end."""
        start = offset - offset % self.segment_size
        size = min(size, start + self.segment_size - offset)
        if size <= 0:
            return b""
        try:
            fd = self._fd(start)
        except FileNotFoundError:
            return b""
        return os.pread(fd, size, offset - start)

    def scan(self, pos: int, limit: int) -> tuple[list[DispatchRecord], int, bool]:
        """Validate records from ``pos`` (a record boundary) up to ``limit``, reading about 1 MiB.

        Returns (records, next position, stopped). ``stopped`` means the record at the next position is
        absent, incomplete or invalid: the valid prefix ends there. A record is valid when its lengths
        are in bounds and add up, its magic is V1, its PHYSICALOFFSET is its position and its BODYCRC
        matches; a blank record is valid when its TOTALSIZE is exactly the bytes left in the segment.
        """
        seg_end = pos - pos % self.segment_size + self.segment_size
        out: list[DispatchRecord] = []
        buf = self.read(pos, min(_SCAN_CHUNK, seg_end - pos, limit - pos)) if pos < limit else b""
        n = len(buf)
        view = memoryview(buf)
        p = 0
        unpack_header = STORED_HEADER.unpack_from
        topic_cache = self._topic_cache
        while True:
            cur = pos + p
            room = seg_end - cur
            if room < MIN_BLANK_SIZE:  # padding-only tail
                return (out, seg_end, False) if seg_end <= limit else (out, cur, True)
            if n - p < MIN_BLANK_SIZE:
                return out, cur, p == 0  # p > 0: the caller reads on from cur
            total, magic = BLANK_RECORD.unpack_from(buf, p)
            if magic == BLANK_MAGIC:
                if total == room and seg_end <= limit:
                    return out, seg_end, False
                return out, cur, True
            if magic != MAGIC_V1 or total < MIN_RECORD_SIZE or total > room:
                return out, cur, True
            if p + total > n:
                if p > 0:
                    return out, cur, False
                if cur + total > limit:  # record larger than one chunk, not all of it there
                    return out, cur, True
                buf = self.read(cur, total)
                n = len(buf)
                view = memoryview(buf)
                if n < total:
                    return out, cur, True
            (_, _, crc, queue_id, _, queue_offset, phys, _, _, _, _, store_ts, _, _, _, _,
             body_len) = unpack_header(buf, p)
            end = p + total
            b = p + STORED_HEADER_SIZE
            if phys != cur or body_len < 0 or b + body_len + 3 > end or queue_id < 0 or queue_offset < 0:
                return out, cur, True
            t = b + body_len
            pl = t + 1 + buf[t]
            if pl + 2 > end or pl + 2 + ((buf[pl] << 8) | buf[pl + 1]) != end:
                return out, cur, True
            if zlib.crc32(view[b:t]) & 0x7FFFFFFF != crc:
                return out, cur, True
            topic_raw = bytes(view[t + 1:pl])
            topic = topic_cache.get(topic_raw)
            if topic is None:
                try:
                    topic = topic_raw.decode()
                except UnicodeDecodeError:
                    return out, cur, True
                if len(topic_cache) < 4096:
                    topic_cache[topic_raw] = topic
            if topic == SCHEDULE_TOPIC:
                tags_code = schedule_tags_code(view[pl + 2:end], store_ts, self._delay_levels)
            else:
                tags_code = tags_code_of_properties(view[pl + 2:end], tags_hash_code) if pl + 2 < end else 0
            out.append(DispatchRecord(topic, queue_id, queue_offset, cur, total, tags_code))
            p = end

    # -- truncation and retention --------------------------------------------------------------------

    def truncate(self, offset: int) -> None:
        """Drop every byte at or past ``offset``: later segments deleted, the holding one cut short."""
        keep = offset - offset % self.segment_size
        for start in list(self.segments):
            if start > keep:
                self.delete_segment(start)
        if keep in self.segments:
            fd = self._activate(keep)
            os.ftruncate(fd, offset - keep)  # the bytes past offset are gone ...
            os.ftruncate(fd, self.segment_size)  # ... and read as zeros; the segment keeps its size
        self.max_offset = offset

    def is_record_boundary(self, offset: int) -> bool:
        """Whether a record may start at ``offset``: the min offset or below, a segment start, a blank record or a
        record whose PHYSICALOFFSET says it starts there."""
        if offset <= self.min_offset or not offset % self.segment_size:
            return True
        head = self.read(offset, STORED_HEADER_SIZE)
        if len(head) >= MIN_BLANK_SIZE and BLANK_RECORD.unpack_from(head)[1] == BLANK_MAGIC:
            return True
        if len(head) != STORED_HEADER_SIZE:
            return False
        magic, physical_offset = _BOUNDARY_VIEW.unpack_from(head)
        return bool(magic == MAGIC_V1 and physical_offset == offset)

    def restart_at(self, offset: int) -> None:
        """Delete every segment and continue, empty, at ``offset`` (min = max = offset)."""
        self.delete_all_segments()
        self.max_offset = offset

    def delete_all_segments(self) -> None:
        for start in list(self.segments):
            self.delete_segment(start)

    def delete_segment(self, start: int) -> int:
        """Unlink one segment file; returns its size."""
        path = self.path(start)
        if start == self._active_start:
            self.close_active()
        self._pool.close(path)
        try:
            size = os.path.getsize(path)
            os.unlink(path)
        except FileNotFoundError:
            size = 0
        if start in self.segments:
            self.segments.remove(start)
        return size

    def close(self) -> None:
        self.close_active()

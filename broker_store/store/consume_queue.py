"""ConsumeQueue: the per topic/queue index into the CommitLog.

One ``ConsumeQueue`` per ``<store_dir>/consumequeue/<topic>/<queueId>/``. The queue offset of a message is
the index of its entry. Written by ``MessageStore`` on put and by the dispatcher during recovery and
replication; not thread-safe (the store lock guards every call).

Entry (big-endian, 20 bytes)::

    offset size field
       0    8  COMMITLOG_OFFSET   physical offset of the record
       8    4  SIZE               TOTALSIZE of the record
      12    8  TAGS_CODE          tags hash code (Java String.hashCode of the TAGS property, 0 if none)

Segment files hold ``consume_queue_segment_entries`` entries and are named by the byte offset of their
first entry (entry index * 20), zero-padded to 20 digits. Only the last segment may be partial. An
all-zero entry (SIZE 0) is a hole left by a dispatch gap and is never served.

Entries appended by the put path (``append``) first collect in an in-memory tail, served by ``read``
like the files, and reach the files in one pwrite when the store flushes (``write_tail``) or the tail
passes ``TAIL_LIMIT_BYTES``: one syscall per put saved. Entries are derived data: recovery rebuilds
whatever a crash lost from the CommitLog, starting at the checkpoint, which never claims entries the
store has not written and fsynced.
"""

from __future__ import annotations

import contextlib
import logging
import os
import struct
from pathlib import Path

from broker_store.protocol.errors import StoreError
from broker_store.store.files import FdPool, list_segments, segment_name

log = logging.getLogger(__name__)

CQ_ENTRY = struct.Struct(">qiq")
CQ_ENTRY_SIZE = CQ_ENTRY.size  # 20
_BACKWARD_SCAN_ENTRIES = 4096
TAIL_LIMIT_BYTES = 64 * 1024
"""An in-memory tail this large is written out at once (bounds memory per queue)."""


class ConsumeQueue:
    """The index of one topic/queue; offsets here are entry indexes (queue offsets)."""

    __slots__ = ("topic", "queue_id", "directory", "seg_entries", "max_index", "min_index", "flushed_index",
                 "first_seg", "_pool", "_dir_made", "_cached_seg", "_cached_path", "_tail", "_tail_start")

    def __init__(self, topic: str, queue_id: int, directory: Path, seg_entries: int, pool: FdPool) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.directory = directory
        self.seg_entries = seg_entries
        self.max_index = 0
        """Next index to be written (the queue's max offset)."""
        self.min_index = 0
        """First index whose record still exists in the CommitLog (the queue's min offset)."""
        self.flushed_index = 0
        """Entries below this index are fsynced."""
        self.first_seg = 0
        """Start index of the first segment file."""
        self._pool = pool
        self._dir_made = False
        self._cached_seg = -1
        self._cached_path = ""
        self._tail = bytearray()
        """Entries [_tail_start, max_index) not yet in the files (empty when all are)."""
        self._tail_start = 0

    # -- files ---------------------------------------------------------------------------------------

    def path(self, seg_start: int) -> str:
        if seg_start == self._cached_seg:
            return self._cached_path
        path = str(self.directory / segment_name(seg_start * CQ_ENTRY_SIZE))
        self._cached_seg, self._cached_path = seg_start, path
        return path

    def segment_starts(self) -> list[int]:
        """Start indexes of the segment files present, ascending."""
        seg_bytes = self.seg_entries * CQ_ENTRY_SIZE
        starts = list_segments(self.directory)
        for start in starts:
            if start % seg_bytes:
                raise StoreError(f"{self.directory / segment_name(start)}: not a multiple of the segment "
                                 f"size {seg_bytes}; was consume_queue_segment_entries changed?")
        return [s // CQ_ENTRY_SIZE for s in starts]

    def load(self) -> bool:
        """Derive max/first index from the files present. Returns whether the files were damaged: a segment
        before the last one short of full (it and every later segment are deleted) or a trailing partial entry
        (cut off); each is logged with the file and byte offset. The entries lost are rebuilt by recovery from
        the CommitLog (``rebuild_from``)."""
        segs = self.segment_starts()
        if not segs:
            return False
        self._dir_made = True
        damaged = False
        full = self.seg_entries * CQ_ENTRY_SIZE
        for i, seg in enumerate(segs[:-1]):
            size = os.path.getsize(self.path(seg))
            if size != full:
                log.warning("consume queue segment %s is damaged: %d bytes where a segment before the last holds "
                            "%d; cut at byte %d, later segments deleted, entries rebuilt from the commit log",
                            self.path(seg), size, full, size - size % CQ_ENTRY_SIZE)
                for later in segs[i + 1:]:
                    self._pool.close(self.path(later))
                    os.unlink(self.path(later))
                segs = segs[:i + 1]
                damaged = True
                break
        last = segs[-1]
        path = self.path(last)
        size = os.path.getsize(path)
        if size % CQ_ENTRY_SIZE:
            log.warning("consume queue segment %s is damaged: a partial entry at byte %d (file of %d bytes); "
                        "cut there, entries rebuilt from the commit log", path, size - size % CQ_ENTRY_SIZE, size)
            os.truncate(path, size - size % CQ_ENTRY_SIZE)
            damaged = True
        self.max_index = last + min(size // CQ_ENTRY_SIZE, self.seg_entries)
        self.first_seg = segs[0]
        self.min_index = segs[0]
        self.flushed_index = self.max_index
        return damaged

    def rebuild_from(self) -> int:
        """The CommitLog offset from which records of this queue may be missing: just past its last intact
        entry's record (0 when it has none)."""
        for index in range(self.max_index - 1, max(self.first_seg, self.max_index - _BACKWARD_SCAN_ENTRIES) - 1, -1):
            entry = self.entry(index)
            if entry is not None:
                return entry[0] + entry[1]
        return 0

    def append(self, index: int, data: bytes | bytearray) -> None:
        """Add whole entries at ``index``; kept in the in-memory tail when ``index`` is the max index."""
        if index != self.max_index:
            self.write(index, data)  # not a plain append: write() handles gaps
            return
        tail = self._tail
        if not tail:
            self._tail_start = index
        tail += data
        self.max_index = index + len(data) // CQ_ENTRY_SIZE
        if len(tail) >= TAIL_LIMIT_BYTES:
            # On OSError (a full disk) the entries stay in the tail, served from memory, and the flush thread
            # writes them, retrying and logging until it can: the put that got here is in the CommitLog, and
            # failing it now would make its producer send it again.
            with contextlib.suppress(OSError):
                self.write_tail()

    def write_tail(self) -> None:
        """Write the in-memory tail to the segment files (the store's flush does this first)."""
        if self._tail:
            self._write_files(self._tail_start, self._tail)  # on OSError the tail stays for a retry
            self._tail = bytearray()

    def write(self, index: int, data: bytes | bytearray) -> None:
        """Write whole entries starting at entry ``index`` (may cross into the next segment)."""
        if self._tail:
            self.write_tail()
        self._write_files(index, data)
        n = len(data) // CQ_ENTRY_SIZE
        end = index + n
        if index > self.max_index == self.first_seg:
            # an empty queue whose first entry is not at its max offset (rebuilt after retention deleted
            # its older records): it starts where its first record says
            self.first_seg = index - index % self.seg_entries
            self.min_index = index
        if end > self.max_index:
            self.max_index = end

    def _write_files(self, index: int, data: bytes | bytearray) -> None:
        if not self._dir_made:
            os.makedirs(self.directory, exist_ok=True)
            self._dir_made = True
        seg_entries = self.seg_entries
        n = len(data) // CQ_ENTRY_SIZE
        end = index + n
        if index - index % seg_entries == (end - 1) - (end - 1) % seg_entries:
            seg = index - index % seg_entries
            os.pwrite(self._pool.get(self.path(seg), create=True), data, (index - seg) * CQ_ENTRY_SIZE)
        else:
            view = memoryview(data)
            i = index
            while i < end:
                seg = i - i % seg_entries
                k = min(end, seg + seg_entries) - i
                lo = (i - index) * CQ_ENTRY_SIZE
                os.pwrite(self._pool.get(self.path(seg), create=True), view[lo:lo + k * CQ_ENTRY_SIZE],
                          (i - seg) * CQ_ENTRY_SIZE)
                i += k

    def read(self, index: int, count: int) -> bytes:
        """Entries [index, index+count) clipped to the segment end and max index; b"" if absent."""
        seg = index - index % self.seg_entries
        count = min(count, seg + self.seg_entries - index, self.max_index - index)
        if count <= 0:
            return b""
        tail_start = self._tail_start if self._tail else self.max_index
        if index >= tail_start:
            lo = (index - tail_start) * CQ_ENTRY_SIZE
            return bytes(self._tail[lo:lo + count * CQ_ENTRY_SIZE])
        in_files = min(count, tail_start - index)
        try:
            fd = self._pool.get(self.path(seg))
        except FileNotFoundError:
            return b""
        data = os.pread(fd, in_files * CQ_ENTRY_SIZE, (index - seg) * CQ_ENTRY_SIZE)
        if len(data) % CQ_ENTRY_SIZE:
            data = data[:len(data) - len(data) % CQ_ENTRY_SIZE]
        elif in_files < count and len(data) == in_files * CQ_ENTRY_SIZE:
            data += self._tail[:(count - in_files) * CQ_ENTRY_SIZE]
        return data

    def entry(self, index: int) -> tuple[int, int, int] | None:
        """(commitlog offset, size, tags code) of one entry, or None if out of range, absent or a hole."""
        if index < self.first_seg or index >= self.max_index:
            return None
        raw = self.read(index, 1)
        if len(raw) != CQ_ENTRY_SIZE:
            return None
        entry: tuple[int, int, int] = CQ_ENTRY.unpack(raw)
        return entry if entry[1] > 0 else None

    # -- maintenance ---------------------------------------------------------------------------------

    def first_index_at_or_after(self, commit_log_offset: int) -> int:
        """First index whose entry points at or past ``commit_log_offset`` (max index if none)."""
        lo, hi = self.first_seg, self.max_index
        while lo < hi:
            mid = (lo + hi) // 2
            e = self.entry(mid)
            if e is not None and e[0] >= commit_log_offset:
                hi = mid
            else:
                lo = mid + 1
        return lo

    def truncate_to(self, index: int) -> None:
        """Drop entries >= index; keeps the segment that holds ``index`` so max offset survives restarts."""
        if index >= self.max_index:
            return
        self.write_tail()
        index = max(index, 0)
        keep = index - index % self.seg_entries
        for seg in self.segment_starts():
            if seg > keep:
                path = self.path(seg)
                self._pool.close(path)
                os.unlink(path)
        os.makedirs(self.directory, exist_ok=True)
        self._dir_made = True
        fd = self._pool.get(self.path(keep), create=True)
        os.ftruncate(fd, (index - keep) * CQ_ENTRY_SIZE)
        self.max_index = index
        self.flushed_index = min(self.flushed_index, index)
        if keep < self.first_seg:
            self.first_seg = keep
        self.min_index = min(self.min_index, index)

    def truncate_from_commit_log_offset(self, commit_log_offset: int) -> None:
        """Drop the tail of entries that point at or past ``commit_log_offset`` (or are holes/torn)."""
        idx = self.max_index
        keep = self.first_seg
        last = self.entry(idx - 1)
        if last is not None and last[0] < commit_log_offset:
            return  # the common case: nothing of this queue at or past the offset
        while idx > self.first_seg:
            seg = (idx - 1) - (idx - 1) % self.seg_entries
            lo = max(seg, idx - _BACKWARD_SCAN_ENTRIES, self.first_seg)
            raw = self.read(lo, idx - lo)
            n = len(raw) // CQ_ENTRY_SIZE
            found = -1
            for j in range(n - 1, -1, -1):
                phys, size, _ = CQ_ENTRY.unpack_from(raw, j * CQ_ENTRY_SIZE)
                if size > 0 and phys < commit_log_offset:
                    found = lo + j
                    break
            if found >= 0:
                keep = found + 1
                break
            idx = lo
        self.truncate_to(keep)

    def delete_segments_below(self, commit_log_min: int) -> int:
        """Retention: delete leading segments whose entries all point below ``commit_log_min``.

        The last segment is always kept so the queue's max offset survives. Returns bytes freed and
        recomputes ``min_index``.
        """
        freed = 0
        self.write_tail()
        segs = self.segment_starts()
        for seg in segs[:-1]:
            last = self.entry(seg + self.seg_entries - 1)
            if last is not None and last[0] >= commit_log_min:
                break
            path = self.path(seg)
            self._pool.close(path)
            try:
                freed += os.path.getsize(path)
                os.unlink(path)
            except FileNotFoundError:
                pass
            self.first_seg = seg + self.seg_entries
        self.min_index = self.first_index_at_or_after(commit_log_min)
        return freed

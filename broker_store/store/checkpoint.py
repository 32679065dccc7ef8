"""The store checkpoint: how far the CommitLog and the ConsumeQueues are known to be durable, and the confirm offset.

Written by the flush thread (and at shutdown / after recovery, truncation or a confirm offset change) through a
temp file and an atomic rename; read once by recovery, which starts scanning at ``safe_offset``. A missing, torn
or unknown-version checkpoint makes recovery scan every CommitLog segment instead. Always written as version 2;
version 1 (before the confirm offset existed) is still read, its ``confirm_offset`` None.

Layout of ``<store_dir>/checkpoint``, version 2 (big-endian, 56 bytes)::

    offset size field
       0    4  MAGIC                 b"RMQK"
       4    2  VERSION               2
       6    2  reserved              0
       8    8  COMMIT_LOG_FLUSHED    CommitLog bytes below this offset are fsynced
      16    8  DISPATCH_FLUSHED      ConsumeQueue entries of every record below this offset are fsynced
      24    8  COMMIT_LOG_MIN        min physical offset when written (informational)
      32    8  WRITTEN_AT_MS         clock time of the write (informational)
      40    8  CONFIRM_OFFSET        the store's confirm offset when written (``store.dispatch``); -1 = unknown
      48    4  CRC                   crc32 of bytes 0..47
      52    4  reserved              0

Version 1 (48 bytes) is the same without CONFIRM_OFFSET: CRC at 40 over bytes 0..39, reserved at 44.
"""

from __future__ import annotations

import logging
import os
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

from broker_store.durable_file import fsync_directory

CHECKPOINT_MAGIC = b"RMQK"
CHECKPOINT_VERSION = 2
CHECKPOINT_BODY = struct.Struct(">4sHHqqqqq")
CHECKPOINT_V1_VERSION = 1
CHECKPOINT_V1_BODY = struct.Struct(">4sHHqqqq")
CHECKPOINT_TRAILER = struct.Struct(">Ii")
CHECKPOINT_SIZE = CHECKPOINT_BODY.size + CHECKPOINT_TRAILER.size  # 56
CHECKPOINT_V1_SIZE = CHECKPOINT_V1_BODY.size + CHECKPOINT_TRAILER.size  # 48
CHECKPOINT_FILE = "checkpoint"
UNKNOWN_CONFIRM_OFFSET = -1

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Checkpoint:
    commit_log_flushed: int
    """Every CommitLog byte below this offset was fsynced before the checkpoint was written."""
    dispatch_flushed: int
    """ConsumeQueue entries for all records below this CommitLog offset were fsynced; a record boundary."""
    commit_log_min: int
    written_at_ms: int
    confirm_offset: int | None = None
    """The confirm offset when written; None when not known (a version-1 file, written before it existed)."""

    @property
    def safe_offset(self) -> int:
        """Where recovery may start scanning: everything below is intact in CommitLog and ConsumeQueues."""
        return min(self.commit_log_flushed, self.dispatch_flushed)

    def encode(self) -> bytes:
        """Version 2 bytes."""
        confirm = UNKNOWN_CONFIRM_OFFSET if self.confirm_offset is None else self.confirm_offset
        body = CHECKPOINT_BODY.pack(CHECKPOINT_MAGIC, CHECKPOINT_VERSION, 0, self.commit_log_flushed,
                                    self.dispatch_flushed, self.commit_log_min, self.written_at_ms, confirm)
        return body + CHECKPOINT_TRAILER.pack(zlib.crc32(body), 0)

    @classmethod
    def decode(cls, raw: bytes) -> Checkpoint | None:
        """The checkpoint in ``raw`` (version 2 or 1), or None if it is torn, corrupt or of another version."""
        if len(raw) == CHECKPOINT_SIZE:
            layout, expected_version = CHECKPOINT_BODY, CHECKPOINT_VERSION
        elif len(raw) == CHECKPOINT_V1_SIZE:
            layout, expected_version = CHECKPOINT_V1_BODY, CHECKPOINT_V1_VERSION
        else:
            return None
        body = raw[:layout.size]
        crc, _ = CHECKPOINT_TRAILER.unpack_from(raw, layout.size)
        if zlib.crc32(body) != crc:
            return None
        magic, version, _, flushed, dispatched, cl_min, written, *rest = layout.unpack(body)
        confirm = rest[0] if rest else UNKNOWN_CONFIRM_OFFSET
        if magic != CHECKPOINT_MAGIC or version != expected_version or min(flushed, dispatched, cl_min) < 0 \
                or confirm < UNKNOWN_CONFIRM_OFFSET:
            return None
        return cls(flushed, dispatched, cl_min, written, None if confirm == UNKNOWN_CONFIRM_OFFSET else confirm)


def checkpoint_damage(raw: bytes) -> str:
    """What is wrong with ``raw``, a checkpoint ``Checkpoint.decode`` refused, naming the byte offset."""
    if len(raw) not in (CHECKPOINT_SIZE, CHECKPOINT_V1_SIZE):
        return (f"{len(raw)} bytes where a checkpoint has {CHECKPOINT_SIZE} (version 1: {CHECKPOINT_V1_SIZE}): "
                f"cut short or extended at byte {min(len(raw), CHECKPOINT_SIZE)}")
    layout = CHECKPOINT_BODY if len(raw) == CHECKPOINT_SIZE else CHECKPOINT_V1_BODY
    crc, _ = CHECKPOINT_TRAILER.unpack_from(raw, layout.size)
    if zlib.crc32(raw[:layout.size]) != crc:
        return f"the CRC at byte {layout.size} does not match bytes 0..{layout.size - 1}"
    magic, version = raw[:4], int.from_bytes(raw[4:6], "big")
    if magic != CHECKPOINT_MAGIC:
        return f"MAGIC {magic!r} at byte 0 (expected {CHECKPOINT_MAGIC!r})"
    return (f"VERSION {version} at byte 4 with a {len(raw)}-byte file, or a negative offset in bytes "
            f"8..{layout.size - 1}")


def load_checkpoint(store_dir: Path) -> Checkpoint | None:
    """The checkpoint of ``store_dir``; None when there is none, or when it is damaged (logged with the file and
    the byte at fault): recovery then scans every CommitLog segment, which loses nothing, only time."""
    path = store_dir / CHECKPOINT_FILE
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    checkpoint = Checkpoint.decode(raw)
    if checkpoint is None:
        log.warning("store checkpoint %s is damaged: %s; ignoring it and scanning every commit log segment",
                    path, checkpoint_damage(raw))
    return checkpoint


def write_checkpoint(store_dir: Path, checkpoint: Checkpoint) -> None:
    """Replace the checkpoint atomically (temp file, fsync, rename, fsync directory); raises OSError."""
    tmp = store_dir / (CHECKPOINT_FILE + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, checkpoint.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, store_dir / CHECKPOINT_FILE)
    fsync_directory(store_dir)

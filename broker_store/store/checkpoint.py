"""The store checkpoint: how far the CommitLog and the ConsumeQueues are known to be durable.

Written by the flush thread (and at shutdown / after recovery or truncation) through a temp file and an
atomic rename; read once by recovery, which starts scanning at ``safe_offset``. A missing, torn or
unknown-version checkpoint makes recovery scan every CommitLog segment instead.

Layout of ``<store_dir>/checkpoint`` (big-endian, 48 bytes)::

    offset size field
       0    4  MAGIC                 b"RMQK"
       4    2  VERSION               1
       6    2  reserved              0
       8    8  COMMIT_LOG_FLUSHED    CommitLog bytes below this offset are fsynced
      16    8  DISPATCH_FLUSHED      ConsumeQueue entries of every record below this offset are fsynced
      24    8  COMMIT_LOG_MIN        min physical offset when written (informational)
      32    8  WRITTEN_AT_MS         clock time of the write (informational)
      40    4  CRC                   crc32 of bytes 0..39
      44    4  reserved              0
"""

from __future__ import annotations

import os
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

from broker_store.store.files import fsync_directory

CHECKPOINT_MAGIC = b"RMQK"
CHECKPOINT_VERSION = 1
CHECKPOINT_BODY = struct.Struct(">4sHHqqqq")
CHECKPOINT_TRAILER = struct.Struct(">Ii")
CHECKPOINT_SIZE = CHECKPOINT_BODY.size + CHECKPOINT_TRAILER.size  # 48
CHECKPOINT_FILE = "checkpoint"


@dataclass(frozen=True)
class Checkpoint:
    commit_log_flushed: int
    """Every CommitLog byte below this offset was fsynced before the checkpoint was written."""
    dispatch_flushed: int
    """ConsumeQueue entries for all records below this CommitLog offset were fsynced; a record boundary."""
    commit_log_min: int
    written_at_ms: int

    @property
    def safe_offset(self) -> int:
        """Where recovery may start scanning: everything below is intact in CommitLog and ConsumeQueues."""
        return min(self.commit_log_flushed, self.dispatch_flushed)

    def encode(self) -> bytes:
        body = CHECKPOINT_BODY.pack(CHECKPOINT_MAGIC, CHECKPOINT_VERSION, 0, self.commit_log_flushed,
                                    self.dispatch_flushed, self.commit_log_min, self.written_at_ms)
        return body + CHECKPOINT_TRAILER.pack(zlib.crc32(body), 0)

    @classmethod
    def decode(cls, raw: bytes) -> Checkpoint | None:
        """The checkpoint in ``raw``, or None if it is torn, corrupt or of another version."""
        if len(raw) != CHECKPOINT_SIZE:
            return None
        body = raw[:CHECKPOINT_BODY.size]
        crc, _ = CHECKPOINT_TRAILER.unpack_from(raw, CHECKPOINT_BODY.size)
        if zlib.crc32(body) != crc:
            return None
        magic, version, _, flushed, dispatched, cl_min, written = CHECKPOINT_BODY.unpack(body)
        if magic != CHECKPOINT_MAGIC or version != CHECKPOINT_VERSION or min(flushed, dispatched, cl_min) < 0:
            return None
        return cls(flushed, dispatched, cl_min, written)


def load_checkpoint(store_dir: Path) -> Checkpoint | None:
    try:
        raw = (store_dir / CHECKPOINT_FILE).read_bytes()
    except FileNotFoundError:
        return None
    return Checkpoint.decode(raw)


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

"""Segment file naming and a bounded LRU pool of open file descriptors (the crash-safe small-file write is
``broker_store.durable_file``'s).

Used by ``commit_log`` and ``consume_queue``. All I/O is ``os.pread``/``os.pwrite`` on raw descriptors,
never mmap: mapped pages would count toward the broker's RSS. Not thread-safe: callers hold the
store lock for every pool operation (the flush thread only ``dup``s descriptors under that lock).
"""

from __future__ import annotations

import os
from collections import OrderedDict
from pathlib import Path

SEGMENT_NAME_DIGITS = 20
"""Segment files are named by their start offset, zero-padded: ``00000000000000065536``."""


def segment_name(start: int) -> str:
    return f"{start:0{SEGMENT_NAME_DIGITS}d}"


def list_segments(directory: Path) -> list[int]:
    """Start offsets of the segment files in ``directory``, ascending; other files are ignored."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    return sorted(int(n) for n in names if len(n) == SEGMENT_NAME_DIGITS and n.isdigit())


_fdatasync = getattr(os, "fdatasync", os.fsync)


def fdatasync(fd: int) -> None:
    _fdatasync(fd)


class FdPool:
    """At most ``capacity`` open descriptors, keyed by path, least recently used closed first."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._fds: OrderedDict[str, int] = OrderedDict()

    def get(self, path: str, *, create: bool = False) -> int:
        """An O_RDWR descriptor for ``path``; FileNotFoundError if absent and not ``create``."""
        fds = self._fds
        fd = fds.get(path)
        if fd is not None:
            fds.move_to_end(path)
            return fd
        flags = os.O_RDWR | (os.O_CREAT if create else 0)
        fd = os.open(path, flags, 0o644)
        fds[path] = fd
        while len(fds) > self.capacity:
            _, old = fds.popitem(last=False)
            os.close(old)
        return fd

    def dup(self, path: str) -> int | None:
        """A private duplicate of the pooled descriptor (for fsync off the lock), or None if not open."""
        fd = self._fds.get(path)
        return None if fd is None else os.dup(fd)

    def close(self, path: str) -> None:
        fd = self._fds.pop(path, None)
        if fd is not None:
            os.close(fd)

    def close_all(self) -> None:
        while self._fds:
            _, fd = self._fds.popitem()
            os.close(fd)

    def __len__(self) -> int:
        return len(self._fds)

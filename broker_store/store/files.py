"""Segment file naming and a bounded LRU pool of open file descriptors.

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


def fsync_directory(directory: Path) -> None:
    """Make a create/rename/unlink in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_file(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` so that a crash at any point leaves the old file or the new one, never a
    torn one: write ``<name>.tmp`` beside it, fsync, rename over ``path``, fsync the directory. Raises OSError;
    callers translate it to their own error. The one crash-safe small-file write (metadata, identity, epoch
    and controller state files)."""
    tmp = path.with_name(path.name + ".tmp")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_directory(path.parent)


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

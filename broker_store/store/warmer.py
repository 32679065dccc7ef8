"""PageCacheWarmer: populates the page cache of the active CommitLog segment ahead of the writer.

Run by ``MessageStore`` on the "store-warm" thread when ``commit_log_warm_ahead`` > 0 and the platform
has ``posix_fadvise``. RocketMQ warms its mapped files for the same reason: the cost of the kernel
allocating page cache (and of a VM's host faulting in fresh memory) is paid off the put path.
"""

from __future__ import annotations

import logging
import os

from broker_store.clock import StopSignal
from broker_store.store.commit_log import CommitLog

log = logging.getLogger(__name__)

WARM_CHUNK = 4 * 1024 * 1024
"""Bytes the warmer populates per call (it re-reads the write position between calls)."""
WARM_IDLE_S = 0.02
"""How long the warmer sleeps once it is ``ahead`` bytes ahead (~2 MB at 100 MB/s)."""


class PageCacheWarmer:
    """``POSIX_FADV_WILLNEED`` on the segment's hole from the write position up to ``ahead`` bytes past it:
    the kernel allocates zeroed pages that the writer's ``pwrite`` then only copies into. Reads only, so
    it needs no lock: the write position is read as it moves, and a segment deleted or truncated
    meanwhile at worst gets pages it no longer needs."""

    def __init__(self, commit_log: CommitLog, ahead: int, stop: StopSignal) -> None:
        self._commit_log = commit_log
        self._ahead = ahead
        self._stop = stop

    def run(self) -> None:
        ahead = self._ahead
        cl = self._commit_log
        seg = cl.segment_size
        fd, fd_start, warmed = -1, -1, 0
        try:
            while not self._stop.is_set():
                end = cl.max_offset
                start = end - end % seg
                if start != fd_start:
                    if fd >= 0:
                        os.close(fd)
                        fd = -1
                    try:
                        fd = os.open(cl.path(start), os.O_RDONLY)
                    except FileNotFoundError:  # the writer creates it with its first record
                        self._stop.sleep(WARM_IDLE_S)
                        continue
                    fd_start, warmed = start, end
                warmed = max(warmed, end)
                target = min(start + seg, end + ahead)
                if warmed >= target:
                    self._stop.sleep(WARM_IDLE_S)
                    continue
                size = min(WARM_CHUNK, target - warmed)
                try:
                    os.posix_fadvise(fd, warmed - start, size, os.POSIX_FADV_WILLNEED)
                except OSError as exc:  # only an optimisation: note it and stop
                    log.warning("page cache warming of %s stopped: %s", cl.path(start), exc)
                    return
                warmed += size
        finally:
            if fd >= 0:
                os.close(fd)

"""FlushService: the store's fsync thread, its group-commit waiters and the checkpoint.

Owned by ``MessageStore``: it runs ``run`` on the "store-flush" thread, calls ``flush_queues_and_checkpoint``
at start and shutdown and ``truncated`` when replication truncates the CommitLog. ``SyncFlushStep`` is
SYNC_FLUSH's durability step (``store.durability``).

The thread wakes when a waiter's offset is written, when the nearest waiter deadline passes, or every
``flush_interval_ms`` (ASYNC_FLUSH's bound and the ConsumeQueue fsync + checkpoint period in both modes).
It takes the store lock only to snapshot offsets and dup descriptors; fsync runs off the lock. All
waiters pending when it wakes share one fsync (group commit). Lock order: checkpoint lock, then store lock.
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from broker_store.clock import Clock
from broker_store.store.checkpoint import Checkpoint, write_checkpoint
from broker_store.store.commit_log import CommitLog
from broker_store.store.consume_queues import ConsumeQueueTable
from broker_store.store.disk_space import is_disk_full
from broker_store.store.files import FdPool, fdatasync
from broker_store.store.results import DurableFuture, PutStatus

log = logging.getLogger(__name__)

T = TypeVar("T")


class FlushService:
    """fsyncs the CommitLog (and, each interval, the dirty ConsumeQueues) and resolves flush waiters."""

    def __init__(self, store_dir: Path, commit_log: CommitLog, queues: ConsumeQueueTable, pool: FdPool,
                 lock: threading.Lock, *, interval_ms: int, timeout_ms: int, clock: Clock,
                 confirm_offset: Callable[[], int]) -> None:
        self._store_dir = store_dir
        self._commit_log = commit_log
        self._queues = queues
        self._pool = pool
        self._lock = lock
        """The store lock (shared with the put and read paths)."""
        self.checkpoint_lock = threading.Lock()
        self._interval = interval_ms / 1000
        self._timeout = timeout_ms / 1000
        self._clock = clock
        """Flush deadlines and the interval (``monotonic``, thread waits), checkpoint stamps (``time``)."""
        self._confirm_offset = confirm_offset
        """The store's confirm offset, read under the store lock for the checkpoint."""
        self.flushed = 0
        """CommitLog offset up to which every byte is fsynced."""
        self._truncate_gen = 0
        self.accepting = False
        """Whether new waiters may wait (False before start and after shutdown: they fail at once)."""
        self._cond = threading.Condition()
        self._waiters: list[tuple[int, float, concurrent.futures.Future[Any], object, object]] = []
        self._stopping = False
        self._last_checkpoint: tuple[int, int, int] | None = None

    # -- waiters ---------------------------------------------------------------------------------------

    def wait_flushed(self, end_offset: int, ok: T, failed: T) -> concurrent.futures.Future[T]:
        """A future resolved to ``ok`` once the CommitLog is fsynced up to ``end_offset``; to ``failed``
        after the flush timeout, on truncation below ``end_offset`` and at shutdown."""
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        if end_offset <= self.flushed:
            future.set_result(ok)
            return future
        if not self.accepting:
            future.set_result(failed)
            return future
        deadline = self._clock.monotonic() + self._timeout
        with self._cond:
            self._waiters.append((end_offset, deadline, future, ok, failed))
            self._cond.notify()
        return future

    def resolve_waiters(self, flushed: int, *, expire_all: bool = False, fail_above: int | None = None) -> None:
        now = self._clock.monotonic()
        done: list[tuple[concurrent.futures.Future[Any], object]] = []
        with self._cond:
            keep = []
            for waiter in self._waiters:
                end, deadline, future, ok, failed = waiter
                if end <= flushed and (fail_above is None or end <= fail_above):
                    done.append((future, ok))
                elif expire_all or deadline <= now or (fail_above is not None and end > fail_above):
                    done.append((future, failed))
                else:
                    keep.append(waiter)
            self._waiters = keep
        for future, value in done:
            if not future.done():
                try:
                    future.set_result(value)
                except concurrent.futures.InvalidStateError:
                    pass  # cancelled by the waiter in the meantime

    # -- the thread ------------------------------------------------------------------------------------

    def stop(self) -> None:
        """Ask ``run`` to return (the caller joins the thread)."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()

    def run(self) -> None:
        interval = self._interval
        clock = self._clock
        next_checkpoint = clock.monotonic() + interval
        cond = self._cond
        disk_full = False  # logged once per spell, not every retry
        while True:
            with cond:
                while not self._stopping:
                    now = clock.monotonic()
                    wake = next_checkpoint
                    waiters = self._waiters
                    if waiters:
                        if min(w[0] for w in waiters) <= self._commit_log.max_offset:
                            break
                        wake = min(wake, min(w[1] for w in waiters))
                    if wake <= now:
                        break
                    clock.wait(cond, wake - now)
                if self._stopping:
                    return
            try:
                flushed = self.flush_commit_log()
                self.resolve_waiters(flushed)
                if clock.monotonic() >= next_checkpoint:
                    self.flush_queues_and_checkpoint()
                    next_checkpoint = clock.monotonic() + interval
                if disk_full:
                    disk_full = False
                    log.warning("flush of %s works again: disk space is back", self._store_dir)
            except OSError as exc:
                if not is_disk_full(exc):
                    log.exception("flush of %s failed; retrying", self._store_dir)
                elif not disk_full:
                    disk_full = True
                    log.error("flush of %s failed: disk full (%s); ConsumeQueue entries stay in memory and the "
                              "checkpoint stays where it was until space is freed; retrying", self._store_dir, exc)
                self.resolve_waiters(self.flushed)
                with cond:
                    if not self._stopping:
                        clock.wait(cond, min(interval, 0.1))

    # -- fsync -----------------------------------------------------------------------------------------

    def flush_commit_log(self) -> int:
        """fsync the CommitLog up to the current max offset (off the store lock); returns flushed offset."""
        with self._lock:
            cl = self._commit_log
            target = cl.max_offset
            flushed = self.flushed
            gen = self._truncate_gen
            if target <= flushed:
                return flushed
            seg_size = cl.segment_size
            handles = []
            for start in reversed(cl.segments):
                if start + seg_size <= flushed:
                    break
                if start < target:
                    handles.append(cl.dup_or_path(start))
        fsync_all(handles)
        with self._lock:
            if gen == self._truncate_gen and target > self.flushed:
                self.flushed = target
            return self.flushed

    def flush_queues_and_checkpoint(self) -> None:
        """fsync dirty ConsumeQueues and the CommitLog, then record both in the checkpoint."""
        with self._lock:
            dispatched = self._queues.dispatched
            confirm = self._confirm_offset()
            gen = self._truncate_gen
            dirty_set = self._queues.dirty
            for cq in dirty_set:
                cq.write_tail()  # entries the put path kept in memory go to the files before the fsync
            dirty = list(dirty_set)
            dirty_set.clear()
            handles: list[int | str] = []
            for cq in dirty:
                seg_entries = cq.seg_entries
                lo = cq.flushed_index - cq.flushed_index % seg_entries
                hi_index = max(cq.max_index - 1, cq.flushed_index)
                for seg in range(max(lo, cq.first_seg), hi_index - hi_index % seg_entries + 1, seg_entries):
                    path = cq.path(seg)
                    fd = self._pool.dup(path)
                    handles.append(path if fd is None else fd)
                cq.flushed_index = cq.max_index
        fsync_all(handles)
        flushed = self.flush_commit_log()
        self.resolve_waiters(flushed)
        with self.checkpoint_lock:
            if gen != self._truncate_gen or self._last_checkpoint == (flushed, dispatched, confirm):
                return
            self.write_checkpoint(flushed, dispatched, confirm)

    def write_checkpoint(self, flushed: int, dispatched: int, confirm: int) -> None:
        """Caller holds the checkpoint lock."""
        checkpoint = Checkpoint(commit_log_flushed=flushed, dispatch_flushed=min(dispatched, flushed),
                                commit_log_min=self._commit_log.min_offset,
                                written_at_ms=int(self._clock.time() * 1000), confirm_offset=confirm)
        write_checkpoint(self._store_dir, checkpoint)
        self._last_checkpoint = (flushed, dispatched, confirm)

    def recovered(self, flushed: int) -> None:
        """At start, by recovery: every CommitLog byte below ``flushed`` is on disk."""
        self.flushed = flushed

    def open(self) -> None:
        """At start, once the store runs: waiters may wait from now on."""
        self.accepting = True

    def close(self) -> None:
        """At shutdown (or a simulated crash): new waiters fail at once. Resolve the pending ones with
        ``resolve_waiters(expire_all=True)`` once the thread is stopped."""
        self.accepting = False

    def restarted_at(self, offset: int) -> None:
        """The CommitLog was emptied and continues at ``offset`` (after ``truncated(offset)``): nothing below it
        is left to flush."""
        self.flushed = offset

    def truncated(self, offset: int) -> None:
        """The CommitLog was cut at ``offset``: flushes in flight must not raise ``flushed`` past it.
        Caller holds the checkpoint lock and the store lock, then calls ``resolve_waiters(fail_above=...)``."""
        self._truncate_gen += 1
        self.flushed = min(self.flushed, offset)


class SyncFlushStep:
    """SYNC_FLUSH's durability step: the CommitLog fsynced past the put (group commit)."""

    name = "flush"

    def __init__(self, flush: FlushService) -> None:
        self._flush = flush

    def wait(self, end_offset: int) -> DurableFuture | None:
        if end_offset <= self._flush.flushed:
            return None
        return self._flush.wait_flushed(end_offset, PutStatus.PUT_OK, PutStatus.FLUSH_DISK_TIMEOUT)


def fsync_all(handles: Sequence[int | str]) -> None:
    """fsync each descriptor (then close it) or path; files deleted meanwhile are skipped."""
    error: OSError | None = None
    for handle in handles:
        try:
            if isinstance(handle, str):
                try:
                    fd = os.open(handle, os.O_RDWR)
                except FileNotFoundError:
                    continue
            else:
                fd = handle
            try:
                fdatasync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            error = error or exc
    if error is not None:
        raise error

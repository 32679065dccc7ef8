"""ReplicaCommitLog: the CommitLog as a replica's HA link sees it: raw bytes at physical offsets, and the surgery
a rejoin needs (truncate at a record boundary, restart empty at an offset, append at exactly the max offset).

Owned by ``MessageStore``, which hands out its methods as its own (``ha.store_view.ReplicaLog`` describes them;
HA never imports the store). It shares the store lock, the CommitLog, the ConsumeQueueTable, the Dispatcher
and the FlushService with the put path; indexing goes through ``Dispatcher.dispatch``, the loop recovery runs
too (``ConsumeQueueTable.index``). Appends run on the replica client's worker thread.

Lock order: checkpoint lock, then store lock (``truncate`` and ``restart``, like the flush thread).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from broker_store.protocol.errors import RefusedRecordError, StoreError
from broker_store.store.commit_log import CommitLog
from broker_store.store.consume_queues import ConsumeQueueTable
from broker_store.store.dispatch import Arrival, Dispatcher
from broker_store.store.flush import FlushService
from broker_store.store.record_check import check_arrival, claimed_end


class ReplicaCommitLog:
    """The replica side of a store's CommitLog (see the module docstring). ``notify(arrivals)`` runs the store's
    arrival listeners, outside the store lock."""

    def __init__(self, commit_log: CommitLog, queues: ConsumeQueueTable, dispatcher: Dispatcher,
                 flush: FlushService, lock: threading.Lock, notify: Callable[[list[Arrival]], None]) -> None:
        self._commit_log = commit_log
        self._queues = queues
        self._dispatch = dispatcher
        self._flush = flush
        self._lock = lock
        self._notify = notify
        self._checked: int | None = None
        """Where the records not yet checked begin (the last whole record written ends there; None: at the
        max offset, a record boundary after recovery, a truncation or a restart)."""

    def read(self, offset: int, max_bytes: int) -> bytes:
        """Raw CommitLog bytes from ``offset``, never crossing a segment end; b"" outside [min, max)."""
        with self._lock:
            cl = self._commit_log
            if not cl.min_offset <= offset < cl.max_offset or max_bytes <= 0:
                return b""
            return cl.read(offset, min(max_bytes, cl.max_offset - offset))

    def append(self, offset: int, data: bytes) -> None:
        """Write raw bytes at exactly the max offset, then index every complete record.

        ``data`` may end inside a record; that record is indexed once the rest arrives.
        """
        self.write(offset, data)
        self.index()

    def write(self, offset: int, data: bytes) -> None:
        """Write raw bytes at exactly the max offset, without indexing them yet.

        The max offset moves past ``data`` at once (what a replica acks: RocketMQ's replica reports after
        the CommitLog append and builds its ConsumeQueues behind it); ``index`` indexes later.

        Each whole record is checked first (``record_check.check_arrival``, with the start of a record an
        earlier write left cut short): a damaged one is refused. The records before it are written, it and
        what follows are not (a start of it written earlier is cut off again), and a RefusedRecordError naming its
        offset and fault ends the HA session: the replica neither acks nor ever serves it, and asks the
        primary for it again from its max offset when it reconnects.
        """
        with self._lock:
            cl = self._commit_log
            if offset != cl.max_offset:
                raise StoreError(f"append at commit log offset {offset}, "
                                 f"but the max offset is {cl.max_offset}")
            if offset % cl.segment_size + len(data) > cl.segment_size:
                raise StoreError(f"append of {len(data)} bytes at {offset} crosses a segment end")
            if not data:
                return
            start = offset if self._checked is None or not 0 <= offset - self._checked < cl.segment_size \
                else self._checked
            pending = cl.read(start, offset - start) + data if start < offset else data
            checked, problem = check_arrival(pending, start, cl.segment_size)
            keep = data if problem is None else data[:max(0, checked - offset)]
            self._dispatch.written()
            try:
                if keep:
                    cl.write(offset, keep)
            except OSError as exc:
                raise StoreError(f"append to the commit log at {offset} failed: {exc}") from exc
            self._checked = checked
        if problem is None:
            return
        if checked < offset:
            self.truncate(checked)  # the start of the damaged record, written by an earlier read
        raise RefusedRecordError(f"refused a damaged record from the primary at commit log offset {checked} "
                                 f"(segment {cl.path(checked - checked % cl.segment_size)}): {problem}",
                                 offset=checked, end=claimed_end(pending, start, checked, cl.segment_size))

    def index(self) -> None:
        """Index every complete record written so far, up to the confirm offset (ConsumeQueues, arrival
        listeners)."""
        with self._lock:
            arrived = self.index_locked()
        if arrived:
            self._notify(arrived)

    def index_locked(self) -> list[Arrival]:
        """``index`` for a caller holding the store lock, which then runs ``notify`` with the result after
        releasing it. StoreError on an I/O error."""
        try:
            return self._dispatch.dispatch()
        except OSError as exc:
            raise StoreError(f"indexing the commit log from {self._queues.dispatched} failed: {exc}") from exc

    def truncate(self, offset: int) -> None:
        """Drop every record at or past ``offset`` (a record boundary: a record's start, a blank record or the
        dispatched offset) and their ConsumeQueue entries.

        The order is a safety property (``store.epoch_store`` relies on it surviving a kill -9 at each step):
        checkpoint with offsets capped at ``offset``, CommitLog, ConsumeQueue entries, checkpoint again.
        """
        flush = self._flush
        with flush.checkpoint_lock, self._lock:
            cl = self._commit_log
            if offset >= cl.max_offset:
                return
            # The dispatched offset is a boundary by construction (dispatch stops only between records); a
            # promotion cuts there a record received in part, which may be shorter than a header.
            if offset not in (self._queues.dispatched, self._checked) and not cl.is_record_boundary(offset):
                raise StoreError(f"commit log offset {offset} is not a record boundary")
            flush.truncated(offset)
            try:
                # Checkpoint first: a crash after the cut but before the final checkpoint would otherwise leave
                # one whose safe offset lies past the log's new end, and recovery would resume from there over
                # the zeroed bytes. A lower safe offset only makes recovery scan more.
                flush.write_checkpoint(flush.flushed, min(self._queues.dispatched, offset),
                                       min(self._dispatch.confirm_offset, offset))
                if offset <= cl.min_offset:
                    cl.delete_all_segments()
                cl.truncate(offset)
                self._queues.cut_at(offset)
                self._dispatch.truncated(offset)
                self._checked = None
                flush.write_checkpoint(flush.flushed, self._queues.dispatched, self._dispatch.confirm_offset)
            except OSError as exc:
                raise StoreError(f"truncating the commit log to {offset} failed: {exc}") from exc
        flush.resolve_waiters(flush.flushed, fail_above=offset)

    def restart(self, offset: int) -> None:
        """Drop the whole log and continue, empty, at ``offset`` (min = max = offset).

        For a replica whose log lies entirely below the primary's min offset (``ha.replica_start``
        RESTART): every CommitLog segment and ConsumeQueue entry goes, the flushed and dispatched
        offsets move to ``offset`` and the checkpoint says so. ``offset`` is the primary's min offset,
        a segment start, so the next append creates the segment file it falls in.
        """
        flush = self._flush
        with flush.checkpoint_lock, self._lock:
            flush.truncated(offset)
            try:
                self._commit_log.restart_at(offset)
                self._queues.restart_at(offset)
                flush.restarted_at(offset)
                self._dispatch.restarted(offset)
                self._checked = None
                flush.write_checkpoint(offset, offset, self._dispatch.confirm_offset)
            except OSError as exc:
                raise StoreError(f"restarting the commit log at {offset} failed: {exc}") from exc
        flush.resolve_waiters(flush.flushed, fail_above=offset)

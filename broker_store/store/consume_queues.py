"""ConsumeQueueTable: every ConsumeQueue of a store, and the dispatch of CommitLog records into them.

Owned by ``MessageStore``; recovery, replication's ``append_commit_log`` and the put path index records
through it; flush reads its dirty set. Not thread-safe: callers hold the store lock.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from broker_store.protocol.errors import ProtocolError
from broker_store.protocol.message import validate_topic
from broker_store.store.commit_log import CommitLog, DispatchRecord
from broker_store.store.consume_queue import CQ_ENTRY, CQ_ENTRY_SIZE, ConsumeQueue
from broker_store.store.files import FdPool

log = logging.getLogger(__name__)

MAX_QUEUE_ID = (1 << 31) - 1


class ConsumeQueueTable:
    """``(topic, queue_id) -> ConsumeQueue`` under ``root`` (``<store_dir>/consumequeue``)."""

    def __init__(self, root: Path, seg_entries: int, pool: FdPool) -> None:
        self.root = root
        self._seg_entries = seg_entries
        self._pool = pool
        self.queues: dict[tuple[str, int], ConsumeQueue] = {}
        self.dirty: set[ConsumeQueue] = set()
        """Queues with entries written since the last ConsumeQueue fsync (the flush service drains it)."""
        self.dispatched = 0
        """CommitLog offset below which every record is in its ConsumeQueue (a record boundary)."""

    def get(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self.queues.get((topic, queue_id))

    def get_or_create(self, topic: str, queue_id: int) -> ConsumeQueue:
        return self.queues.get((topic, queue_id)) or self._new_queue(topic, queue_id)

    def load(self) -> int | None:
        """Open every queue directory present (``<topic>/<queueId>``); anything else is logged and skipped.
        Returns the CommitLog offset recovery must index from so that every damaged queue (``ConsumeQueue.load``)
        gets its lost entries back, None when no queue was damaged."""
        rebuild: int | None = None
        for topic in sorted(os.listdir(self.root)):
            try:
                validate_topic(topic)
            except ProtocolError:
                log.warning("ignoring %s: not a topic directory", self.root / topic)
                continue
            for name in sorted(os.listdir(self.root / topic)):
                if name.isdigit() and int(name) <= MAX_QUEUE_ID:
                    cq = self._new_queue(topic, int(name))
                    if cq.load():
                        start = cq.rebuild_from()
                        rebuild = start if rebuild is None else min(rebuild, start)
        return rebuild

    def _new_queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        cq = ConsumeQueue(topic, queue_id, self.root / topic / str(queue_id), self._seg_entries, self._pool)
        self.queues[(topic, queue_id)] = cq
        return cq

    def truncate_from_commit_log_offset(self, offset: int) -> None:
        """Drop every entry pointing at or past ``offset`` (recovery and replica truncation)."""
        for cq in self.queues.values():
            cq.truncate_from_commit_log_offset(offset)
            self.dirty.add(cq)

    def resume_at(self, offset: int) -> None:
        """Recovery: entries pointing at or past ``offset`` (the scan start) go; indexing resumes there."""
        self.truncate_from_commit_log_offset(offset)
        self.dispatched = offset

    def cut_at(self, offset: int) -> None:
        """The CommitLog was cut at ``offset``: the dispatched offset comes down to it, then every entry pointing
        at or past it goes."""
        self.dispatched = min(self.dispatched, offset)
        self.truncate_from_commit_log_offset(offset)

    def restart_at(self, offset: int) -> None:
        """The CommitLog was emptied and continues at ``offset``: every entry goes; dispatched is ``offset``."""
        self.truncate_from_commit_log_offset(0)
        self.dispatched = offset

    def put_indexed(self, cq: ConsumeQueue, dispatched: int) -> None:
        """A put appended entries to ``cq`` for records ending at ``dispatched`` (the CommitLog's max offset)."""
        self.dispatched = dispatched
        self.dirty.add(cq)

    def index(self, commit_log: CommitLog, limit: int) -> list[tuple[str, int, int]]:
        """Index every complete record from ``dispatched`` up to ``limit``, moving ``dispatched`` past each scanned
        chunk (an OSError leaves it at the last chunk indexed). The one dispatch loop: recovery and the store's
        ``Dispatcher`` both run it. Returns the arrivals, as ``dispatch``."""
        arrived: list[tuple[str, int, int]] = []
        pos, stopped = self.dispatched, False
        while not stopped and pos < limit:
            records, pos, stopped = commit_log.scan(pos, limit)
            arrived.extend(self.dispatch(records))
            self.dispatched = pos
        return arrived

    def dispatch(self, records: list[DispatchRecord]) -> list[tuple[str, int, int]]:
        """Write ConsumeQueue entries for validated records (idempotent: present entries are kept).

        Returns ``(topic, queue_id, new max offset)`` of each queue that got entries (for arrival listeners).
        """
        groups: dict[tuple[str, int], tuple[ConsumeQueue, int, bytearray]] = {}
        queues = self.queues
        for r in records:
            key = (r.topic, r.queue_id)
            group = groups.get(key)
            if group is not None and group[1] + len(group[2]) // CQ_ENTRY_SIZE == r.queue_offset:
                group[2].extend(CQ_ENTRY.pack(r.physical_offset, r.size, r.tags_code))
                continue
            cq = queues.get(key)
            if cq is None:
                try:
                    validate_topic(r.topic)
                except ProtocolError:
                    log.warning("record at %d has an invalid topic %r; not indexed",
                                r.physical_offset, r.topic)
                    continue
                cq = self._new_queue(r.topic, r.queue_id)
            if group is not None:
                cq.write(group[1], group[2])
                del groups[key]
            if r.queue_offset < cq.max_index:
                continue  # already indexed
            if r.queue_offset > cq.max_index and cq.max_index > cq.first_seg:
                log.warning("queue %s/%d: record at %d has queue offset %d, expected %d; leaving a hole",
                            r.topic, r.queue_id, r.physical_offset, r.queue_offset, cq.max_index)
            entry = CQ_ENTRY.pack(r.physical_offset, r.size, r.tags_code)
            groups[key] = (cq, r.queue_offset, bytearray(entry))
        arrived = []
        for cq, index, data in groups.values():
            cq.write(index, data)
            self.dirty.add(cq)
            arrived.append((cq.topic, cq.queue_id, cq.max_index))
        return arrived

"""Retention: deletes CommitLog segments past their reserve time or beyond the size cap, then the
ConsumeQueue segments that only point below the new CommitLog min offset.

Owned by ``MessageStore``: ``run`` is the "store-retention" thread (every ``retention_interval_ms``);
``delete_expired`` is also public for callers that run retention themselves. Takes the store lock per
deleted segment, so puts and reads interleave with a long deletion.
"""

from __future__ import annotations

import logging
import os
import threading

from broker_store.clock import Clock, StopSignal
from broker_store.protocol.errors import StoreError
from broker_store.protocol.message import MAGIC_V1, STORED_HEADER_SIZE, stored_header_view
from broker_store.store.commit_log import CommitLog
from broker_store.store.config import StoreConfig
from broker_store.store.consume_queues import ConsumeQueueTable

log = logging.getLogger(__name__)
_FIRST_RECORD = stored_header_view("MAGICCODE", "PHYSICALOFFSET", "STORETIMESTAMP")


class Retention:
    """Age and size based deletion of the oldest CommitLog segments (never the active one)."""

    def __init__(self, config: StoreConfig, commit_log: CommitLog, queues: ConsumeQueueTable,
                 lock: threading.Lock, clock: Clock) -> None:
        self._config = config
        self._commit_log = commit_log
        self._queues = queues
        self._lock = lock
        self._clock = clock

    def run(self, stop: StopSignal) -> None:
        interval = self._config.retention_interval_ms / 1000
        while stop.sleep(interval):
            try:
                self.delete_expired()
            except (OSError, StoreError):
                log.exception("retention in %s failed", self._config.store_dir)

    def _newest_timestamp_before(self, next_start: int) -> int:
        """Upper bound of the newest store timestamp in the segment before ``next_start``.

        The next segment's first record was stored after every record of this one; without a readable
        first record the segment file's mtime stands in.
        """
        head = self._commit_log.read(next_start, STORED_HEADER_SIZE)
        if len(head) == STORED_HEADER_SIZE:
            magic, physical_offset, store_timestamp = _FIRST_RECORD.unpack_from(head)
            if magic == MAGIC_V1 and physical_offset == next_start:
                ts: int = store_timestamp
                return ts
        return int(os.path.getmtime(self._commit_log.path(next_start - self._commit_log.segment_size)) * 1000)

    def delete_expired(self, now_ms: int | None = None) -> int:
        """Delete CommitLog segments past their reserve time or beyond the size cap, oldest first.

        Never the active segment. Then ConsumeQueue segments that only point below the new CommitLog
        min offset go, and every queue's min offset moves up. Returns bytes freed.
        """
        now = int(self._clock.time() * 1000) if now_ms is None else now_ms
        reserve_ms = self._config.file_reserved_hours * 3600 * 1000
        cap = self._config.max_commit_log_bytes
        cl = self._commit_log
        freed = 0
        deleted = False
        try:
            while True:
                with self._lock:
                    segs = cl.segments
                    if len(segs) < 2:
                        break
                    total = (len(segs) - 1) * cl.segment_size + (cl.max_offset - segs[-1])
                    oldest = segs[0]
                    expired = self._newest_timestamp_before(segs[1]) + reserve_ms <= now
                    if not (expired or (cap is not None and total > cap)):
                        break
                    freed += cl.delete_segment(oldest)
                    deleted = True
                    log.info("retention deleted commit log segment %d of %s (%s)", oldest,
                             self._config.store_dir, "expired" if expired else "size cap")
            if deleted:
                with self._lock:
                    queues = list(self._queues.queues.values())
                for cq in queues:
                    with self._lock:
                        freed += cq.delete_segments_below(cl.min_offset)
        except OSError as exc:
            raise StoreError(f"retention in {self._config.store_dir} failed: {exc}") from exc
        return freed

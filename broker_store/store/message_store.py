"""MessageStore: the store's front end: CommitLog + ConsumeQueues behind one API.

Called by the broker's send/pull processors (on the asyncio loop thread) and by replication. The work
is done by parts with one job each, all sharing the store lock and the CommitLog:

    recovery.recover        the valid CommitLog prefix and the ConsumeQueues after a crash (at start)
    consume_queues          the queue table and the dispatch of records into it
    dispatch.Dispatcher     the confirm offset: how far records are indexed, so visible to consumers
    replica_log             a replica's raw appends and log surgery (truncate, restart), for HA
    record_encoding         the bytes a put appends
    flush.FlushService      fsync thread, group-commit waiters, checkpoint
    durability              what ``PutResult.durable`` waits for (the flush step; replication adds its own)
    reads.QueueReader       pulls, timestamps, single records
    retention.Retention     deletion of expired segments
    warmer.PageCacheWarmer  page cache ahead of the writer

Threads and the locks they take::

    loop thread (put/get/read)   -> store lock (short: pwrite/pread only)
    flush thread                 -> store lock to snapshot offsets and dup fds; fsync OFF the lock;
                                    checkpoint lock to write the checkpoint
    retention thread / caller    -> store lock per deleted segment
    truncate/restart_commit_log  -> checkpoint lock, then store lock (that order, always)

Contracts: put/get never block on fsync. A put's ``PutResult.durable`` future (see ``store.durability``)
and ``wait_for_flush`` futures are resolved on the flush thread (use ``asyncio.wrap_future``). Arrival
listeners run on the thread that dispatched (the loop thread for puts, the replication thread for
``append_commit_log``) and must not block.
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import threading
from collections.abc import Callable, Sequence

from broker_store.clock import SYSTEM_CLOCK, Clock, StopSignal
from broker_store.protocol.errors import ConfigError, ProtocolError, StoreError
from broker_store.protocol.message import (
    MAX_PROPERTIES_LENGTH,
    STORED_HEADER_SIZE,
    host_to_bytes,
    msg_id_prefix,
    msg_ids_from_prefix,
    validate_topic,
)
from broker_store.protocol.properties import PROPERTY_WAIT, any_has_property, property_entry
from broker_store.store.checkpoint import load_checkpoint
from broker_store.store.commit_log import CommitLog
from broker_store.store.config import FlushMode, StoreConfig
from broker_store.store.consume_queue import CQ_ENTRY
from broker_store.store.consume_queues import MAX_QUEUE_ID, ConsumeQueueTable
from broker_store.store.delay_levels import DEFAULT_DELAY_LEVELS, SCHEDULE_TOPIC, DelayLevels, schedule_tags_code
from broker_store.store.disk_space import DiskFullSpell, is_disk_full
from broker_store.store.dispatch import Arrival, Dispatcher
from broker_store.store.durability import DurabilityPolicy
from broker_store.store.files import FdPool
from broker_store.store.flush import FlushService, SyncFlushStep
from broker_store.store.reads import QueueReader
from broker_store.store.record_encoding import RECORD_MIDDLE, encode_record, encode_records
from broker_store.store.recovery import recover
from broker_store.store.replica_log import ReplicaCommitLog
from broker_store.store.results import GetResult, PutResult, PutStatus, QueueEntry, resolved
from broker_store.store.retention import Retention
from broker_store.store.warmer import PageCacheWarmer

log = logging.getLogger(__name__)

COMMIT_LOG_DIR = "commitlog"
CONSUME_QUEUE_DIR = "consumequeue"
_WAIT_FALSE = property_entry(PROPERTY_WAIT, "false")

ArrivalListener = Callable[[str, int, int], None]
PutEntry = tuple[bytes | memoryview, bytes, int, int]
"""(body, properties, flag, tags_code) of one message to put."""


class MessageStore:
    """A RocketMQ-style message store rooted at ``config.store_dir``. ``clock`` stamps stored messages and
    checkpoints, judges retention and drives the flush deadlines and every store thread's timer.
    ``delay_levels`` gives the tags code of SCHEDULE_TOPIC entries (their delivery time, ``store.delay_levels``)
    for puts and for entries rebuilt from the CommitLog alike. ``hold_confirm_offset`` (controller mode): the
    confirm offset is held where ``set_confirm_offset``/``advance_confirm_offset`` put it, persisted, and records
    past it stay invisible; otherwise it follows the max offset (``store.dispatch``)."""

    def __init__(self, config: StoreConfig, *, store_host: str, clock: Clock = SYSTEM_CLOCK,
                 delay_levels: DelayLevels = DEFAULT_DELAY_LEVELS, hold_confirm_offset: bool = False) -> None:
        try:
            ip, port = host_to_bytes(store_host)
        except ProtocolError as exc:
            raise ConfigError(f"MessageStore store_host: {exc}") from exc
        self.config = config
        self._clock = clock
        self._store_host = (ip, port)
        self._msg_id_prefix = msg_id_prefix(ip, port)
        self._pool = FdPool(max(config.max_open_files - 1, 1))
        self._commit_log = CommitLog(config.store_dir / COMMIT_LOG_DIR, config.commit_log_segment_size,
                                     self._pool, delay_levels)
        self.delay_levels = delay_levels
        self._queues = ConsumeQueueTable(config.store_dir / CONSUME_QUEUE_DIR,
                                         config.consume_queue_segment_entries, self._pool)
        self._dispatch = Dispatcher(self._commit_log, self._queues, hold_confirm_offset=hold_confirm_offset,
                                    read_uncommitted=config.read_uncommitted)
        self._listeners: list[ArrivalListener] = []
        self._write_listeners: list[Callable[[], None]] = []
        self._lock = threading.Lock()
        self._flush = FlushService(config.store_dir, self._commit_log, self._queues, self._pool, self._lock,
                                   interval_ms=config.flush_interval_ms, timeout_ms=config.flush_timeout_ms,
                                   clock=clock, confirm_offset=lambda: self._dispatch.confirm_offset)
        self._reader = QueueReader(self._commit_log, self._queues, self._lock)
        self._retention = Retention(config, self._commit_log, self._queues, self._lock, clock)
        self._replica_log = ReplicaCommitLog(self._commit_log, self._queues, self._dispatch, self._flush, self._lock,
                                             self._notify)
        self._running = False
        self._started = False
        self._writable = True
        self._disk = DiskFullSpell(str(config.store_dir))
        """Whether puts fail for lack of space (``store.disk_space``); guarded by the store lock."""
        self._stop = StopSignal(clock)
        self._threads: list[threading.Thread] = []
        self._topic_bytes: dict[str, bytes] = {}
        self._hosts: dict[str, tuple[bytes, int]] = {}
        self.durability = DurabilityPolicy([SyncFlushStep(self._flush)]
                                           if config.flush_mode is FlushMode.SYNC_FLUSH else [])
        """What ``PutResult.durable`` waits for; replication appends its replica-ack step."""

    # -- lifecycle -----------------------------------------------------------------------------------

    def start(self) -> None:
        """Recover from whatever is on disk, make it durable, then start the flush/retention threads."""
        if self._started:
            raise StoreError("MessageStore.start() called twice")
        self._started = True
        try:
            os.makedirs(self.config.store_dir / CONSUME_QUEUE_DIR, exist_ok=True)
            with self._lock:
                checkpoint = load_checkpoint(self.config.store_dir)
                limit = self._dispatch.recovery_limit(checkpoint)
                recovered = recover(self.config.store_dir, self._commit_log, self._queues, checkpoint,
                                    dispatch_limit=limit)
                self._flush.recovered(recovered.flushed)
                self._reader.trust(recovered.verified_from, recovered.damaged)
                self._dispatch.recovered(checkpoint)
            self._flush.flush_queues_and_checkpoint()
        except OSError as exc:
            raise StoreError(f"cannot open the store in {self.config.store_dir}: {exc}") from exc
        self._running = True
        self._flush.open()
        self._threads = [threading.Thread(target=self._flush.run, name="store-flush", daemon=True)]
        if self.config.retention_interval_ms > 0:
            self._threads.append(threading.Thread(target=self._retention.run, args=(self._stop,),
                                                  name="store-retention", daemon=True))
        if self.config.commit_log_warm_ahead > 0 and hasattr(os, "posix_fadvise"):
            warmer = PageCacheWarmer(self._commit_log, self.config.commit_log_warm_ahead, self._stop)
            self._threads.append(threading.Thread(target=warmer.run, name="store-warm", daemon=True))
        for thread in self._threads:
            thread.start()

    def shutdown(self) -> None:
        """Stop accepting puts, flush everything, write the checkpoint, close descriptors. Idempotent."""
        if not self._running:
            return
        self._running = False
        self._flush.close()
        self._stop_threads()
        try:
            self._flush.flush_queues_and_checkpoint()
        except OSError:
            log.exception("final flush of %s failed; recovery will scan from the last checkpoint",
                          self.config.store_dir)
        self._flush.resolve_waiters(self._flush.flushed, expire_all=True)
        self._close_files()

    def _stop_threads(self) -> None:
        self._stop.stop()
        self._flush.stop()
        for thread in self._threads:
            thread.join()
        self._threads = []

    def _close_files(self) -> None:
        with self._lock:
            self._commit_log.close()
            self._pool.close_all()

    # -- put -----------------------------------------------------------------------------------------

    def put_message(self, topic: str, queue_id: int, body: bytes, properties: bytes, *, tags_code: int,
                    flag: int = 0, sys_flag: int = 0, born_timestamp: int, born_host: str,
                    reconsume_times: int = 0) -> PutResult:
        """Append one message; see ``put_messages``."""
        return self._put(topic, queue_id, ((body, properties, flag, tags_code),), sys_flag, born_timestamp,
                         born_host, reconsume_times)

    def put_messages(self, topic: str, queue_id: int, entries: Sequence[PutEntry], *,
                     sys_flag: int = 0, born_timestamp: int, born_host: str) -> PutResult:
        """Append (body, properties, flag, tags_code) entries as one contiguous write, all or nothing.

        The messages get consecutive queue offsets starting at ``PutResult.queue_offset``. Returns
        without waiting for fsync: ``PutResult.durable`` completes once the put is durable under
        ``self.durability`` (no wait when a message's WAIT property is ``false``).
        """
        return self._put(topic, queue_id, entries, sys_flag, born_timestamp, born_host, 0)

    def _failed(self, status: PutStatus, remark: str) -> PutResult:
        return PutResult(status, remark, durable=resolved(status))

    def _put(self, topic: str, queue_id: int, entries: Sequence[PutEntry], sys_flag: int,
             born_timestamp: int, born_host: str, reconsume_times: int) -> PutResult:
        if not self._running or not self._writable:
            return self._failed(PutStatus.SERVICE_NOT_AVAILABLE,
                                 "the message store is not running" if self._writable
                                 else "the message store is read-only after an I/O error")
        # the caches hold what a put stores of its topic (TOPICLEN + topic) and born host; a miss validates
        topic_tail = self._topic_bytes.get(topic) or self._new_topic(topic)
        born = self._hosts.get(born_host) or self._new_born_host(born_host)
        if isinstance(topic_tail, PutResult):
            return topic_tail
        if not 0 <= queue_id <= MAX_QUEUE_ID:
            return self._failed(PutStatus.MESSAGE_ILLEGAL, f"queue id {queue_id} is out of range")
        if isinstance(born, PutResult):
            return born
        if not entries:
            return self._failed(PutStatus.MESSAGE_ILLEGAL, "no messages to put")
        bodies, props_list, flags, tags_codes = zip(*entries, strict=True)
        body_lens = list(map(len, bodies))
        props_lens = list(map(len, props_list))
        fixed = STORED_HEADER_SIZE + 2 + len(topic_tail)
        total = fixed * len(entries) + sum(body_lens) + sum(props_lens)
        if max(body_lens) > self.config.max_message_size or max(props_lens) > MAX_PROPERTIES_LENGTH \
                or total > self.config.commit_log_segment_size:
            return self._size_refusal(entries, total)
        durability = self.durability
        wait = not _says_no_wait(props_list)
        if not durability.admits_all:
            refusal = durability.admit(self._commit_log.max_offset, wait)
            if refusal is not None:
                return self._failed(*refusal)
        store_ts = int(self._clock.time() * 1000)
        if topic == SCHEDULE_TOPIC:  # the entry's tags code is its delivery time (store.delay_levels)
            levels = self.delay_levels
            entries = [(body, props, flag, schedule_tags_code(props, store_ts, levels))
                       for body, props, flag, _ in entries]
            tags_codes = tuple(entry[3] for entry in entries)

        with self._lock:
            if not self._running or not self._writable:
                return self._failed(PutStatus.SERVICE_NOT_AVAILABLE, "the message store is not running")
            cl = self._commit_log
            # a held confirm offset below the new records: write them now, index them once confirmed
            cq = self._queues.get_or_create(topic, queue_id) if self._dispatch.inline else None
            try:
                if total > cl.room_at_max():
                    cl.roll()
                wrote = cl.max_offset
                queue_offset = self._dispatch.next_queue_offset((topic, queue_id)) if cq is None else cq.max_index
                if len(entries) == 1:  # the single send: no lists to build
                    body, props, flag, tags_code = entries[0]
                    records = encode_record(body, props, topic_tail, total, queue_id, flag, queue_offset, wrote,
                                            sys_flag, born_timestamp, born, store_ts, self._store_host,
                                            reconsume_times)
                    offsets: Sequence[int] = (wrote,)
                    cq_entries = CQ_ENTRY.pack(wrote, total, tags_code) if cq is not None else b""
                else:
                    store_ip, store_port = self._store_host
                    middle = RECORD_MIDDLE.pack(sys_flag, born_timestamp, born[0], born[1], store_ts,
                                                store_ip, store_port, reconsume_times, 0)
                    records, offsets, cq_entries = encode_records(
                        bodies, props_list, flags, tags_codes, body_lens, props_lens, fixed, topic_tail,
                        middle, queue_id, queue_offset, wrote)
                cl.write(wrote, records)
                if cq is not None:
                    cq.append(queue_offset, cq_entries)
            except OSError as exc:
                if is_disk_full(exc):  # nothing damaged: the next put tries again (store.disk_space)
                    remark, began = self._disk.write_failed(exc, self._clock.monotonic())
                    if began:
                        log.error("%s", remark)
                    return self._failed(PutStatus.SERVICE_NOT_AVAILABLE, remark)
                self._writable = False
                log.exception("write to %s failed; the store is now read-only", self.config.store_dir)
                return self._failed(PutStatus.UNKNOWN_ERROR, f"store write failed: {exc}")
            if self._disk.since is not None:
                ended = self._disk.write_succeeded(self._clock.monotonic())
                if ended is not None:
                    log.warning("disk space is back in %s: writes resumed after %.1f s, %d sends refused meanwhile",
                                self.config.store_dir, *ended)
            if cq is None:
                self._dispatch.put_written((topic, queue_id), queue_offset + len(entries))
            else:
                self._queues.put_indexed(cq, cl.max_offset)
                new_max = cq.max_index
        if self._listeners and cq is not None:
            self._notify([(topic, queue_id, new_max)])
        elif cq is None:
            for write_listener in self._write_listeners:
                write_listener()
        ids = msg_ids_from_prefix(self._msg_id_prefix, offsets)
        end = wrote + total
        if not durability.steps:  # nothing to wait for: PutResult's default, an already resolved PUT_OK
            return PutResult(PutStatus.PUT_OK, "", ids, queue_offset, len(entries), wrote, end)
        return PutResult(PutStatus.PUT_OK, "", ids, queue_offset, len(entries), wrote, end,
                         durability.durable(end, wait))

    def _new_topic(self, topic: str) -> bytes | PutResult:
        """A put's topic missing from the cache: its stored TOPICLEN + topic (cached), or the refusal."""
        try:
            validate_topic(topic)
        except ProtocolError as exc:
            return self._failed(PutStatus.MESSAGE_ILLEGAL, str(exc))
        topic_raw = topic.encode()
        if len(self._topic_bytes) > 65536:
            self._topic_bytes.clear()
        tail = self._topic_bytes[topic] = bytes((len(topic_raw),)) + topic_raw
        return tail

    def _new_born_host(self, born_host: str) -> tuple[bytes, int] | PutResult:
        """A put's born host missing from the cache: its stored (ip, port) (cached), or the refusal."""
        try:
            born = host_to_bytes(born_host)
        except ProtocolError as exc:
            return self._failed(PutStatus.MESSAGE_ILLEGAL, f"born host: {exc}")
        if len(self._hosts) > 4096:
            self._hosts.clear()
        self._hosts[born_host] = born
        return born

    def _size_refusal(self, entries: Sequence[PutEntry], total: int) -> PutResult:
        """The error for the first entry whose body or properties are too long (in entry order), else for
        records that together exceed a CommitLog segment."""
        max_body = self.config.max_message_size
        for body, props, _, _ in entries:
            if len(body) > max_body:
                return self._failed(PutStatus.MESSAGE_ILLEGAL,
                                     f"message body size {len(body)} exceeds the limit {max_body}")
            if len(props) > MAX_PROPERTIES_LENGTH:
                return self._failed(PutStatus.PROPERTIES_SIZE_EXCEEDED,
                                     f"message properties size {len(props)} exceeds the limit "
                                     f"{MAX_PROPERTIES_LENGTH}")
        seg_size = self.config.commit_log_segment_size
        return self._failed(PutStatus.MESSAGE_ILLEGAL,
                            f"MESSAGE_SIZE_EXCEEDED: {len(entries)} record(s) of {total} bytes exceed "
                            f"the commit log segment size {seg_size}")

    def _notify(self, arrived: list[Arrival]) -> None:
        for topic, queue_id, max_offset in arrived:
            for listener in self._listeners:
                try:
                    listener(topic, queue_id, max_offset)
                except Exception:
                    log.exception("arrival listener %r failed", listener)

    def add_write_listener(self, cb: Callable[[], None]) -> None:
        """``cb()`` after a put wrote records past a held confirm offset without indexing them (so no arrival
        listener ran): the controller-mode primary ships them and moves the confirm offset. Runs on the putting
        thread; must not block."""
        self._write_listeners.append(cb)

    def add_arrival_listener(self, cb: ArrivalListener) -> None:
        """``cb(topic, queue_id, new_max_offset)`` after each dispatch; runs on the dispatching thread."""
        self._listeners.append(cb)

    # -- flush ---------------------------------------------------------------------------------------

    def wait_for_flush(self, end_offset: int) -> concurrent.futures.Future[bool]:
        """A future resolved True once the CommitLog is fsynced up to ``end_offset``.

        Resolved False after ``flush_timeout_ms``, on truncation below ``end_offset`` and at shutdown.
        All waiters pending when the flush thread wakes share one fsync (group commit).
        """
        return self._flush.wait_flushed(end_offset, True, False)

    # -- get -----------------------------------------------------------------------------------------

    def get_messages(self, topic: str, queue_id: int, offset: int, max_count: int, *,
                     tags_codes: frozenset[int] | None = None, max_bytes: int = 4 * 1024 * 1024) -> GetResult:
        """Up to ``max_count`` records from queue ``offset``, as DefaultMessageStore.getMessage.

        Entries whose tags code is not in ``tags_codes`` are skipped (``None`` = no filter). Scanning stops
        at the end of a ConsumeQueue segment, after max(16000, 20 * max_count) entries, at ``max_count``
        records, or before exceeding ``max_bytes`` (the first record is always returned).
        """
        return self._reader.get_messages(topic, queue_id, offset, max_count, tags_codes=tags_codes,
                                         max_bytes=max_bytes)

    def get_queue_entries(self, topic: str, queue_id: int, offset: int, max_count: int) -> list[QueueEntry]:
        """Up to ``max_count`` ConsumeQueue entries from ``offset`` (the schedule service's read); see
        ``QueueReader.get_queue_entries``."""
        return self._reader.get_queue_entries(topic, queue_id, offset, max_count)

    def get_max_offset(self, topic: str, queue_id: int) -> int:
        """Next queue offset to be written (0 for an unknown queue)."""
        cq = self._queues.get(topic, queue_id)
        return 0 if cq is None else cq.max_index

    def get_min_offset(self, topic: str, queue_id: int) -> int:
        """First queue offset whose message still exists (0 for an unknown queue)."""
        cq = self._queues.get(topic, queue_id)
        return 0 if cq is None else cq.min_index

    def get_store_timestamp(self, topic: str, queue_id: int, offset: int) -> int | None:
        """STORETIMESTAMP of the message at queue ``offset``, None if it does not exist (any more)."""
        return self._reader.get_store_timestamp(topic, queue_id, offset)

    def search_offset_by_timestamp(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """First queue offset whose store timestamp >= ``timestamp_ms``; the max offset if none."""
        return self._reader.search_offset_by_timestamp(topic, queue_id, timestamp_ms)

    def read_record(self, physical_offset: int) -> bytes | None:
        """The whole stored record at ``physical_offset``, or None if there is no record there."""
        return self._reader.read_record(physical_offset)

    def queues(self) -> dict[str, list[int]]:
        """topic -> ids of the queues present, ascending."""
        with self._lock:
            keys = list(self._queues.queues)
        out: dict[str, list[int]] = {}
        for topic, queue_id in sorted(keys):
            out.setdefault(topic, []).append(queue_id)
        return out

    # -- replication support -------------------------------------------------------------------------

    @property
    def min_physical_offset(self) -> int:
        return self._commit_log.min_offset

    @property
    def max_physical_offset(self) -> int:
        return self._commit_log.max_offset

    @property
    def flushed_physical_offset(self) -> int:
        return self._flush.flushed

    @property
    def disk_full(self) -> bool:
        """Puts are refused for lack of space (``store.disk_space``) until one fits again."""
        return self._disk.full

    @property
    def disk_full_refused(self) -> int:
        """Puts refused in the current disk-full spell (0 outside one)."""
        return self._disk.refused

    @property
    def writable(self) -> bool:
        """False once a write failed for another reason than space: the store is read-only until restarted."""
        return self._writable

    @property
    def dispatched_physical_offset(self) -> int:
        """CommitLog offset below which every record is indexed (a replica may hold a partial tail)."""
        return self._queues.dispatched

    def read_commit_log(self, offset: int, max_bytes: int) -> bytes:
        """Raw CommitLog bytes from ``offset`` (``ReplicaCommitLog.read``)."""
        return self._replica_log.read(offset, max_bytes)

    def append_commit_log(self, offset: int, data: bytes) -> None:
        """Replica side: write raw bytes at exactly the max offset, then index every complete record
        (``ReplicaCommitLog.append``)."""
        self._replica_log.append(offset, data)

    def write_commit_log(self, offset: int, data: bytes) -> None:
        """Replica side: ``append_commit_log`` without the indexing (``ReplicaCommitLog.write``)."""
        self._replica_log.write(offset, data)

    def index_commit_log(self) -> None:
        """Replica side: index every complete record written so far, up to the confirm offset (ConsumeQueues,
        arrival listeners)."""
        self._replica_log.index()

    def truncate_commit_log(self, offset: int) -> None:
        """Drop every record at or past ``offset`` (a record boundary) and their ConsumeQueue entries, in the
        crash-safe order of ``ReplicaCommitLog.truncate``."""
        self._replica_log.truncate(offset)

    def restart_commit_log(self, offset: int) -> None:
        """Replica side: drop the whole log and continue, empty, at ``offset`` (``ReplicaCommitLog.restart``)."""
        self._replica_log.restart(offset)

    # -- confirm offset (controller mode) ---------------------------------------------------------------

    @property
    def confirm_offset(self) -> int:
        """CommitLog offset below which records may be served: the max offset unless held (``store.dispatch``)."""
        return self._dispatch.confirm_offset

    def advance_confirm_offset(self, offset: int) -> None:
        """Raise a held confirm offset to ``offset`` (clamped to the max offset) and index the records it
        confirms; never lowers it; no effect while it follows the max offset. For the HA primary (the min ack
        of its SyncStateSet) and a replica (the confirm offset its primary sends, set after writing the batch
        that carried it). Persisted by the next periodic checkpoint. Runs the arrival listeners."""
        with self._lock:
            if not self._dispatch.advance(offset):
                return
            arrived = self._replica_log.index_locked()
        if self._listeners and arrived:
            self._notify(arrived)

    def set_confirm_offset(self, offset: int | None) -> None:
        """Hold the confirm offset at ``offset`` (clamped to the max offset), or let it follow the max offset
        (None); index what that allows and write the checkpoint before returning (fsyncs: call it off the
        event loop where that matters). For role changes: a fenced primary holds, a promotion confirms its
        max offset. StoreError below the indexed offset (only ``truncate_commit_log`` takes entries back)."""
        with self._lock:
            self._dispatch.set(offset)
            arrived = self._replica_log.index_locked()
        if self._listeners and arrived:
            self._notify(arrived)
        try:
            self._flush.flush_queues_and_checkpoint()
        except OSError as exc:
            raise StoreError(f"writing the checkpoint of {self.config.store_dir} failed: {exc}") from exc

    # -- retention -----------------------------------------------------------------------------------

    def delete_expired(self, now_ms: int | None = None) -> int:
        """Delete CommitLog segments past their reserve time or beyond the size cap, oldest first.

        Never the active segment. Then ConsumeQueue segments that only point below the new CommitLog
        min offset go, and every queue's min offset moves up. Returns bytes freed.
        """
        return self._retention.delete_expired(now_ms)


def _says_no_wait(props_list: Sequence[bytes]) -> bool:
    """Whether any message of a put carries WAIT=false (RocketMQ: isWaitStoreMsgOK false, answer at once)."""
    return any_has_property(props_list, _WAIT_FALSE)

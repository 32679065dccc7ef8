"""QueueReader: the store's read side: pulls through a ConsumeQueue, store timestamps, single records.

Owned by ``MessageStore``, which delegates its read API here; called on the loop thread by the pull
and offset processors. Every read holds the store lock for its preads only.
"""

from __future__ import annotations

import logging
import struct
import threading

from broker_store.protocol.errors import StoreError
from broker_store.protocol.message import MAGIC_V1, MIN_RECORD_SIZE, STORED_HEADER_SIZE, stored_header_view
from broker_store.store.commit_log import CommitLog
from broker_store.store.consume_queue import CQ_ENTRY, CQ_ENTRY_SIZE, ConsumeQueue
from broker_store.store.consume_queues import ConsumeQueueTable
from broker_store.store.record_check import record_problem
from broker_store.store.results import GetResult, GetStatus, QueueEntry

log = logging.getLogger(__name__)
_RECORD_START = stored_header_view("TOTALSIZE", "MAGICCODE", "PHYSICALOFFSET")

_STORE_TIMESTAMP_AT = 56  # byte offset of STORETIMESTAMP in a stored record (see protocol.message)
_I64 = struct.Struct(">q")
_READ_GAP = 16 * 1024  # records this close together are fetched with one pread
_REPORTED_LIMIT = 1024  # damaged offsets logged once each, this many remembered


class QueueReader:
    """Reads of one store; ``commit_log`` and ``queues`` are the store's, ``lock`` the store lock."""

    def __init__(self, commit_log: CommitLog, queues: ConsumeQueueTable, lock: threading.Lock) -> None:
        self._commit_log = commit_log
        self._queues = queues.queues
        self._lock = lock
        self._reported: set[int] = set()
        """CommitLog offsets of damaged records already logged (a stuck consumer pulls the same one again)."""
        self._trusted_from = 0
        """Records from this offset on were checked at start or written since (``trust``): not checked again."""
        self._damaged: frozenset[int] = frozenset()
        """Damaged records recovery found and kept (checked, so below ``_trusted_from`` or not: refused)."""

    def trust(self, verified_from: int, damaged: frozenset[int]) -> None:
        """At start, after recovery: the records from ``verified_from`` on were checked (or are new), except the
        ``damaged`` ones. Reads check only the others: checking every record served costs ~70% of pull throughput,
        and records this process checked or wrote are the ones consumers mostly read."""
        self._trusted_from = verified_from
        self._damaged = damaged

    def get_messages(self, topic: str, queue_id: int, offset: int, max_count: int, *,
                     tags_codes: frozenset[int] | None = None, max_bytes: int = 4 * 1024 * 1024) -> GetResult:
        """Up to ``max_count`` records from queue ``offset``, as DefaultMessageStore.getMessage.

        Entries whose tags code is not in ``tags_codes`` are skipped (``None`` = no filter). Scanning stops
        at the end of a ConsumeQueue segment, after max(16000, 20 * max_count) entries, at ``max_count``
        records, or before exceeding ``max_bytes`` (the first record is always returned).
        """
        with self._lock:
            cq = self._queues.get((topic, queue_id))
            if cq is None:
                return GetResult(GetStatus.NO_MATCHED_LOGIC_QUEUE, 0, 0, 0)
            min_offset, max_offset = cq.min_index, cq.max_index
            if max_offset == 0:
                return GetResult(GetStatus.NO_MESSAGE_IN_QUEUE, 0, 0, 0)
            if offset < min_offset:
                return GetResult(GetStatus.OFFSET_TOO_SMALL, min_offset, min_offset, max_offset)
            if offset == max_offset:
                return GetResult(GetStatus.OFFSET_OVERFLOW_ONE, offset, min_offset, max_offset)
            if offset > max_offset:
                return GetResult(GetStatus.OFFSET_OVERFLOW_BADLY,
                                 min_offset if min_offset == 0 else max_offset, min_offset, max_offset)
            return self._read_queue(cq, offset, max(max_count, 1), tags_codes, max_bytes, min_offset,
                                    max_offset)

    def _read_queue(self, cq: ConsumeQueue, offset: int, max_count: int, tags_codes: frozenset[int] | None,
                    max_bytes: int, min_offset: int, max_offset: int) -> GetResult:
        cl = self._commit_log
        cl_min, cl_max = cl.min_offset, cl.max_offset
        max_scan = max(16000, max_count * 20)
        chunk = max_count if tags_codes is None else min(max_scan, max(max_count * 4, 256))
        status = GetStatus.NO_MATCHED_MESSAGE
        plan: list[tuple[int, int, int]] = []  # (physical offset, size, queue offset)
        total_bytes = 0
        scanned = 0
        last_phys = -1
        full = False
        while not full and scanned < max_scan:
            want = min(chunk, max_scan - scanned)
            raw = cq.read(offset + scanned, want)
            if not raw:
                if scanned == 0:
                    seg_end = offset - offset % cq.seg_entries + cq.seg_entries
                    return GetResult(GetStatus.OFFSET_FOUND_NULL, min(seg_end, max_offset), min_offset,
                                     max_offset)
                break
            for phys, size, tags_code in CQ_ENTRY.iter_unpack(raw):
                n = len(plan)
                if n >= max_count or (n and total_bytes + size > max_bytes):
                    full = True
                    break
                if phys + size > cl_max:
                    full = True
                    break
                scanned += 1
                last_phys = phys
                if size <= 0 or (tags_codes is not None and tags_code not in tags_codes):
                    continue
                if phys < cl_min:
                    if not plan:
                        status = GetStatus.MESSAGE_WAS_REMOVING
                    continue
                plan.append((phys, size, offset + scanned - 1))
                total_bytes += size
            if len(raw) < want * CQ_ENTRY_SIZE:
                break  # end of a ConsumeQueue segment or of the queue
        body = self._read_records(plan) if plan else b""
        next_offset = offset + scanned
        if plan:
            kept, problem = (self._check_records(body, plan) if plan[0][0] < self._trusted_from or self._damaged
                             else (len(plan), None))
            if problem is not None:  # serve the intact records before the damaged one, never the damaged one
                next_offset = plan[kept][2]
                if not kept:
                    return GetResult(GetStatus.MESSAGE_DAMAGED, next_offset, min_offset, max_offset, remark=problem)
                body = body[:sum(size for _, size, _ in plan[:kept])]
                del plan[kept:]
            status = GetStatus.FOUND
            last_phys = plan[-1][0]
        return GetResult(status, next_offset, min_offset, max_offset, body=body, count=len(plan),
                         max_physical_offset_lag=cl_max - last_phys if last_phys >= 0 else 0)

    def _check_records(self, body: bytes, plan: list[tuple[int, int, int]]) -> tuple[int, str | None]:
        """(how many records of ``body`` are intact before the first damaged one, what is wrong with that one)."""
        view = memoryview(body)
        pos = 0
        for k, (phys, size, _) in enumerate(plan):
            problem = record_problem(view[pos:pos + size], phys, size)
            if problem is not None:
                return k, self._report_damage(phys, problem)
            pos += size
        return len(plan), None

    def _report_damage(self, phys: int, problem: str) -> str:
        """The remark for the damaged record at ``phys``, logged the first time it is met."""
        cl = self._commit_log
        where = f"{cl.path(phys - phys % cl.segment_size)} at offset {phys} (byte {phys % cl.segment_size})"
        remark = f"damaged record in commit log segment {where}: {problem}; not served"
        if phys not in self._reported:
            if len(self._reported) >= _REPORTED_LIMIT:
                self._reported.clear()
            self._reported.add(phys)
            log.error("%s", remark)
        return remark

    def _read_records(self, plan: list[tuple[int, int, int]]) -> bytes:
        """One pread per run of nearby records in one segment; the records concatenated in plan order."""
        cl = self._commit_log
        seg_size = cl.segment_size
        parts: list[bytes | memoryview] = []
        i, n = 0, len(plan)
        while i < n:
            a, size, _ = plan[i]
            seg_end = a - a % seg_size + seg_size
            b = a + size
            gapless = True
            j = i + 1
            while j < n:
                o, s, _ = plan[j]
                if o < b or o - b > _READ_GAP or o + s > seg_end:
                    break
                if o != b:
                    gapless = False
                b = o + s
                j += 1
            data = cl.read(a, b - a)
            if len(data) < b - a:
                raise StoreError(f"commit log read at {a} returned {len(data)} of {b - a} bytes")
            if gapless:
                parts.append(data)
            else:
                view = memoryview(data)
                for k in range(i, j):
                    o, s, _ = plan[k]
                    parts.append(view[o - a:o - a + s])
            i = j
        return parts[0] if len(parts) == 1 and isinstance(parts[0], bytes) else b"".join(parts)

    def get_max_offset(self, topic: str, queue_id: int) -> int:
        """Next queue offset to be written (0 for an unknown queue)."""
        cq = self._queues.get((topic, queue_id))
        return 0 if cq is None else cq.max_index

    def get_min_offset(self, topic: str, queue_id: int) -> int:
        """First queue offset whose message still exists (0 for an unknown queue)."""
        cq = self._queues.get((topic, queue_id))
        return 0 if cq is None else cq.min_index

    def get_queue_entries(self, topic: str, queue_id: int, offset: int, max_count: int) -> list[QueueEntry]:
        """Up to ``max_count`` ConsumeQueue entries from queue ``offset`` (clipped to [min, max) and to the end of
        the segment ``offset`` is in), holes skipped; [] for an unknown queue."""
        with self._lock:
            cq = self._queues.get((topic, queue_id))
            if cq is None:
                return []
            offset = max(offset, cq.min_index)
            raw = cq.read(offset, max_count)
        return [QueueEntry(offset + i, phys, size, tags_code)
                for i, (phys, size, tags_code) in enumerate(CQ_ENTRY.iter_unpack(raw)) if size > 0]

    def _store_timestamp_locked(self, cq: ConsumeQueue, index: int) -> int | None:
        entry = cq.entry(index)
        if entry is None or entry[0] < self._commit_log.min_offset:
            return None
        raw = self._commit_log.read(entry[0] + _STORE_TIMESTAMP_AT, 8)
        if len(raw) != 8:
            return None
        ts: int = _I64.unpack(raw)[0]
        return ts

    def get_store_timestamp(self, topic: str, queue_id: int, offset: int) -> int | None:
        """STORETIMESTAMP of the message at queue ``offset``, None if it does not exist (any more)."""
        with self._lock:
            cq = self._queues.get((topic, queue_id))
            if cq is None or not cq.min_index <= offset < cq.max_index:
                return None
            return self._store_timestamp_locked(cq, offset)

    def search_offset_by_timestamp(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """First queue offset whose store timestamp >= ``timestamp_ms``; the max offset if none."""
        with self._lock:
            cq = self._queues.get((topic, queue_id))
            if cq is None:
                return 0
            lo, hi = cq.min_index, cq.max_index
            while lo < hi:
                mid = (lo + hi) // 2
                ts = self._store_timestamp_locked(cq, mid)
                if ts is not None and ts >= timestamp_ms:
                    hi = mid
                else:
                    lo = mid + 1
            return lo

    def read_record(self, physical_offset: int) -> bytes | None:
        """The whole stored record at ``physical_offset``, or None if there is no record there."""
        with self._lock:
            cl = self._commit_log
            if not cl.min_offset <= physical_offset < cl.max_offset:
                return None
            head = cl.read(physical_offset, STORED_HEADER_SIZE)
            if len(head) < STORED_HEADER_SIZE:
                return None
            total, magic, phys = _RECORD_START.unpack_from(head)
            if magic != MAGIC_V1 or phys != physical_offset or total < MIN_RECORD_SIZE \
                    or physical_offset + total > cl.max_offset:
                return None
            record = cl.read(physical_offset, total)
            if physical_offset >= self._trusted_from and physical_offset not in self._damaged:
                return record if len(record) == total else None
            problem = record_problem(record, physical_offset)
            if problem is not None:
                self._report_damage(physical_offset, problem)
                return None
            return record

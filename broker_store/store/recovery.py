"""Crash recovery: keep the longest valid prefix of the CommitLog and make the ConsumeQueues agree with it.

Called once by ``MessageStore.start`` under the store lock, before any put or read. It indexes records only
up to the dispatch limit the store's ``Dispatcher`` derives from the checkpoint (a held confirm offset);
records past it are validated and kept, but stay out of the ConsumeQueues.

Damage is reported with the file and the offset, never served, and costs as little as it can:

- past the checkpoint (the bytes a crash may have torn): the scan stops at the first record that fails its
  checks and everything from there is truncated, as RocketMQ's recovery does; the truncated bytes are first
  copied aside, one ``<segment file>.truncated-<offset>`` per segment they were in (``set_aside``), so an
  operator can still look at what was cut;
- below the checkpoint (fsynced, possibly acknowledged and replicated): the last ``VERIFY_BELOW_SCAN_BYTES``
  are verified and each damaged record is logged but kept, as are the intact records after it; truncating
  there would drop acknowledged messages a replica still holds. Reads refuse the damaged record
  (``store.reads``), so it is never served;
- a damaged ConsumeQueue (``ConsumeQueue.load``): the scan starts early enough to rebuild its lost entries;
- a damaged checkpoint (``checkpoint.load_checkpoint``): every segment is scanned.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import NamedTuple

from broker_store.protocol.message import MIN_RECORD_SIZE
from broker_store.store.checkpoint import Checkpoint
from broker_store.store.commit_log import BLANK_RECORD, CommitLog, describe_cut
from broker_store.store.consume_queues import ConsumeQueueTable
from broker_store.store.record_check import record_problem

log = logging.getLogger(__name__)

_SCAN_ALL = 1 << 62
VERIFY_BELOW_SCAN_BYTES = 256 << 20
"""How much of the CommitLog below the scan start is verified at start (whole segments from there): a bounded
share of the start time (benchmarks/MEASUREMENTS.md). RocketMQ checks the last three files; a bound in bytes keeps
the start time independent of the segment size."""


class Recovered(NamedTuple):
    """What recovery found, for the store's flush service and reader."""

    flushed: int
    """The offset known to be on disk (the flushed offset to start from)."""
    verified_from: int
    """Every record from here on was checked (the verification and the scan) or is written by this process."""
    damaged: frozenset[int]
    """Offsets of the damaged records found below the checkpoint and kept (never to be served)."""


def recover(store_dir: Path, cl: CommitLog, queues: ConsumeQueueTable, checkpoint: Checkpoint | None, *,
            dispatch_limit: int | None = None) -> Recovered:
    """Load segments and queues, scan from the checkpoint's safe offset (or the first segment) and truncate
    whatever does not check out. Returns the offset known to be on disk (the flushed offset to start from);
    leaves ``cl.max_offset`` at the end of the valid records and ``queues.dispatched`` there too, or, with a
    ``dispatch_limit``, at the end of the last record ending at or below max(limit, scan start)."""
    cl.load_segments()
    rebuild = queues.load()
    seg_size = cl.segment_size
    for i, start in enumerate(cl.segments):
        if start != cl.segments[0] + i * seg_size:
            for later in list(cl.segments[i:]):
                log.warning("commit log segment %s follows a gap; deleting it", cl.path(later))
                cl.delete_segment(later)
            break
    if cl.segments:
        first = cl.segments[0]
        file_end = cl.segments[-1] + os.path.getsize(cl.path(cl.segments[-1]))
        if checkpoint is not None and first <= checkpoint.safe_offset <= file_end:
            start = checkpoint.safe_offset
        else:
            log.warning("no usable checkpoint in %s; scanning all commit log segments", store_dir)
            start = first
        if rebuild is not None and rebuild < start:
            rebuild = rebuild if rebuild > first and cl.is_record_boundary(rebuild) else first
            log.warning("commit log in %s: indexing again from offset %d to rebuild damaged consume queues",
                        store_dir, rebuild)
            start = rebuild
        verified_from, damaged = verify_below(cl, start)
    else:
        start = verified_from = 0
        damaged = []
    queues.resume_at(start)
    cl.max_offset = start
    limit = _SCAN_ALL if dispatch_limit is None else max(dispatch_limit, start)
    if cl.segments:
        queues.index(cl, limit)
    pos = dispatched = queues.dispatched
    if limit != _SCAN_ALL:  # the rest is validated, not indexed (indexing may have stopped at the limit)
        stopped = not cl.segments
        while not stopped:
            _, pos, stopped = cl.scan(pos, _SCAN_ALL)
    if cl.segments and pos < file_end and cl.read(pos, 8).strip(b"\0"):  # not the zeros past the end
        log.warning("%s; valid records end there: truncating the commit log, %s, copied aside to %s",
                    describe_damage(cl, pos), describe_cut(pos, file_end, "from there on"),
                    ", ".join(set_aside(cl, pos)) or "nothing")
    cl.truncate(pos)
    cl.max_offset = pos
    cl_min = cl.min_offset
    for cq in queues.queues.values():
        cq.delete_segments_below(cl_min)
    log.info("store %s recovered: commit log [%d, %d), %d queues, scanned from %d, indexed to %d",
             store_dir, cl_min, pos, len(queues.queues), start, dispatched)
    return Recovered(start, verified_from, frozenset(damaged))


def describe_damage(cl: CommitLog, pos: int) -> str:
    """"damaged record in <segment file> at offset <pos> (byte <in file>): <what is wrong>"."""
    seg = pos - pos % cl.segment_size
    head = cl.read(pos, BLANK_RECORD.size)
    total = BLANK_RECORD.unpack(head)[0] if len(head) == BLANK_RECORD.size else 0
    room = seg + cl.segment_size - pos
    record = cl.read(pos, total) if MIN_RECORD_SIZE <= total <= room else head
    problem = record_problem(record, pos) or "not where a record may start"
    return f"damaged record in commit log segment {cl.path(seg)} at offset {pos} (byte {pos - seg}): {problem}"


SET_ASIDE_SUFFIX = ".truncated-"
"""``<segment file>.truncated-<offset>``: bytes recovery cut from a segment, from CommitLog offset ``<offset>`` on
(the file's first byte), up to the segment's last non-zero byte. Not segment names: the store ignores them."""
_COPY_CHUNK = 1 << 20


def set_aside(cl: CommitLog, offset: int) -> list[str]:
    """Copy the CommitLog's bytes from ``offset`` to its end into ``SET_ASIDE_SUFFIX`` files beside the segments,
    one per segment holding any (the zeros a segment ends with are left out; a file keeps its holes). Returns
    the files written. A copy that fails (a full disk) is logged and skipped: recovery must go on, and the
    bytes it truncates were never confirmed whole."""
    written: list[str] = []
    seg = offset - offset % cl.segment_size
    for start in [s for s in cl.segments if s >= seg]:
        source = cl.path(start)
        first = max(offset, start)
        aside = f"{source}{SET_ASIDE_SUFFIX}{first}"
        try:
            if _copy_data(source, first - start, aside):
                written.append(aside)
        except OSError as exc:
            log.error("cannot copy the bytes past offset %d of %s aside to %s (%s); truncating them anyway",
                      first, source, aside, exc)
    return written


def _copy_data(source: str, skip: int, target: str) -> bool:
    """Copy ``source`` from byte ``skip`` to its last non-zero byte into ``target`` (holes for zero chunks);
    False, writing nothing, when there is no such byte."""
    end = 0
    fd_in = os.open(source, os.O_RDONLY)
    fd_out: int | None = None
    try:
        pos = skip
        while chunk := os.pread(fd_in, _COPY_CHUNK, pos):
            data = chunk.rstrip(b"\0")
            if data:
                if fd_out is None:
                    fd_out = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                os.pwrite(fd_out, data, pos - skip)
                end = pos - skip + len(data)
            pos += len(chunk)
        if fd_out is not None:
            os.ftruncate(fd_out, end)
            os.fsync(fd_out)
    finally:
        os.close(fd_in)
        if fd_out is not None:
            os.close(fd_out)
    return fd_out is not None


def verify_below(cl: CommitLog, start: int) -> tuple[int, list[int]]:
    """Check the records of the ``VERIFY_BELOW_SCAN_BYTES`` below ``start`` (from a segment start), log each
    damaged one and go on past it (by its TOTALSIZE when that is plausible, else from the next segment).
    Changes nothing; returns (where the verification began, the offsets of the damaged records)."""
    lo = max(cl.min_offset, start - VERIFY_BELOW_SCAN_BYTES)
    pos = lo - lo % cl.segment_size if lo > cl.min_offset else cl.min_offset
    verified_from = pos
    damaged: list[int] = []
    while pos < start:
        _, pos, stopped = cl.scan(pos, start)
        if not stopped or pos >= start:
            continue
        log.error("%s; kept (below the checkpoint), never served", describe_damage(cl, pos))
        damaged.append(pos)
        seg_end = pos - pos % cl.segment_size + cl.segment_size
        head = cl.read(pos, BLANK_RECORD.size)
        total = BLANK_RECORD.unpack(head)[0] if len(head) == BLANK_RECORD.size else 0
        pos = pos + total if MIN_RECORD_SIZE <= total <= seg_end - pos and cl.is_record_boundary(pos + total) \
            else seg_end
    return verified_from, damaged

"""Crash recovery: keep the longest valid prefix of the CommitLog and make the ConsumeQueues agree with it.

Called once by ``MessageStore.start`` under the store lock, before any put or read. It indexes records only
up to the dispatch limit the store's ``Dispatcher`` derives from the checkpoint (a held confirm offset);
records past it are validated and kept, but stay out of the ConsumeQueues.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from broker_store.store.checkpoint import Checkpoint
from broker_store.store.commit_log import CommitLog
from broker_store.store.consume_queues import ConsumeQueueTable

log = logging.getLogger(__name__)

_SCAN_ALL = 1 << 62


def recover(store_dir: Path, cl: CommitLog, queues: ConsumeQueueTable, checkpoint: Checkpoint | None, *,
            dispatch_limit: int | None = None) -> int:
    """Load segments and queues, scan from the checkpoint's safe offset (or the first segment) and truncate
    whatever does not check out. Returns the offset known to be on disk (the flushed offset to start from);
    leaves ``cl.max_offset`` at the end of the valid records and ``queues.dispatched`` there too, or, with a
    ``dispatch_limit``, at the end of the last record ending at or below max(limit, scan start)."""
    cl.load_segments()
    queues.load()
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
    else:
        start = 0
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
        log.warning("commit log in %s: valid records end at %d, truncating %d trailing bytes",
                    store_dir, pos, file_end - pos)
    cl.truncate(pos)
    cl.max_offset = pos
    cl_min = cl.min_offset
    for cq in queues.queues.values():
        cq.delete_segments_below(cl_min)
    log.info("store %s recovered: commit log [%d, %d), %d queues, scanned from %d, indexed to %d",
             store_dir, cl_min, pos, len(queues.queues), start, dispatched)
    return start

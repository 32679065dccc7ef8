"""Planning a micro-batch of the replication reader: how many messages each queue may give
(``distribute_limit``) and the Spark input partitions that read them (``plan_ranges``, ``group_ranges``).

Called on the driver by ``connectors.replication.reader`` (``latestOffset`` and ``partitions``); the
partitions it returns are pickled to executors (``read``) or, with ``rowFormat=ranges``, become the rows
the writer pulls. Pure functions over offsets: testable without Spark or a broker.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pyspark.sql.datasource import InputPartition

from connectors.core.offsets import QueueKey, SourceOffset


def distribute_limit(backlog: Mapping[QueueKey, int], max_rows: int) -> dict[QueueKey, int]:
    """Split ``max_rows`` over queues in proportion to their backlog, never exceeding either.

    Largest-remainder apportionment: each queue gets floor(max_rows * backlog / total), then the
    leftover rows go one each to the largest fractional parts (ties: larger backlog, then queue key),
    capped at the queue's backlog. The sum is min(max_rows, total backlog) exactly.
    """
    if max_rows < 0:
        raise ValueError(f"max_rows must be >= 0, got {max_rows}")
    positive = {q: n for q, n in backlog.items() if n > 0}
    total = sum(positive.values())
    if total <= max_rows:
        return dict(positive)
    shares = {q: divmod(max_rows * n, total) for q, n in positive.items()}
    alloc = {q: whole for q, (whole, _) in shares.items()}
    left = max_rows - sum(alloc.values())
    order = sorted(positive, key=lambda q: (-shares[q][1], -positive[q], q.to_key()))
    for q in order:
        if left == 0:
            break
        if alloc[q] < positive[q]:
            alloc[q] += 1
            left -= 1
    return {q: n for q, n in alloc.items() if n > 0}


@dataclass(frozen=True)
class QueueRange(InputPartition):
    """One Spark input partition: source queue offsets ``[start, end)``. Plain picklable data.

    ``from_earliest``: the queue was discovered while running (absent from the batch's start
    offset), so offsets below its min offset were never promised and are skipped silently.
    """

    topic: str
    broker_name: str
    queue_id: int
    start: int
    end: int
    from_earliest: bool = False

    @property
    def queue(self) -> QueueKey:
        return QueueKey(self.topic, self.broker_name, self.queue_id)

    @property
    def size(self) -> int:
        return max(0, self.end - self.start)


def plan_ranges(start: SourceOffset, end: SourceOffset, min_partitions: int | None = None) -> list[QueueRange]:
    """The batch's partitions: one range per queue that moved, split into more when fewer than
    ``min_partitions`` (largest ranges split first, in proportion to their size). Deterministic."""
    ranges: list[QueueRange] = []
    for queue, end_offset in end.queues.items():
        begin = start.get(queue)
        new = begin is None
        begin = 0 if begin is None else begin
        if end_offset > begin:
            ranges.append(QueueRange(queue.topic, queue.broker_name, queue.queue_id, begin, end_offset, new))
    if not min_partitions or len(ranges) >= min_partitions:
        return ranges
    total = sum(r.size for r in ranges)
    split: list[QueueRange] = []
    for r in ranges:
        pieces = max(1, min(r.size, math.ceil(min_partitions * r.size / total)))
        step = r.size / pieces
        bounds = [r.start + round(step * i) for i in range(pieces)] + [r.end]
        for lo, hi in zip(bounds, bounds[1:], strict=False):
            if hi > lo:
                split.append(QueueRange(r.topic, r.broker_name, r.queue_id, lo, hi, r.from_earliest))
    return split


def skip_delivered(ranges: Sequence[QueueRange], delivered: Mapping[QueueKey, int]) -> tuple[list[QueueRange], int]:
    """``ranges`` without what ``delivered`` (queue -> next offset committed to the Delta offsets table) says
    was delivered already: a range wholly below its queue's offset is dropped, one it cuts is started there.
    Returns the ranges left and the number of offsets removed. For a batch Spark replays after a restart
    (committed to Delta, stopped before Spark's own commit): its messages are not sent a second time."""
    kept: list[QueueRange] = []
    removed = 0
    for r in ranges:
        done = delivered.get(r.queue)
        if done is None or done <= r.start:
            kept.append(r)
        elif done < r.end:
            kept.append(QueueRange(r.topic, r.broker_name, r.queue_id, done, r.end, r.from_earliest))
            removed += done - r.start
        else:
            removed += r.size
    return kept, removed


@dataclass(frozen=True)
class QueueRangeGroup(InputPartition):
    """One Spark input partition covering several queue ranges, read one after the other (each in
    offset order). Built by ``group_ranges`` for ``maxPartitions``. Plain picklable data."""

    ranges: tuple[QueueRange, ...]


def group_ranges(ranges: Sequence[QueueRange], max_partitions: int | None) -> list[QueueRange | QueueRangeGroup]:
    """``ranges`` as at most ``max_partitions`` partitions: unchanged when they are few enough, else
    packed largest first into the least loaded group (so groups carry similar message counts). A
    queue's ranges all land in one group, in offset order, so the group reads it in order.
    Deterministic."""
    if not max_partitions or len(ranges) <= max_partitions:
        return list(ranges)
    by_queue: dict[QueueKey, list[QueueRange]] = {}
    for r in ranges:
        by_queue.setdefault(r.queue, []).append(r)
    queues = sorted(by_queue.items(), key=lambda kv: (-sum(r.size for r in kv[1]), kv[0].to_key()))
    groups: list[list[QueueRange]] = [[] for _ in range(min(max_partitions, len(queues)))]
    loads = [0] * len(groups)
    for _queue, queue_ranges in queues:
        i = loads.index(min(loads))
        groups[i].extend(sorted(queue_ranges, key=lambda r: r.start))
        loads[i] += sum(r.size for r in queue_ranges)
    return [QueueRangeGroup(tuple(g)) if len(g) > 1 else g[0] for g in groups if g]

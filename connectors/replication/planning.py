"""Planning a micro-batch of the replication reader: how many messages each queue may give
(``admit``, ``distribute_limit``) and the Spark input partitions that read them (``plan_ranges``, ``group_ranges``).

Called on the driver by ``connectors.replication.reader`` (``latestOffset`` and ``partitions``); the
partitions it returns are pickled to executors (``read``) or, with ``rowFormat=ranges``, become the rows
the writer pulls. Pure functions over offsets: testable without Spark or a broker.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pyspark.sql.datasource import InputPartition

from broker_store.client import MessageQueue
from connectors.core.offsets import SourceOffset, queue_key


def distribute_limit(backlog: Mapping[MessageQueue, int], max_rows: int) -> dict[MessageQueue, int]:
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
    order = sorted(positive, key=lambda q: (-shares[q][1], -positive[q], queue_key(q)))
    for q in order:
        if left == 0:
            break
        if alloc[q] < positive[q]:
            alloc[q] += 1
            left -= 1
    return {q: n for q, n in alloc.items() if n > 0}


@dataclass(frozen=True)
class Admission:
    """What ``admit`` grants one micro-batch: messages per queue, and where the next batch's rotation starts."""

    take: dict[MessageQueue, int]
    next_after: MessageQueue | None
    """The last queue served from the rotation (None: every queue with a backlog got its share)."""


def admit(backlog: Mapping[MessageQueue, int], max_rows: int, min_range: int,
          after: MessageQueue | None = None) -> Admission:
    """Grant at most ``max_rows`` messages over the queues with a backlog, in ranges of at least
    ``min_range`` messages (or the queue's whole backlog when smaller).

    * Everything fits: every queue's whole backlog.
    * The budget gives every queue with a backlog an equal share of at least ``min_range``: each gets
      min(backlog, max_rows // queues), and what is left goes to the remaining backlogs in proportion
      (``distribute_limit``). Every queue advances in every batch.
    * It does not (many queues, a small ``max_messages_per_trigger``): queues are served in a rotation
      by queue key, starting after ``after`` (the previous batch's ``next_after``), each given
      min(backlog, ``min_range``) until the budget is spent (the last one served gets the rest). Each
      pull is then a full one instead of ``queues`` tiny ones per batch (a 25k budget over 512 queues
      is ~49 messages a queue: 512 pulls and 512 sends a batch, each costing a request of fixed overhead
      on both brokers), and a queue waits at most ceil(queues * min_range / max_rows) batches.

    The sum is min(max_rows, total backlog) exactly; no queue gets more than its backlog. Pure.
    """
    if max_rows < 0:
        raise ValueError(f"max_rows must be >= 0, got {max_rows}")
    if min_range < 1:
        raise ValueError(f"min_range must be >= 1, got {min_range}")
    positive = {q: n for q, n in backlog.items() if n > 0}
    if sum(positive.values()) <= max_rows:
        return Admission(dict(positive), None)
    equal = max_rows // len(positive)
    if equal >= min_range:
        shares = {q: min(n, equal) for q, n in positive.items()}
        rest = distribute_limit({q: n - shares[q] for q, n in positive.items()}, max_rows - sum(shares.values()))
        return Admission({q: n + rest.get(q, 0) for q, n in shares.items()}, None)
    order = sorted(positive, key=queue_key)
    if after is not None:
        first = next((i for i, q in enumerate(order) if queue_key(q) > queue_key(after)), 0)
        order = order[first:] + order[:first]
    take: dict[MessageQueue, int] = {}
    left, last = max_rows, None
    for q in order:
        if left == 0:
            break
        take[q] = min(positive[q], min_range, left)
        left -= take[q]
        last = q
    if left:  # every queue served and budget left (a few large backlogs among many small ones): share it out
        rest = distribute_limit({q: n - take[q] for q, n in positive.items()}, left)
        return Admission({q: take[q] + rest.get(q, 0) for q in positive}, None)
    return Admission(take, last)


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
    def queue(self) -> MessageQueue:
        return MessageQueue(self.topic, self.broker_name, self.queue_id)

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


def skip_delivered(ranges: Sequence[QueueRange], delivered: Mapping[MessageQueue, int]) -> tuple[list[QueueRange], int]:
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
    by_queue: dict[MessageQueue, list[QueueRange]] = {}
    for r in ranges:
        by_queue.setdefault(r.queue, []).append(r)
    queues = sorted(by_queue.items(), key=lambda kv: (-sum(r.size for r in kv[1]), queue_key(kv[0])))
    groups: list[list[QueueRange]] = [[] for _ in range(min(max_partitions, len(queues)))]
    loads = [0] * len(groups)
    for _queue, queue_ranges in queues:
        i = loads.index(min(loads))
        groups[i].extend(sorted(queue_ranges, key=lambda r: r.start))
        loads[i] += sum(r.size for r in queue_ranges)
    return [QueueRangeGroup(tuple(g)) if len(g) > 1 else g[0] for g in groups if g]

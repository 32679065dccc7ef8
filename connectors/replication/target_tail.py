"""Reading target queues' tails for the sink's recovery check (the rule and its state: ``resend_check``).

Executor only: one ``TargetTails`` per sink task that may repeat a send (``sending.BatchSender`` makes it on the
first check, so a task that never checks opens nothing). It asks the target's primary for a queue's first and
next offsets and pulls windows of it, decoded, newest window first; what it reads goes into the queue's
``resend_check.TailIndex``. Errors are the client's ``RocketMQError`` (the sender retries the send, check
included); a read that contradicts the queue's offsets raises rather than passing for an empty tail.
"""

from __future__ import annotations

from collections.abc import Mapping

from broker_store.client import MessageQueue, PullStatus
from broker_store.protocol.codes import ResponseCode
from broker_store.protocol.errors import ServiceNotAvailableError
from connectors.core.executor import executor_admin, executor_consumer
from connectors.replication.resend_check import TailEntry, TailIndex
from connectors.replication.source_position import POSITION_PROPERTY, parse_position
from connectors.replication.writer_options import SinkOptions

WINDOW = 256
"""Messages read per step down a tail."""
PULL_NUMS = 32
"""Messages per pull (a broker's usual cap)."""


class TargetTails:
    """The tails of the target queues one task has read; see the module docstring."""

    def __init__(self, options: SinkOptions, cluster: str) -> None:
        self.cluster = cluster
        """The link's source cluster (``TailIndex.cluster``)."""
        self.consumer = executor_consumer(options.namesrv, options.producer_group, options.send_timeout_ms,
                                          options.credentials, tls=options.tls)
        self.admin = executor_admin(options.namesrv, options.credentials, options.tls)
        self.indexes: dict[MessageQueue, TailIndex] = {}
        self.floors: dict[MessageQueue, int] = {}
        self.read = 0
        """Messages read so far (all queues)."""

    def index(self, queue: MessageQueue, wanted: Mapping[MessageQueue, int], *, refresh: bool) -> TailIndex:
        """The tail of ``queue`` read far enough for ``wanted`` (source queue -> first offset this task sends of
        it; ``TailIndex.needs_older``), and up to the queue's current end when ``refresh`` or on the first
        call."""
        index = self.indexes.get(queue)
        if index is None:
            index = self.indexes[queue] = TailIndex.empty_at(queue, self.cluster, self.admin.max_offset(queue))
        elif refresh:
            end = self.admin.max_offset(queue)
            index.add_newer(end, self._read(queue, index.high, end))
        floor = self.floors.get(queue)
        if floor is None:
            floor = self.floors[queue] = self.admin.min_offset(queue)
        while index.needs_older(wanted, floor):
            start = max(floor, index.low - WINDOW)
            index.add_older(start, self._read(queue, start, index.low))
        return index

    def _read(self, queue: MessageQueue, start: int, end: int) -> list[TailEntry]:
        """Every message of ``[start, end)`` of ``queue`` with its parsed position."""
        entries: list[TailEntry] = []
        offset = start
        while offset < end:
            result = self.consumer.pull(queue, offset, min(PULL_NUMS, end - offset))
            if result.status is PullStatus.FOUND:
                for m in result.messages:
                    if start <= m.queue_offset < end:
                        entries.append(TailEntry(m.queue_offset, parse_position(m.properties.get(POSITION_PROPERTY))))
            elif not (result.status is PullStatus.OFFSET_ILLEGAL and offset < result.min_offset):
                # The queue said it holds [start, end): "nothing here" is a stale replica or a lost tail, not
                # evidence that an earlier attempt stored nothing.
                raise ServiceNotAvailableError(
                    ResponseCode.SERVICE_NOT_AVAILABLE,
                    f"reading {queue} at {offset} before a re-send: {result.status.value} below its end {end}")
            # else: removed by retention since the queue's offsets were read: nothing there to find
            if result.next_begin_offset <= offset:
                raise ServiceNotAvailableError(
                    ResponseCode.SERVICE_NOT_AVAILABLE,
                    f"reading {queue} at {offset} before a re-send: the broker does not move past it")
            offset = result.next_begin_offset
        self.read += len(entries)
        return entries

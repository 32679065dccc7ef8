"""Pulling a planned queue range from the source cluster: offset order, exactly up to the range's end,
one pull always in flight, offset moves / data loss / truncation handled the same for every row format.

Executor only. Called by the reader's ``read`` (``pull_range`` for per-message rows, ``pull_range_raw``
for ``rowFormat=raw``) and by the writer's tasks for ``rowFormat=ranges`` (``pull_results``); the client
comes from the executor's cache (``connectors.core.executor``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeoutError
from dataclasses import dataclass

from broker_store.client import MessageQueue, PullConsumer, PullResult, PullStatus, StoredMessage
from broker_store.protocol.acl import SessionCredentials
from broker_store.protocol.errors import RequestTimeoutError
from broker_store.protocol.message import stored_record_spans
from connectors.core.errors import DataLossError, ReplicatorError
from connectors.core.executor import executor_consumer
from connectors.replication.planning import QueueRange

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PullSettings:
    """What ``read`` needs besides the partition; travels to executors with the reader."""

    namesrv: str
    group: str
    cluster: str
    tags: str
    pull_batch_size: int
    fail_on_data_loss: bool
    pull_timeout_ms: int
    row_format: str = "arrow"
    credentials: SessionCredentials | None = None


def _lost(settings: PullSettings, partition: QueueRange, reason: str) -> None:
    message = (f"data loss on {partition.queue.to_key()} while reading [{partition.start}, {partition.end}): "
               f"{reason}")
    if settings.fail_on_data_loss:
        raise DataLossError(message + " (set failOnDataLoss=false to skip the lost range and continue)")
    log.warning("%s; failOnDataLoss=false: skipping", message)


def pull_range(settings: PullSettings, partition: QueueRange,
               consumer: PullConsumer | None = None) -> Iterator[list[StoredMessage]]:
    """Pull ``[start, end)`` of one queue, in offset order, as lists of messages (one per pull).

    Stops exactly at ``end`` (messages at or past it are dropped). PULL_OFFSET_MOVED below the min
    offset is data loss (``failOnDataLoss``) unless the range is ``from_earliest``; a queue whose max
    offset is below ``end`` (truncated) is data loss too. Executor only.
    """
    for begin, result in pull_results(settings, partition, consumer, decode=True):
        messages = result.messages
        if messages and not (messages[0].queue_offset >= begin and messages[-1].queue_offset < partition.end):
            messages = [m for m in messages if begin <= m.queue_offset < partition.end]
        if messages:
            yield messages


@dataclass(frozen=True, slots=True)
class RawRecords:
    """Undecoded stored records of one pull (``pull_range_raw``)."""

    records: bytes
    """Records back to back, V1 layout."""
    first_offset: int
    last_offset: int
    count: int


def pull_range_raw(settings: PullSettings, partition: QueueRange,
                   consumer: PullConsumer | None = None) -> Iterator[RawRecords]:
    """``pull_range`` without decoding: the records of each pull as bytes, trimmed to ``[start, end)``
    by walking their length fields only (``stored_record_spans``). Executor only."""
    for begin, result in pull_results(settings, partition, consumer, decode=False):
        raw = result.raw
        if not raw:
            continue
        spans = stored_record_spans(raw)
        if not (spans[0][0] >= begin and spans[-1][0] < partition.end):
            spans = [s for s in spans if begin <= s[0] < partition.end]
            if not spans:
                continue
            raw = raw[spans[0][1]:spans[-1][2]]  # offsets increase: the kept records are contiguous
        yield RawRecords(raw, spans[0][0], spans[-1][0], len(spans))


def pull_results(settings: PullSettings, partition: QueueRange, consumer: PullConsumer | None = None,
                 *, decode: bool) -> Iterator[tuple[int, PullResult]]:
    """The pulls covering ``[start, end)`` of one queue: (offset pulled at, result) for each pull that
    found messages, in order; handles offset moves, data loss and truncation (see ``pull_range``).

    One pull is always in flight ahead of the caller: the first request goes out when this is called
    (so a caller may start several queues' pulls before consuming any), the next as soon as a response
    says where it starts, before the caller converts the messages just returned, so the broker's and
    the network's time overlaps the caller's work instead of adding to it.
    """
    consumer = consumer or executor_consumer(settings.namesrv, settings.group, settings.pull_timeout_ms,
                                              settings.credentials)
    mq = MessageQueue(partition.topic, partition.broker_name, partition.queue_id)
    budget = consumer.pull_wait_budget()

    def pull(at: int) -> Future[PullResult]:
        return consumer.pull_async(mq, at, min(settings.pull_batch_size, partition.end - at), expression=settings.tags,
                                   decode=decode)

    def wait(future: Future[PullResult]) -> PullResult:
        try:
            return future.result(budget)
        except FutureTimeoutError as exc:
            future.cancel()
            raise RequestTimeoutError(f"pull of {mq} did not finish within {budget:.0f}s") from exc

    if partition.start >= partition.end:
        return iter(())
    return _follow_pulls(settings, partition, pull, wait, pull(partition.start))


def _follow_pulls(settings: PullSettings, partition: QueueRange, pull: Callable[[int], Future[PullResult]],
                  wait: Callable[[Future[PullResult]], PullResult],
                  first: Future[PullResult]) -> Iterator[tuple[int, PullResult]]:
    """``pull_results`` from its first pull on."""
    mq = f"{partition.topic}/{partition.broker_name}/{partition.queue_id}"
    offset = partition.start
    pending: Future[PullResult] | None = first
    try:
        while pending is not None:
            result = wait(pending)
            pending = None
            status = result.status
            if status is PullStatus.FOUND or status is PullStatus.NO_MATCHED_MSG:
                if result.next_begin_offset <= offset:
                    raise ReplicatorError(f"{mq}: pull at {offset} did not advance (nextBeginOffset "
                                          f"{result.next_begin_offset}); refusing to loop")
                begin, offset = offset, result.next_begin_offset
                if offset < partition.end:
                    pending = pull(offset)
                yield begin, result
            elif status is PullStatus.OFFSET_ILLEGAL and offset < result.min_offset:
                if not partition.from_earliest:
                    _lost(settings, partition, f"offsets [{offset}, {result.min_offset}) were deleted "
                                               f"(queue min offset is {result.min_offset})")
                offset = result.min_offset
                if offset < partition.end:
                    pending = pull(offset)
            else:  # NO_NEW_MSG, or OFFSET_ILLEGAL above the max offset: the queue lost its tail
                _lost(settings, partition, f"the queue ends at {result.max_offset}, before the planned end "
                                           f"{partition.end} (truncated or re-created)")
                return
    finally:
        if pending is not None:
            pending.cancel()

"""Pulling a planned queue range from the source cluster: offset order, exactly up to the range's end,
several pulls in flight per range, offset moves / data loss / truncation handled the same for every row format.

Executor only. Called by the reader's ``read`` (``pull_range`` for per-message rows, ``pull_range_raw``
for ``rowFormat=raw``) and by the writer's tasks for ``rowFormat=ranges`` (``pull_results``); the client
comes from the executor's cache (``connectors.core.executor``).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeoutError
from dataclasses import dataclass, replace

from broker_store.client import MessageQueue, PullConsumer, PullResult, PullStatus, StoredMessage, TlsClientSettings
from broker_store.clock import SYSTEM_CLOCK, ThreadClock
from broker_store.protocol.acl import SessionCredentials
from broker_store.protocol.errors import RequestTimeoutError, RocketMQError, TopicNotExistError
from broker_store.protocol.message import stored_record_spans
from connectors.core.config import RetrySettings
from connectors.core.errors import DataLossError, SourceUnavailableError
from connectors.core.executor import executor_admin, executor_consumer
from connectors.core.offsets import queue_key
from connectors.core.outage import OutagePolicy, OutageTimer, SourceOutage
from connectors.replication.planning import QueueRange
from connectors.replication.pull_window import PULLS_IN_FLIGHT, PullWindow

log = logging.getLogger(__name__)

DEFAULT_SOURCE_RETRY = OutagePolicy(
    timeout_ms=RetrySettings.model_fields["retry_timeout_ms"].default,
    backoff_ms=RetrySettings.model_fields["retry_backoff_ms"].default,
    backoff_max_ms=RetrySettings.model_fields["retry_backoff_max_ms"].default)
"""A link's defaults, for pull settings built without a link."""


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
    tls: TlsClientSettings | None = None
    link: str = ""
    """Names the link in the source-outage warnings, ``SourceUnavailableError`` and the data-loss advice."""
    config_path: str | None = None
    """The link's replicator.yaml when the reader was given one (named in the data-loss advice)."""
    retry: OutagePolicy = DEFAULT_SOURCE_RETRY
    """How long and how often a pull is retried while the source is unavailable (the link's
    ``retry_timeout_ms`` / ``retry_backoff_ms`` / ``retry_backoff_max_ms``)."""
    pulls_in_flight: int = PULLS_IN_FLIGHT
    """Pulls in flight per queue range (``connectors.replication.pull_window``)."""


class QueueNotServedError(RocketMQError):
    """A pull answered without data and without progress at an offset the queue holds (``_follow_pulls``)."""

    retriable = True


class QueueBehindError(RocketMQError):
    """A pull answered by a broker whose queue ends before the range's planned end (``_follow_pulls``)."""

    retriable = True


BEHIND_GRACE_MS = 30_000
"""How long a queue that ends before its planned end is asked again, on a route fetched anew each time, before it
is data loss (at most the link's ``retry_timeout_ms``): a failover's election and the route's refresh take
seconds; a truncated queue stays short."""


def source_outage(settings: PullSettings, clock: ThreadClock = SYSTEM_CLOCK) -> SourceOutage:
    """A ``SourceOutage`` for pulls with ``settings``: one per task, so its ``retries`` count the task's."""
    return SourceOutage(
        link=settings.link or settings.group, cluster=settings.cluster, namesrv=settings.namesrv,
        policy=settings.retry,
        cluster_has_brokers=lambda: bool(executor_admin(settings.namesrv, settings.credentials, settings.tls)
                                         .cluster_info().broker_addr_table), clock=clock)


def data_loss_advice(link: str | None, config_path: str | None) -> str:
    """What a person can do about a ``DataLossError``: the exact reset command and the key (or option)."""
    if not link:
        return ("to skip lost ranges, set the reader option failOnDataLoss=false; to start elsewhere, use a new "
                "checkpoint with startingOffsets")
    config = config_path or "<replicator.yaml>"
    return (f"to move link {link} past it, stop the job and run `python -m jobs.reset_offsets --config {config} "
            f"--link {link} --to earliest` (--dry-run first shows the plan; it then says what to do with the "
            f"checkpoint), or set `fail_on_data_loss: false` on link {link} in {config} to skip lost ranges with "
            f"a warning")


def _lost(settings: PullSettings, partition: QueueRange, reason: str) -> None:
    where = f"link {settings.link}: " if settings.link else ""
    message = (f"{where}data loss on {queue_key(partition.queue)} of source cluster {settings.cluster} while reading "
               f"[{partition.start}, {partition.end}): {reason}")
    if settings.fail_on_data_loss:
        raise DataLossError(f"{message}; {data_loss_advice(settings.link, settings.config_path)}")
    log.warning("%s; fail_on_data_loss is false: the lost range is skipped", message)


def pull_range(settings: PullSettings, partition: QueueRange, consumer: PullConsumer | None = None,
               *, outage: SourceOutage | None = None) -> Iterator[list[StoredMessage]]:
    """Pull ``[start, end)`` of one queue, in offset order, as lists of messages (one per pull).

    Stops exactly at ``end`` (messages at or past it are dropped). PULL_OFFSET_MOVED below the min
    offset is data loss (``failOnDataLoss``) unless the range is ``from_earliest``; a queue whose max
    offset is below ``end`` (truncated) is data loss too. Executor only.
    """
    for begin, result in pull_results(settings, partition, consumer, decode=True, outage=outage):
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


def pull_range_raw(settings: PullSettings, partition: QueueRange, consumer: PullConsumer | None = None,
                   *, outage: SourceOutage | None = None) -> Iterator[RawRecords]:
    """``pull_range`` without decoding: the records of each pull as bytes, trimmed to ``[start, end)``
    by walking their length fields only (``stored_record_spans``). Executor only."""
    for begin, result in pull_results(settings, partition, consumer, decode=False, outage=outage):
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
                 *, decode: bool, outage: SourceOutage | None = None) -> Iterator[tuple[int, PullResult]]:
    """The pulls covering ``[start, end)`` of one queue: (offset pulled at, result) for each pull that
    found messages, in order; handles offset moves, data loss and truncation (see ``pull_range``).

    ``settings.pulls_in_flight`` pulls are in flight ahead of the caller (``connectors.replication.pull_window``:
    the next ones asked before the last lands, so a WAN round trip carries several pull batches): the first
    requests go out when this is called (so a caller may start several queues' pulls before consuming any),
    the next as soon as a response says where it ends, before the caller converts the messages just returned,
    so the broker's and the network's time overlaps the caller's work instead of adding to it. A response is
    used only when it was asked where the range has reached; pulls asked on a guess that proved wrong are
    dropped unread.

    While the source is unavailable (``SourceOutage.unavailable``: connection refused or lost, timeouts,
    a broker missing from the route, no broker registered) the failed pull is repeated at the same
    offset with backoff, for up to ``settings.retry.timeout_ms``; then ``SourceUnavailableError``. The first
    repeat after a stale route's error (a dead or replaced primary) goes out at once, on the route the client
    fetches anew (``connectors.core.outage.once_more_on_new_route``'s rule). A pull answered at its own offset
    without reading while the queue holds that offset (a broker changing role serves only up to its confirm
    offset) is waited out the same way (``QueueNotServedError``), never looped on at once nor reported lost; so
    is a pull answered TOPIC_NOT_EXIST by a broker while the route lists the queue (a broker whose copy of the
    topic table is behind its log); once the route no longer lists it (the topic was deleted) the error is raised.
    Nothing is skipped and nothing read twice by the retries: a failed pull yielded nothing.
    ``outage``: the task's (counts its retries); default one per call.
    """
    consumer = consumer or executor_consumer(settings.namesrv, settings.group, settings.pull_timeout_ms,
                                              settings.credentials, tls=settings.tls)
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
    window = PullWindow(partition.start, partition.end, settings.pull_batch_size, settings.pulls_in_flight)
    in_flight = deque(pull(at) for at in window.fill())
    def route_lists() -> bool:
        try:
            return mq in consumer.fetch_message_queues(mq.topic)
        except RocketMQError:
            return False

    def forget_route() -> None:
        consumer.forget_route(mq.topic)

    return _follow_pulls(settings, partition, pull, wait, window, in_flight, outage or source_outage(settings),
                         route_lists, forget_route)


def _follow_pulls(settings: PullSettings, partition: QueueRange, pull: Callable[[int], Future[PullResult]],
                  wait: Callable[[Future[PullResult]], PullResult], window: PullWindow,
                  in_flight: deque[Future[PullResult]], outage: SourceOutage,
                  route_lists: Callable[[], bool],
                  forget_route: Callable[[], None]) -> Iterator[tuple[int, PullResult]]:
    """``pull_results`` from its first pulls on: ``in_flight`` holds the futures of ``window.in_flight``;
    ``route_lists()``: whether the source's route lists the queue now; ``forget_route()``: the next pull asks the
    name servers for the route anew."""
    mq = f"{partition.topic}/{partition.broker_name}/{partition.queue_id}"
    timer = OutageTimer(outage.policy, outage.clock)
    behind = OutageTimer(replace(outage.policy, timeout_ms=min(outage.policy.timeout_ms, BEHIND_GRACE_MS)),
                         outage.clock)
    new_route_asked = False

    def drop(stale: list[int]) -> None:
        for _ in stale:
            in_flight.pop().cancel()

    def restart(at: int) -> None:
        drop(window.restart(at))
        in_flight.extend(pull(a) for a in window.fill())

    try:
        while in_flight:
            offset = window.offset
            head = in_flight.popleft()
            try:
                result = wait(head)
            except RocketMQError as exc:
                window.in_flight.popleft()
                if not outage.unavailable(exc):
                    if not (isinstance(exc, TopicNotExistError) and route_lists()):
                        raise
                    # the broker lacks the topic's config while the route lists the queue: a broker whose
                    # metadata is behind (a new primary of a source without orphan adoption, a replica before
                    # its copy) catches up; a deleted topic leaves the route, and then this raises
                    exc = QueueNotServedError(f"{exc} (the source's route lists {mq}: the broker has not got the "
                                              "topic's config yet)")
                if not new_route_asked and exc.invalid_route and not isinstance(exc, RequestTimeoutError):
                    # the primary this worker's route names died or was replaced (a failover): the client
                    # dropped the route, so pull again at once before counting an outage (one backoff per
                    # Python worker otherwise, each keeping its own route)
                    new_route_asked = True
                    restart(offset)
                    continue
                drop(window.restart(offset))
                outage.record_wait(timer, exc, f"pulling {mq} at offset {offset}")
                restart(offset)
                continue
            new_route_asked = False
            status = result.status
            found = status is PullStatus.FOUND or status is PullStatus.NO_MATCHED_MSG
            if result.next_begin_offset <= offset and (
                    found or (status is PullStatus.NO_NEW_MSG and result.max_offset >= partition.end)):
                # Answered without reading although the queue holds the offset: a broker changing role serves
                # only up to its confirm offset. Wait like an outage (bounded by retry_timeout_ms), never
                # loop at once and never report the range lost.
                window.in_flight.popleft()
                drop(window.restart(offset))
                outage.record_wait(timer, QueueNotServedError(
                    f"{status.name} at {offset} (nextBeginOffset {result.next_begin_offset}, queue max offset "
                    f"{result.max_offset})"), f"pulling {mq} at offset {offset}")
                restart(offset)
                continue
            if status is not PullStatus.OFFSET_ILLEGAL or offset >= result.min_offset:
                if not found and result.max_offset < partition.end:
                    # The queue ends before the planned end, which the source's primary gave: truncated or
                    # re-created (data loss), or this broker is behind that primary -- one deposed by a failover,
                    # answering on this worker's stale route (a replica now, catching up), or a replica. Ask the
                    # route anew and wait like an outage; lost only if it still ends there after BEHIND_GRACE_MS.
                    reason = (f"the queue ends at {result.max_offset}, before the planned end {partition.end} "
                              "(truncated or re-created)")
                    window.in_flight.popleft()
                    drop(window.restart(offset))
                    forget_route()
                    try:
                        outage.record_wait(behind, QueueBehindError(reason), f"pulling {mq} at offset {offset}")
                    except SourceUnavailableError:
                        _lost(settings, partition, f"{reason}, still after {behind.elapsed:.1f}s and "
                                                   f"{behind.waits} route refresh(es)")
                        return
                    restart(offset)
                    continue
            if timer.waits or behind.waits:
                log.info("link %s: source queue %s readable again after %.1fs (%d retries)", outage.link, mq,
                         max(timer.elapsed, behind.elapsed), timer.waits + behind.waits)
                timer.reset()
                behind.reset()
            if found:
                drop(window.answered(result.next_begin_offset))
                in_flight.extend(pull(a) for a in window.fill())
                yield offset, result
            elif status is PullStatus.OFFSET_ILLEGAL and offset < result.min_offset:
                if not partition.from_earliest:
                    _lost(settings, partition, f"offsets [{offset}, {result.min_offset}) were deleted "
                                               f"(queue min offset is {result.min_offset})")
                window.in_flight.popleft()
                restart(result.min_offset)
            else:  # NO_NEW_MSG or OFFSET_ILLEGAL above the max offset with the queue's end past this range's:
                # nothing to read at an offset below the planned end, yet the queue goes past it
                _lost(settings, partition, f"no message at {offset} although the queue ends at {result.max_offset} "
                                           f"({status.name})")
                return
    finally:
        for future in in_flight:
            future.cancel()

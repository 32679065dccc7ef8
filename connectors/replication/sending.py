"""Batching and sending of one write task: consecutive messages of one target queue go out as one
SEND_BATCH_MESSAGE (bounded count and bytes), at most ``maxInFlight`` sends outstanding, retried with
backoff; what the target still refuses becomes a ``FailedMessage``; the task's result for the driver is a
``records.ReplicationCommitMessage``.

Size limits. A target broker checks a single send's body against its ``max_message_size`` but a whole
SEND_BATCH_MESSAGE body (entry headers and properties included) against the same limit, so a batch is
bounded by its *encoded* size: ``min(batchMaxBytes, targetMaxMessageSize)``. A message whose encoded
entry alone exceeds ``targetMaxMessageSize`` (a body at or near the limit: 4 MiB - 64 plus its headers and
properties) is sent alone as SEND_MESSAGE_V2, where only its body counts: every message the target would
take alone is sent, and only bodies over the target's limit are refused (and recorded as failures). A
batch of one the target refuses as illegal (its limit is lower than ``targetMaxMessageSize``) is tried
once more alone before it is recorded. A retry topic (``%RETRY%<group>``, replicated with its group) takes no
batches at all (brokers refuse them there): each of its messages goes alone as SEND_MESSAGE_V2.

Sends that may repeat an earlier one. When the task may have run before (``check_all``: a re-run batch, a
Spark task retry) every batch, and otherwise a batch whose send got no answer (``resend_check.may_have_stored``),
is checked against its target queue's tail before it goes out (``_skip_landed``): what is already there is
not sent again and is mapped where it landed. A first attempt whose sends are all answered reads nothing.

Executor only: ``BatchSender`` is the base of ``connectors.replication.partition_writer.PartitionWriter``,
which turns rows into the entries appended here. Its counters, batches and in-flight sends belong to one
task and one thread.
"""

from __future__ import annotations

import itertools
import logging
import random
from collections import deque
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from broker_store.client import MessageQueue, Producer, SendResult, SendStatus
from broker_store.clock import SYSTEM_CLOCK, ThreadClock, wall_ms
from broker_store.protocol.codes import ResponseCode
from broker_store.protocol.errors import MessageIllegalError, RequestTimeoutError, RocketMQError, TopicNotExistError
from broker_store.protocol.message import (
    BATCH_HEADER,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    Message,
    decode_properties,
    decode_stored_message,
)
from broker_store.protocol.topic import RETRY_GROUP_TOPIC_PREFIX
from connectors.core.executor import executor_producer
from connectors.replication.forwarding import ForwardedPull, entry_body_length
from connectors.replication.outage import TargetOutage, retriable, stale_primary
from connectors.replication.placement import QueuePlacement
from connectors.replication.records import FailedMessage, OffsetMapping, ReplicationCommitMessage, summarise_latencies
from connectors.replication.resend_check import may_have_stored, plan_resend
from connectors.replication.target_tail import TargetTails
from connectors.replication.writer_options import SinkOptions

log = logging.getLogger(__name__)

LATENCY_SAMPLES_PER_TASK = 2048


def target_producer(options: SinkOptions) -> Producer:
    """The executor process's Producer for the writer's target settings (``connectors.core.executor``)."""
    return executor_producer(options.namesrv, options.producer_group, send_timeout_ms=options.send_timeout_ms,
                             auto_create_topic=options.auto_create_topic, credentials=options.credentials,
                             tls=options.tls)


@dataclass
class Item:
    """A message of the per-message row formats (arrow / tuples): what a failure record is rebuilt from."""

    source: MessageQueue
    queue_offset: int
    body: bytes
    born_ms: int
    store_ms: int
    offset_msg_id: str
    source_properties: Mapping[str, str] | Sequence[tuple[str, str]]
    """Every source property (as the row carried them: a mapping or the Arrow map's pairs)."""
    tags: str | None
    keys: str | None


@dataclass(frozen=True)
class StoredOrigin:
    """Where a raw-input message came from: its record in a pull's buffer (decoded only on failure)."""

    buffer: bytes
    broker_name: str


@dataclass
class Batch:
    """Consecutive messages for one target queue, sent as one SEND_BATCH_MESSAGE. Per-entry data is
    kept in parallel lists (the sink's hot path appends whole pulls with list slices)."""

    topic: str
    queue: MessageQueue | None
    """None: the target topic's queues could not be listed; the send fails and is retried / recorded."""
    entries: list[bytes] = field(default_factory=list)
    """Encoded batch entries (``connectors.replication.forwarding``), in send order."""
    offsets: list[int] = field(default_factory=list)
    """Source queue offset of each entry."""
    borns: list[int] = field(default_factory=list)
    """Source born timestamp (ms, 0 unknown) of each entry."""
    origins: list[Any] = field(default_factory=list)
    """Per entry: its ``Item``, or (``StoredOrigin``, record start) for raw input."""
    runs: list[tuple[MessageQueue, int]] = field(default_factory=list)
    """(source queue, index of its first entry); a new run starts whenever the source queue changes."""
    size: int = 0
    """Body bytes (what the metrics count)."""
    encoded: int = 0
    """Encoded bytes of the entries (what the target's batch limit counts)."""
    alone: bool = False
    """Send the (single) entry as SEND_MESSAGE_V2, not as a batch."""
    maybe_stored: bool = False
    """A send of it failed in a way that may have stored it: check the target before sending it again."""
    checked: bool = False
    """Checked against the target's tail since its last unanswered send."""

    def source_of(self, index: int) -> MessageQueue:
        source = self.runs[0][0]
        for queue, first in self.runs:
            if first > index:
                break
            source = queue
        return source

    def single(self, index: int) -> Batch:
        """Entry ``index`` alone (a refused batch is retried message by message)."""
        entry = self.entries[index]
        return Batch(self.topic, self.queue, [entry], [self.offsets[index]], [self.borns[index]],
                     [self.origins[index]], [(self.source_of(index), 0)], entry_body_length(entry), len(entry),
                     maybe_stored=self.maybe_stored, checked=self.checked)

    def positions(self) -> list[tuple[MessageQueue, int]]:
        """(source queue, source offset) of each entry."""
        out: list[tuple[MessageQueue, int]] = []
        for k, (source, first) in enumerate(self.runs):
            end = self.runs[k + 1][1] if k + 1 < len(self.runs) else len(self.entries)
            out.extend((source, offset) for offset in self.offsets[first:end])
        return out

    def keep(self, indices: Sequence[int]) -> None:
        """Keep only the entries at ``indices`` (ascending), in place."""
        positions = self.positions()
        self.entries = [self.entries[i] for i in indices]
        self.offsets = [self.offsets[i] for i in indices]
        self.borns = [self.borns[i] for i in indices]
        self.origins = [self.origins[i] for i in indices]
        self.runs = []
        for j, i in enumerate(indices):
            if not self.runs or self.runs[-1][0] != positions[i][0]:
                self.runs.append((positions[i][0], j))
        self.size = sum(map(entry_body_length, self.entries))
        self.encoded = sum(map(len, self.entries))


def entry_message(topic: str, entry: bytes) -> Message:
    """The ``Message`` of one encoded batch entry (``forwarding.encode_entry`` layout: header, body,
    2-byte properties length, properties), for sending it alone as SEND_MESSAGE_V2."""
    _total, _magic, _crc, flag, body_length = BATCH_HEADER.unpack_from(entry)
    start = BATCH_HEADER.size
    body = entry[start:start + body_length]
    props_at = start + body_length + 2
    props_length = int.from_bytes(entry[props_at - 2:props_at], "big")
    return Message(topic, body, decode_properties(entry[props_at:props_at + props_length]), flag)


class BatchSender:
    """Sends one task's entries; see the module docstring. Executor only, one thread."""

    def __init__(self, options: SinkOptions, clock: ThreadClock = SYSTEM_CLOCK) -> None:
        self.o = options
        self.producer = target_producer(options)
        self.clock = clock
        """Times the retries and stamps the latencies (``wall_ms``); the task's outages share it."""
        self.outage = TargetOutage(options, clock)
        self.placement = QueuePlacement(options, self.producer, self.outage)
        self.batch_bound = min(options.batch_max_bytes, options.target_max_message_size)
        """Encoded bytes per SEND_BATCH_MESSAGE (see "Size limits" in the module docstring)."""
        self.single_sends = 0
        """Messages sent alone as SEND_MESSAGE_V2 because their entry exceeds the batch limit."""
        self.in_flight: deque[tuple[Future[SendResult], Batch]] = deque()
        self.open: dict[tuple[str, MessageQueue | None], Batch] = {}
        """The batch being filled per target queue (a task's source queues are pulled concurrently, so
        messages for several target queues arrive interleaved)."""
        self._open_by_source: dict[MessageQueue, tuple[str, MessageQueue | None]] = {}
        """The open batch a source queue's messages went to last (``flush_source``)."""
        self.delivered = 0
        self.bytes = 0
        self.skipped = 0
        self.failures: list[FailedMessage] = []
        self.mappings: list[OffsetMapping] = []
        self.source_next: dict[MessageQueue, int] = {}
        self.latencies: list[int] = []
        self.oldest_store_ms: int | None = None
        self.started_ms = wall_ms(clock)
        self.check_all = False
        """Check every batch against the target before its first send (the task may have run before)."""
        self.position_cluster: str | None = options.source_cluster
        """The source cluster the task's position properties name (None: none written, nothing checked)."""
        self.task_first: dict[MessageQueue, int] = {}
        """The first source offset this task sends of each source queue (``resend_check``'s anchors)."""
        self.duplicates_avoided = 0
        """Entries not sent because the target already held them."""
        self._tails: TargetTails | None = None

    def _max_messages(self, topic: str) -> int:
        """Entries per send to ``topic``: one for a retry topic (brokers refuse batches there: RocketMQ's
        "batch request does not support retry group"), else ``batch_max_messages``."""
        return 1 if topic.startswith(RETRY_GROUP_TOPIC_PREFIX) else self.o.batch_max_messages

    def _batch_for(self, topic: str, queue: MessageQueue | None) -> Batch:
        batch = self.open.get((topic, queue))
        if batch is None:
            batch = self.open[(topic, queue)] = Batch(topic, queue)
        return batch

    def _submit_open(self, batch: Batch) -> None:
        del self.open[(batch.topic, batch.queue)]
        self._submit(batch)

    def flush_source(self, source: MessageQueue) -> None:
        """Send the open batch that ends with ``source``'s messages now (its range is complete: nothing
        more of it will join that batch)."""
        key = self._open_by_source.pop(source, None)
        batch = self.open.get(key) if key is not None else None
        if batch is not None and batch.runs[-1][0] == source:
            self._submit_open(batch)

    def _append(self, topic: str, queue: MessageQueue | None, source: MessageQueue, entry: bytes, size: int,
                offset: int, born_ms: int, origin: Any) -> None:
        batch = self._batch_for(topic, queue)
        if batch.entries and (len(batch.entries) >= self._max_messages(topic)
                              or batch.encoded + len(entry) > self.batch_bound):
            self._submit_open(batch)
            batch = self._batch_for(topic, queue)
        if not batch.runs or batch.runs[-1][0] != source:
            batch.runs.append((source, len(batch.entries)))
            self._open_by_source[source] = (topic, queue)
            self.task_first.setdefault(source, offset)
        batch.entries.append(entry)
        batch.offsets.append(offset)
        batch.borns.append(born_ms)
        batch.origins.append(origin)
        batch.size += size
        batch.encoded += len(entry)

    def _append_pull(self, topic: str, queue: MessageQueue | None, source: MessageQueue, pulled: ForwardedPull,
                     origin: StoredOrigin) -> None:
        """``_append`` for a whole pull: fills batches up to the count and encoded-byte limits with list
        slices; a batch that is full is sent at once."""
        sizes, entries = pulled.sizes, pulled.entries
        i, n = 0, len(sizes)
        max_messages, max_bytes = self._max_messages(topic), self.batch_bound
        while i < n:
            batch = self._batch_for(topic, queue)
            room = max_messages - len(batch.entries)
            size, encoded = batch.size, batch.encoded
            j = min(n, i + room)
            chunk = sum(map(len, entries[i:j]))  # the common case: the rest of the pull fits (C-speed sums)
            if encoded + chunk <= max_bytes:
                size += sum(sizes[i:j])
                encoded += chunk
            else:  # entry by entry up to the byte bound; an entry over it goes alone into an empty batch
                j = i
                while j < n and j - i < room and (encoded + len(entries[j]) <= max_bytes
                                                  or (j == i and not batch.entries)):
                    size += sizes[j]
                    encoded += len(entries[j])
                    j += 1
            if j > i:
                if not batch.runs or batch.runs[-1][0] != source:
                    batch.runs.append((source, len(batch.entries)))
                    self._open_by_source[source] = (topic, queue)
                    self.task_first.setdefault(source, pulled.offsets[i])
                batch.entries.extend(pulled.entries[i:j])
                batch.offsets.extend(pulled.offsets[i:j])
                batch.borns.extend(pulled.borns[i:j])
                batch.origins.extend(zip(itertools.repeat(origin), pulled.starts[i:j]))
                batch.size, batch.encoded = size, encoded
                i = j
            if len(batch.entries) >= max_messages or j < n:  # full (by count or bytes)
                self._submit_open(batch)

    def _send_async(self, batch: Batch) -> Future[SendResult]:
        if batch.queue is None:
            # The topic's queues could not be listed when the batch was placed: look again (the topic may
            # exist now), else fail this attempt like a send to a missing topic.
            self.placement.forget(batch.topic)
            batch.queue = self.placement.place(batch.topic, batch.runs[0][0])
        if batch.queue is None:
            failed: Future[SendResult] = Future()
            failed.set_exception(TopicNotExistError(ResponseCode.TOPIC_NOT_EXIST,
                                                    f"no writable queue for target topic {batch.topic}"))
            return failed
        if (batch.maybe_stored or self.check_all) and not batch.checked and self.position_cluster:
            self._skip_landed(batch, batch.queue, self.position_cluster)
            if not batch.entries:
                done: Future[SendResult] = Future()
                done.set_result(SendResult(SendStatus.SEND_OK, "", "", batch.queue, -1))
                return done
        timeout = self.o.send_timeout_ms / 1000
        if len(batch.entries) == 1 and (batch.alone or batch.encoded > self.o.target_max_message_size
                                        or batch.topic.startswith(RETRY_GROUP_TOPIC_PREFIX)):
            # The target would refuse it as a batch (its encoding exceeds the limit) but take it alone.
            batch.alone = True
            self.single_sends += 1
            return self.producer.send_async(entry_message(batch.topic, batch.entries[0]), batch.queue,
                                            timeout=timeout)
        return self.producer.send_encoded_batch_async(batch.topic, b"".join(batch.entries), batch.queue,
                                                      timeout=timeout)

    def _skip_landed(self, batch: Batch, queue: MessageQueue, cluster: str) -> None:
        """Drop from ``batch`` the entries its target queue already holds (``resend_check``), mapping each where it
        landed. Raises the client's ``RocketMQError`` when the tail cannot be read (the send is then retried)."""
        if self._tails is None:
            self._tails = TargetTails(self.o, cluster)
        positions = batch.positions()
        wanted = {source: self.task_first.get(source, offset) for source, offset in positions}
        index = self._tails.index(queue, wanted, refresh=batch.maybe_stored)
        plan = plan_resend(positions, index.landed)
        batch.checked = True
        if not plan.landed:
            return
        for i, at in plan.landed:
            source, offset = positions[i]
            self._map(source, offset, offset, 1, queue, at)
        self.duplicates_avoided += len(plan.landed)
        log.info("link %s: %d of %d message(s) for %s already on the target (an earlier attempt stored them); "
                 "not sent again", self.o.label, len(plan.landed), len(positions), queue)
        batch.keep(plan.send)

    def _submit(self, batch: Batch) -> None:
        while len(self.in_flight) >= self.o.max_in_flight:
            self._complete(*self.in_flight.popleft())
        try:
            future = self._send_async(batch)
        except RocketMQError as exc:  # validation before anything went out
            future = Future()
            future.set_exception(exc)
        self.in_flight.append((future, batch))

    def _wait(self, future: Future[SendResult]) -> SendResult:
        try:
            return future.result(timeout=self.o.send_timeout_ms / 1000 + 10)
        except TimeoutError as exc:
            raise RequestTimeoutError("send did not complete in time") from exc

    def _send_now(self, batch: Batch) -> SendResult:
        return self._wait(self._send_async(batch))

    def _complete(self, future: Future[SendResult], batch: Batch) -> None:
        try:
            result = self._wait(future)
        except RocketMQError as exc:
            self._unanswered(batch, exc)
            self._retry(batch, exc)
            return
        self._delivered(batch, result)

    @staticmethod
    def _unanswered(batch: Batch, error: RocketMQError) -> None:
        """Note a failed send: if it may have stored the batch, the next send checks the target first."""
        if may_have_stored(error):
            batch.maybe_stored, batch.checked = True, False

    def _retry(self, batch: Batch, error: RocketMQError, attempts: int = 1) -> None:
        """Retry a failed send (blocking, exponential backoff): without limit but ``retry_timeout_ms`` while
        the target is unavailable, ``maxRetries`` times when it refuses the message; split a refused
        batch into single sends so one bad message does not fail its neighbours; record what still
        fails. Raises ``TargetUnavailableError`` when an outage outlasts ``retry_timeout_ms``. The first
        retry after a dead or fenced primary's error (``stale_primary``) goes out at once."""
        outage_started: float | None = None
        waits = 0
        new_route_asked = False
        while True:
            if not new_route_asked and stale_primary(error):
                # the primary this worker's route names died or was replaced (a failover): the client dropped
                # the route, so send again at once before counting an outage wait (each Python worker keeps
                # its own route, so each would otherwise wait a backoff after every failover)
                new_route_asked = True
            elif self.outage.unavailable(error):
                outage_started = self.clock.monotonic() if outage_started is None else outage_started
                self.outage.wait(error, str(batch.queue or batch.topic), outage_started, waits)
                waits += 1
            elif retriable(error) and attempts <= self.o.max_retries:
                outage_started, waits = None, 0
                self.clock.block(self.o.retry_backoff_ms * (2 ** (attempts - 1)) / 1000)
                attempts += 1
            else:
                break
            try:
                self._delivered(batch, self._send_now(batch))
                return
            except RocketMQError as exc:
                self._unanswered(batch, exc)
                error = exc
        if len(batch.entries) > 1 and not retriable(error):
            log.info("batch of %d to %s refused (%s); sending its messages one by one", len(batch.entries),
                     batch.queue or batch.topic, error)
            for i in range(len(batch.entries)):
                single = batch.single(i)
                try:
                    self._delivered(single, self._send_now(single))
                except RocketMQError as exc:
                    self._unanswered(single, exc)
                    self._retry(single, exc, 1)
            return
        if len(batch.entries) == 1 and not batch.alone and isinstance(error, MessageIllegalError):
            # A batch of one refused as illegal: the target may count the entry's headers and properties
            # against a limit lower than targetMaxMessageSize. Alone, only its body counts.
            batch.alone = True
            try:
                self._delivered(batch, self._send_now(batch))
                return
            except RocketMQError as exc:
                self._unanswered(batch, exc)
                error = exc
        self._fail_origins(batch.origins, target=batch.topic, error=f"{type(error).__name__}: {error}",
                           attempts=attempts)

    def _fail_origins(self, origins: Sequence[Any], *, target: str, error: str, attempts: int) -> None:
        """Record messages as failed, each rebuilt whole from its origin (``Batch.origins``)."""
        for origin in origins:
            if isinstance(origin, Item):
                self.failures.append(FailedMessage(
                    topic=origin.source.topic, broker_name=origin.source.broker_name,
                    queue_id=origin.source.queue_id, queue_offset=origin.queue_offset, msg_id=origin.offset_msg_id,
                    target_topic=target, body=origin.body, properties=dict(origin.source_properties), error=error,
                    attempts=attempts, tags=origin.tags, keys=origin.keys, born_timestamp=origin.born_ms,
                    store_timestamp=origin.store_ms))
                continue
            stored, start = origin
            m = decode_stored_message(stored.buffer, start)
            self.failures.append(FailedMessage(
                topic=m.topic, broker_name=stored.broker_name, queue_id=m.queue_id, queue_offset=m.queue_offset,
                msg_id=m.offset_msg_id, target_topic=target, body=m.body, properties=dict(m.properties),
                error=error, attempts=attempts, tags=m.properties.get(PROPERTY_TAGS),
                keys=m.properties.get(PROPERTY_KEYS), born_timestamp=m.born_timestamp,
                store_timestamp=m.store_timestamp))

    def _delivered(self, batch: Batch, result: SendResult) -> None:
        if not batch.entries:  # every entry was already on the target (_skip_landed)
            return
        now = wall_ms(self.clock)
        mq = result.message_queue
        first_target = result.queue_offset
        runs, offsets, n = batch.runs, batch.offsets, len(batch.entries)
        for k, (source, first) in enumerate(runs):
            end = runs[k + 1][1] if k + 1 < len(runs) else n
            if offsets[end - 1] - offsets[first] == end - 1 - first:  # no source offset skipped: one run
                self._map(source, offsets[first], offsets[end - 1], end - first, mq, first_target + first)
                continue
            # Messages were skipped in between (loop guard, tag filter, failures): one run per source-contiguous
            # stretch, so every run maps offsets exactly (connectors.checkpoint.translation needs that).
            start = first
            for i in range(first + 1, end + 1):
                if i == end or offsets[i] != offsets[i - 1] + 1:
                    self._map(source, offsets[start], offsets[i - 1], i - start, mq, first_target + start)
                    start = i
        self.bytes += batch.size
        self.latencies.extend([now - born for born in batch.borns if born])
        self.delivered += n

    def _map(self, src: MessageQueue, source_first: int, source_last: int, count: int, mq: MessageQueue,
             target_first: int) -> None:
        target_last = target_first + count - 1
        last = self.mappings[-1] if self.mappings else None
        if (last is not None and last.source_topic == src.topic and last.source_broker == src.broker_name
                and last.source_queue_id == src.queue_id and last.target_topic == mq.topic
                and last.target_broker == mq.broker_name and last.target_queue_id == mq.queue_id
                and last.target_last_offset + 1 == target_first
                and last.source_last_offset + 1 == source_first):  # source-contiguous runs only
            self.mappings[-1] = OffsetMapping(
                last.source_topic, last.source_broker, last.source_queue_id, last.source_first_offset,
                source_last, last.target_topic, last.target_broker, last.target_queue_id,
                last.target_first_offset, target_last, last.messages + count)
            return
        self.mappings.append(OffsetMapping(
            src.topic, src.broker_name, src.queue_id, source_first, source_last,
            mq.topic, mq.broker_name, mq.queue_id, target_first, target_last, count))

    def finish(self) -> ReplicationCommitMessage:
        for batch in list(self.open.values()):
            self._submit_open(batch)
        while self.in_flight:
            self._complete(*self.in_flight.popleft())
        samples = self.latencies
        if len(samples) > LATENCY_SAMPLES_PER_TASK:
            samples = random.sample(samples, LATENCY_SAMPLES_PER_TASK)
        return ReplicationCommitMessage(
            delivered=self.delivered, bytes=self.bytes, skipped_loop=self.skipped,
            failures=tuple(self.failures), offset_map=tuple(self.mappings), source_next=dict(self.source_next),
            latency_samples_ms=tuple(samples), latency=summarise_latencies(self.latencies),
            oldest_store_ms=self.oldest_store_ms, started_ms=self.started_ms, finished_ms=wall_ms(self.clock),
            target_unavailable_retries=self.outage.retries, placements=tuple(self.placement.decided),
            duplicates_avoided=self.duplicates_avoided,
            foreign_in_tail=sum(i.foreign for i in self._tails.indexes.values()) if self._tails else 0,
            tail_read=self._tails.read if self._tails else 0)

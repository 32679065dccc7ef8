"""One write task's rows turned into sends: target topic, loop guard, properties and queue placement per
message, for every row format the reader produces (per-message rows, ``raw`` pulls, ``ranges`` the task
pulls itself).

Executor only: ``RocketMQStreamWriter.write`` calls ``write_partition``, which makes one ``PartitionWriter`` per
task and partition. The per-row loops are the writer's hot path (see ``add_record_batch``); batching and sending
is the base class (``connectors.replication.sending``).
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from broker_store.client import MessageQueue, PullResult
from broker_store.clock import SYSTEM_CLOCK, ThreadClock
from broker_store.protocol.errors import ProtocolError
from broker_store.protocol.message import PROPERTY_KEYS, PROPERTY_TAGS, encode_properties
from connectors.core.errors import ReplicatorError
from connectors.core.executor import freeze_worker_heap
from connectors.core.outage import SourceOutage
from connectors.core.rows import (
    COL_BORN_TS,
    COL_BROKER,
    COL_CONFIG_PATH,
    COL_CONSUMER_GROUP,
    COL_END_OFFSET,
    COL_FAIL_ON_DATA_LOSS,
    COL_FLAG,
    COL_FROM_EARLIEST,
    COL_KEYS,
    COL_MSG_ID,
    COL_OFFSET_MSG_ID,
    COL_PROPERTIES,
    COL_PULL_BATCH_SIZE,
    COL_PULL_TIMEOUT_MS,
    COL_QUEUE_ID,
    COL_RECORDS,
    COL_SOURCE_CLUSTER,
    COL_SOURCE_NAMESRV,
    COL_START_OFFSET,
    COL_STORE_TS,
    COL_TAG_FILTER,
    COL_TAGS,
    COL_TARGET_BROKER,
    COL_TARGET_QUEUE_ID,
    COL_TARGET_TOPIC,
    COL_TOPIC,
    REQUIRED_COLUMNS,
)
from connectors.core.topic_mapping import TopicMapper
from connectors.replication import loop_guard
from connectors.replication.forwarding import (
    DROPPED_PROPERTIES,
    SKIP,
    RecordForwarder,
    Skip,
    encode_entry,
    forwarded_properties,
)
from connectors.replication.planning import QueueRange
from connectors.replication.pull_window import depth_for
from connectors.replication.pulling import PullSettings, pull_results, source_outage
from connectors.replication.records import ReplicationCommitMessage
from connectors.replication.sending import BatchSender, Item, StoredOrigin
from connectors.replication.source_position import format_position
from connectors.replication.writer_options import SinkOptions

_PULL_SETTING_COLUMNS = (COL_SOURCE_NAMESRV, COL_CONSUMER_GROUP, COL_SOURCE_CLUSTER, COL_TAG_FILTER,
                         COL_PULL_BATCH_SIZE, COL_FAIL_ON_DATA_LOSS, COL_PULL_TIMEOUT_MS, COL_CONFIG_PATH)
"""``rowFormat=ranges`` columns of the pull settings (the same in every row of a link), in ``PullSettings`` order."""
_RANGE_COLUMNS = (COL_TOPIC, COL_BROKER, COL_QUEUE_ID, COL_START_OFFSET, COL_END_OFFSET, COL_FROM_EARLIEST,
                  COL_TARGET_TOPIC, COL_TARGET_BROKER, COL_TARGET_QUEUE_ID)
"""``rowFormat=ranges`` columns of one range and its placement."""


def write_partition(options: SinkOptions, batches: Iterator[pa.RecordBatch],
                    sent_before: Collection[int] = ()) -> ReplicationCommitMessage:
    """Executor: send one task's rows (``RocketMQStreamWriter.write``) and return its report for the driver's
    commit. Every row is stored by the target or recorded as a ``FailedMessage`` before this returns.
    ``sent_before``: batch ids an earlier run of the query may have sent; their tasks, and every retried task,
    check the target before each send (``sending``, "Sends that may repeat an earlier one")."""
    freeze_worker_heap()
    writer = PartitionWriter(options)
    writer.check_all = may_run_again(sent_before)
    ranges: list[pa.RecordBatch] = []
    for rb in batches:
        names = rb.schema.names
        if COL_START_OFFSET in names:
            # Range rows are a few dozen bytes of plan each, and Spark may hand them over one per Arrow
            # batch (the job sets spark.sql.execution.arrow.maxRecordsPerBatch to 1 for the raw format):
            # the task's ranges are gathered first so that add_ranges pulls them all concurrently.
            ranges.append(rb)
        elif COL_RECORDS in names:
            writer.add_raw_batch(rb)
        else:
            writer.add_record_batch(rb)
    if ranges:
        writer.add_ranges(ranges)
    return writer.finish()


BATCH_ID_PROPERTY = "streaming.sql.batchId"
"""The local property in which Spark's micro-batch execution names the batch a task belongs to."""


def may_run_again(sent_before: Collection[int]) -> bool:
    """Whether this task may repeat sends made before: Spark retries it (attempt number above 0), or its batch is
    one an earlier run of the query may have sent. Outside a Spark task: no."""
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:
        return False
    if context.attemptNumber() > 0:
        return True
    batch_id = context.getLocalProperty(BATCH_ID_PROPERTY)
    return batch_id is not None and batch_id.isdigit() and int(batch_id) in sent_before


class _Unknown(Enum):
    """``PartitionWriter._chain``'s cache miss (an enum member, so ``is`` narrows it away)."""

    UNKNOWN = "unknown"


_UNKNOWN = _Unknown.UNKNOWN


@dataclass(frozen=True)
class _Unmapped:
    """``PartitionWriter._target_for``: no target topic for a source topic; its messages fail."""

    hint: str
    """Target topic recorded with the failures ("" when the link maps none)."""
    error: str


class PartitionWriter(BatchSender):
    """Sends one task's rows; see ``RocketMQStreamWriter.write``. Executor only, one thread."""

    def __init__(self, options: SinkOptions, clock: ThreadClock = SYSTEM_CLOCK) -> None:
        super().__init__(options, clock)
        self.mapper = TopicMapper(options.mapping) if options.mapping is not None else None
        self._source_keys: dict[tuple[str, str, int], MessageQueue] = {}
        self._targets: dict[str, str] = {}
        """Source topic -> target topic, for rows without a targetTopic value."""
        self._chains: dict[tuple[str | None, str | None], str | None | Skip] = {}
        self._forwarders: dict[str | None, RecordForwarder] = {}
        self.source_outages: list[SourceOutage] = []
        """One per pulled range (``add_ranges``); their retries are the task's source-outage retries."""

    def finish(self) -> ReplicationCommitMessage:
        return dataclasses.replace(super().finish(),
                                   source_unavailable_retries=sum(o.retries for o in self.source_outages))

    def target_topic(self, topic: str, column_value: str | None) -> str | None:
        if self.o.topic:
            return self.o.topic
        if column_value:
            return column_value
        if self.mapper is not None:
            return self.mapper.target_for(topic)
        if self.o.topic_map is not None:
            return self.o.topic_map.get(topic, topic)
        return topic

    def add_record_batch(self, rb: pa.RecordBatch) -> None:
        """Turn one Arrow batch of source rows into sends. The per-row loop is the sink's hot path: the
        loop-guard decision and the stamped chain are memoised per (chain, source cluster), queue keys,
        target topics and placements per source queue, and the outgoing properties are built in one
        dict (the source's, minus ``DROPPED_PROPERTIES``); see ``target_properties`` for the rules."""
        names = rb.schema.names

        def col(name: str) -> list[Any] | None:
            if name not in names:
                return None
            column = rb.column(names.index(name))
            if pa.types.is_timestamp(column.type):
                column = pc.divide(pc.cast(column, pa.int64()), 1000)
            values: list[Any] = column.to_pylist()
            return values

        n = rb.num_rows
        none = [None] * n
        topics, brokers, qids, offsets, bodies = (col(c) for c in REQUIRED_COLUMNS)
        assert topics is not None and brokers is not None and qids is not None and offsets is not None
        assert bodies is not None
        props_col = col(COL_PROPERTIES)
        tags_col = keys_col = none
        if props_col is None:  # no properties column: rebuild what the rows have
            props_col = none
            tags_col = col(COL_TAGS) or none
            keys_col = col(COL_KEYS) or none
        flags = col(COL_FLAG) or [0] * n
        born = col(COL_BORN_TS) or none
        stored = col(COL_STORE_TS) or none
        msg_ids = col(COL_MSG_ID) or none
        offset_ids = col(COL_OFFSET_MSG_ID) or msg_ids
        clusters = none if self.o.source_cluster else (col(COL_SOURCE_CLUSTER) or none)
        targets = col(COL_TARGET_TOPIC) or none
        self._add_rows(n, topics, brokers, qids, offsets, bodies, props_col, tags_col, keys_col, flags, born, stored,
                       msg_ids, offset_ids, clusters, targets)

    def add_raw_batch(self, rb: pa.RecordBatch) -> None:
        """Turn one Arrow batch of raw rows (``rowFormat=raw``: a pull's stored records per row) into
        sends, record by record through ``connectors.replication.forwarding`` (no per-message decoding)."""
        names = rb.schema.names

        def col(name: str) -> list[Any] | None:
            return rb.column(names.index(name)).to_pylist() if name in names else None

        topics, brokers, qids, records = col(COL_TOPIC), col(COL_BROKER), col(COL_QUEUE_ID), col(COL_RECORDS)
        assert topics is not None and brokers is not None and qids is not None and records is not None
        clusters = col(COL_SOURCE_CLUSTER) or [None] * rb.num_rows
        row_targets = col(COL_TARGET_TOPIC) or [None] * rb.num_rows
        for row, data in enumerate(records):
            if data:
                self.add_pull(data, topics[row], brokers[row], qids[row], clusters[row], row_targets[row])

    def add_ranges(self, batches: Sequence[pa.RecordBatch]) -> None:
        """Pull and send the queue ranges of the task's ``rowFormat=ranges`` rows, each range in
        offset order and stopping exactly at its end (``connectors.replication.pulling.pull_results``: data loss,
        offset moves and truncation are handled as the source's reader does). The ranges are pulled
        concurrently, several pulls in flight per range (``pull_window.depth_for``), handled round-robin, so this
        thread always has a response to forward while the next ones travel."""
        active: deque[tuple[QueueRange, str, str | None, Iterator[tuple[int, PullResult]]]] = deque()
        pulling: dict[tuple[Any, ...], tuple[PullSettings, SourceOutage]] = {}
        planned: list[tuple[QueueRange, PullSettings, SourceOutage, str | None]] = []
        for rb in batches:
            # Column by column (one Arrow conversion per column, not a dict per row); the pull settings and
            # their outage are the link's, the same for every range of it: built once per task, not per range.
            names = rb.schema.names

            def col(name: str, rb: pa.RecordBatch = rb, names: list[str] = names) -> list[Any]:
                return rb.column(names.index(name)).to_pylist() if name in names else [None] * rb.num_rows

            per_link = zip(*(col(c) for c in _PULL_SETTING_COLUMNS), strict=True)
            for key, topic, broker, queue_id, start, end, from_earliest, target_topic, target_broker, target_qid in zip(
                    per_link, *(col(c) for c in _RANGE_COLUMNS), strict=True):
                if key not in pulling:
                    namesrv, group, cluster, tags, batch_size, fail_on_loss, timeout_ms, config_path = key
                    settings = PullSettings(
                        namesrv=namesrv, group=group, cluster=cluster, tags=tags, pull_batch_size=batch_size,
                        fail_on_data_loss=fail_on_loss, pull_timeout_ms=timeout_ms, row_format="raw",
                        credentials=self.o.source_credentials, tls=self.o.source_tls, link=self.o.link or "",
                        retry=self.outage.policy,
                        config_path=config_path)
                    outage = source_outage(settings, self.clock)  # the link's retry settings: a source outage too
                    self.source_outages.append(outage)
                    pulling[key] = settings, outage
                settings, outage = pulling[key]
                queue = QueueRange(topic, broker, queue_id, start, end, from_earliest)
                self.placement.pulled_from(topic, settings.namesrv)
                if target_topic and target_broker is not None and target_qid is not None:
                    # placed on the driver (placement_planner): used as is
                    self.placement.pin(target_topic, queue.queue, MessageQueue(target_topic, target_broker, target_qid))
                planned.append((queue, settings, outage, target_topic))
        # the pulls of every range start now, a bounded number in flight per task (``pull_window.depth_for``)
        depth = depth_for(len(planned))
        deep: dict[int, PullSettings] = {}  # by the link's settings object (one per link, built above)
        for queue, settings, outage, target_topic in planned:
            if id(settings) not in deep:
                deep[id(settings)] = dataclasses.replace(settings, pulls_in_flight=depth)
            active.append((queue, settings.cluster, target_topic,
                           pull_results(deep[id(settings)], queue, decode=False, outage=outage)))
        while active:
            queue, cluster, target, pulls = active.popleft()
            pulled = next(pulls, None)
            if pulled is None:
                continue
            begin, result = pulled
            if result.raw:
                self.add_pull(result.raw, queue.topic, queue.broker_name, queue.queue_id, cluster, target, begin,
                              queue.end)
            if result.next_begin_offset >= queue.end:
                # The range is complete: its last batch goes out now, while the other ranges' pulls are
                # forwarded, instead of in ``finish``, where a task of hundreds of short ranges would
                # otherwise send one batch per range back to back, ``maxInFlight`` at a time, idle between.
                self.flush_source(queue.queue)
            active.append((queue, cluster, target, pulls))

    def _source_key(self, topic: str, broker: str, queue_id: int) -> MessageQueue:
        where = (topic, broker, queue_id)
        source = self._source_keys.get(where)
        if source is None:
            source = self._source_keys[where] = MessageQueue(*where)
        return source

    def _forwarder(self, source_cluster: str | None) -> RecordForwarder:
        forwarder = self._forwarders.get(source_cluster)
        if forwarder is None:
            forwarder = self._forwarders[source_cluster] = RecordForwarder(
                DROPPED_PROPERTIES, lambda chain: self._chain(chain, source_cluster), source_cluster)
        return forwarder

    def add_pull(self, records: bytes, topic: str, broker: str, queue_id: int, cluster: str | None,
                 column_target: str | None = None, first: int = 0, stop: int = 1 << 63) -> None:
        """Send the stored records of one pull of source queue (topic, broker, queue_id) whose queue
        offsets fall in ``[first, stop)``."""
        source = self._source_key(topic, broker, queue_id)
        self.position_cluster = self.position_cluster or cluster
        try:
            pulled = self._forwarder(self.o.source_cluster or cluster).forward(records, topic, queue_id, first, stop,
                                                                              broker)
        except ProtocolError as exc:
            raise ReplicatorError(f"link {self.o.label}: undecodable records from {broker} "
                                  f"{topic}/{queue_id}: {exc}") from exc
        self.skipped += pulled.skipped
        if pulled.next_offset > self.source_next.get(source, 0):
            self.source_next[source] = pulled.next_offset
        if pulled.oldest_store_ms is not None and (self.oldest_store_ms is None
                                                   or pulled.oldest_store_ms < self.oldest_store_ms):
            self.oldest_store_ms = pulled.oldest_store_ms
        if not pulled.entries and not pulled.refused:
            return
        origin = StoredOrigin(records, broker)
        target = self._target_for(source, column_target)
        if isinstance(target, _Unmapped):
            self._fail_origins([(origin, start) for start in pulled.starts], target=target.hint, error=target.error,
                               attempts=0)
            target = target.hint
        else:
            self._append_pull(target, self.placement.place(target, source), source, pulled, origin)
        for start, reason in pulled.refused:
            self._fail_origins([(origin, start)], target=target, error=f"MessageIllegalError: {reason}", attempts=0)

    def _target_for(self, source: MessageQueue, column_target: str | None) -> str | _Unmapped:
        """The target topic of a source queue's messages (cached per source topic unless a column names it)."""
        target = self._targets.get(source.topic) if column_target is None else None
        if target is not None:
            return target
        try:
            target = self.target_topic(source.topic, column_target)
        except ReplicatorError as exc:
            return _Unmapped(source.topic, f"{type(exc).__name__}: {exc}")
        if target is None:
            return _Unmapped("", f"link {self.o.label!r} does not map source topic {source.topic!r}")
        if column_target is None:
            self._targets[source.topic] = target
        return target

    def _add_rows(self, n: int, topics: Sequence[str], brokers: Sequence[str], qids: Sequence[int],
                  offsets: Sequence[int], bodies: Sequence[bytes], props_col: Sequence[Any],
                  tags_col: Sequence[str | None], keys_col: Sequence[str | None], flags: Sequence[int | None],
                  born: Sequence[int | None], stored: Sequence[int | None], msg_ids: Sequence[str | None],
                  offset_ids: Sequence[str | None], clusters: Sequence[str | None],
                  targets: Sequence[str | None]) -> None:
        """The per-message path of the row formats; columns as plain lists, times in ms, ``props_col``
        items as (name, value) pairs (None: rebuild from ``tags_col`` / ``keys_col``)."""
        fixed_cluster = self.o.source_cluster
        source_next = self.source_next
        oldest = self.oldest_store_ms
        for i in range(n):
            source = self._source_key(topics[i], brokers[i], qids[i])
            offset = offsets[i]
            if offset >= source_next.get(source, 0):
                source_next[source] = offset + 1
            raw_props = props_col[i]
            if raw_props is None:
                raw_props = []
                if tags_col[i]:
                    raw_props.append((PROPERTY_TAGS, tags_col[i]))
                if keys_col[i]:
                    raw_props.append((PROPERTY_KEYS, keys_col[i]))
            source_props = dict(raw_props)
            store_ms = stored[i] or 0
            if store_ms and (oldest is None or store_ms < oldest):
                oldest = store_ms
            source_cluster = fixed_cluster or clusters[i]
            if source_cluster and self.position_cluster is None:
                self.position_cluster = source_cluster
            chain = self._chain(source_props.get(loop_guard.CHAIN_PROPERTY), source_cluster)
            if chain is SKIP:
                self.skipped += 1
                continue
            body = bodies[i]
            item = Item(source=source, queue_offset=offset, body=body, born_ms=born[i] or 0, store_ms=store_ms,
                        offset_msg_id=offset_ids[i] or "", source_properties=raw_props,
                        tags=source_props.get(PROPERTY_TAGS), keys=source_props.get(PROPERTY_KEYS))
            target = self._target_for(source, targets[i])
            if isinstance(target, _Unmapped):
                self._fail_origins([item], target=target.hint, error=target.error, attempts=0)
                continue
            props = forwarded_properties(source_props.items(), msg_ids[i], chain, DROPPED_PROPERTIES,
                                         format_position(source_cluster, source, offset) if source_cluster else None)
            if not body:
                self._fail_origins([item], target=target, error="MessageIllegalError: message body is empty",
                                   attempts=0)
                continue
            try:
                entry = encode_entry(bytes(body), encode_properties(props), flags[i] or 0)
            except ProtocolError as exc:
                self._fail_origins([item], target=target, error=f"MessageIllegalError: {exc}", attempts=0)
                continue
            self._append(target, self.placement.place(target, source), source, entry, len(body), offset,
                         item.born_ms, item)
        self.oldest_store_ms = oldest

    def _chain(self, chain: str | None, source_cluster: str | None) -> str | None | Skip:
        """The loop-guard chain a message with ``chain`` from ``source_cluster`` is sent with, or
        ``SKIP`` when sending it would close a loop (``connectors.replication.loop_guard``); memoised."""
        key = (chain, source_cluster)
        cached = self._chains.get(key, _UNKNOWN)
        if cached is not _UNKNOWN:
            return cached
        props = {loop_guard.CHAIN_PROPERTY: chain} if chain is not None else {}
        stamped: str | None | Skip
        if loop_guard.should_skip(props, self.o.target_cluster, source_cluster):
            stamped = SKIP
        elif source_cluster:
            stamped = loop_guard.stamp(props, source_cluster)[loop_guard.CHAIN_PROPERTY]
        else:
            stamped = chain
        self._chains[key] = stamped
        return stamped

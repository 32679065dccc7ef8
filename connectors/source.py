"""The ``rocketmq`` Spark data source: a micro-batch stream reader over RocketMQ queues (and the sink).

Registered by ``jobs/replicate.py`` (``spark.dataSource.register(RocketMQDataSource)``) and by tests;
``spark.readStream.format("rocketmq")`` reads, ``writeStream.format("rocketmq")`` writes through
``connectors.sink``. Pure helpers (option parsing, limit distribution, range splitting) are module
functions so they are testable without Spark or a broker.

Where code runs (Spark's Python Data Source contract):

* driver, one long-lived Python process per query: ``RocketMQStreamReader`` ``initialOffset``,
  ``latestOffset``, ``partitions``, ``commit``, ``prepareForTriggerAvailableNow``,
  ``reportLatestOffset``, ``stop``. It owns an ``Admin`` (route, min/max offsets, timestamp search)
  and a ``PullConsumer`` used only to commit the consumer group's offsets on the source.
* executors: ``RocketMQStreamReader.read(partition)``, stateless per call; the ``PullConsumer`` is
  shared per executor Python process through ``_executor_consumer`` (keyed by name servers and group).

Row formats. ``arrow`` / ``tuples`` give any Spark query one row per message. ``raw`` and ``ranges`` exist
for the ``rocketmq`` sink when a query only copies (the replicate job): ``raw`` hands each pull's records
to Spark undecoded (one row per pull; the sink forwards them record by record), ``ranges`` hands Spark
only the plan, one row per queue range ``[startOffset, endOffset)``, and the sink's task pulls the range
and sends as it pulls. With ``ranges`` the messages never cross Spark's JVM or a second Python worker:
measured with benchmarks/replicator.py, per message ~41 us of Python worker and ~17 us of JVM CPU (raw)
became ~15 us and ~2 us. Progress then counts ranges as input rows (the per-batch log line of the sink
and the Delta ``metrics`` table count messages). Delivery, offsets and data-loss rules are the same in
every format: the pulls stop exactly at the planned end offsets either way (``pull_results``).

Offsets are ``connectors.offsets.SourceOffset`` documents (``{"queues": {"<topic>/<broker>/<qid>": n},
"version": 1}``, n = next offset to read), which is what Spark writes into ``<checkpoint>/offsets/<batch>``.
A queue absent from ``start`` but present in ``end`` is a queue discovered while running: it is read
from its earliest offset (``QueueRange.from_earliest``), never reported as data loss.

Options (case-insensitive)::

    namesrv               source name servers "host:port[;host:port]"   (or from config+link)
    topics                "A,B,C" fixed topics                     } exactly one of these three,
    topicPattern          regex, full match; + topicExclude regex  } or config+link (the link's
    config, link          replicator.yaml path + link name         } TopicMapper, re-listed each trigger)
    cluster               source cluster name written to every row (sourceCluster) and the Delta rows
    tags                  "*" | "TagA || TagB"   (broker hash filter + exact client re-filter)
    startingOffsets       earliest | latest | timestamp:<ms> | offset JSON  (default latest; a queue
                          missing from the JSON starts at earliest)
    maxMessagesPerTrigger admission control (ReadMaxRows), split by backlog; default: no limit
    failOnDataLoss        true (default): DataLossError when a start offset fell below the queue's min
                          offset; false: log the lost range and skip to the min offset
    pullBatchSize         messages per PULL_MESSAGE (default 256, 1024 with rowFormat=ranges; the broker caps
                          it at 1024)
    minPartitions         split queue ranges until at least this many partitions (default: one per queue)
    maxPartitions         group queue ranges into at most this many partitions, each reading its queues one
                          after the other (default: one per queue). Every task has a fixed cost (its
                          Python workers, scheduling), so many small queues per trigger are cheaper grouped:
                          8 queues on local[2] at ~9.5k msg/s with a 1 s trigger spend 598 ms per batch as
                          2 partitions, 736 ms as 8 (benchmarks/replicator.py; throughput is the same within
                          noise). The replicate job sets it to the application's cores
    reportLatestOffset    true (default): report the queues' max offsets in the query progress
    group                 consumer group committed on the source in commit(end)
                          (default CID_RMQ_SYS_REPLICATOR_<link>, or ..._<hash of the topic selection>)
    commitOffsetsToSource true (default): UPDATE_CONSUMER_OFFSET for ``group`` on every commit(end)
    deltaLocation, link   resume point from ``LinkTables.latest_offsets()`` when the checkpoint is new
    pullTimeoutMs         per-pull timeout (default 10000)
    rowFormat             arrow (default) | tuples: one row per message in the schema above, handed to
                          Spark as Arrow batches or as tuples (slower); raw: one row per pull with the
                          records undecoded (``RAW_SCHEMA_DDL``), for the rocketmq sink; ranges: one row per
                          planned queue range and no data (``RANGES_SCHEMA_DDL``): the rocketmq sink pulls
                          the ranges itself (see "Row formats" below)
    accessKeyEnv, secretKeyEnv  NAMES of environment variables holding the source cluster's ACL keys
                          (default with config+link: the cluster's access_key_env / secret_key_env).
                          Read on the driver; every request is signed (``broker_store.protocol.acl``)
"""

from __future__ import annotations

import functools
import gc
import hashlib
import itertools
import logging
import math
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeoutError
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, DataSourceStreamWriter, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from broker_store.client import Admin, MessageQueue, PullConsumer, PullResult, PullStatus, StoredMessage
from broker_store.client.route_cache import subscribe_queues
from broker_store.protocol.acl import SessionCredentials
from broker_store.protocol.errors import RequestTimeoutError, RocketMQError, TopicNotExistError
from broker_store.protocol.message import (
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    host_to_bytes,
    stored_record_spans,
)
from connectors.config import (
    DEFAULT_CONSUMER_GROUP_PREFIX,
    TopicMappingConfig,
    load_replicator_config,
    resolve_credentials,
)
from connectors.errors import ConfigError, DataLossError, OffsetFormatError, ReplicatorError
from connectors.offsets import QueueKey, SourceOffset
from connectors.tables import LinkTables
from connectors.topic_mapping import TopicMapper, is_system_topic

log = logging.getLogger(__name__)

DATA_SOURCE_NAME = "rocketmq"

# Column names, shared with connectors.sink.
COL_TOPIC = "topic"
COL_BROKER = "brokerName"
COL_QUEUE_ID = "queueId"
COL_QUEUE_OFFSET = "queueOffset"
COL_MSG_ID = "msgId"
COL_OFFSET_MSG_ID = "offsetMsgId"
COL_BODY = "body"
COL_TAGS = "tags"
COL_KEYS = "keys"
COL_PROPERTIES = "properties"
COL_FLAG = "flag"
COL_BORN_TS = "bornTimestamp"
COL_STORE_TS = "storeTimestamp"
COL_BORN_HOST = "bornHost"
COL_RECONSUME = "reconsumeTimes"
COL_SOURCE_CLUSTER = "sourceCluster"
COL_TARGET_TOPIC = "targetTopic"
"""Optional column the sink honours: the target topic of each row."""

SOURCE_SCHEMA_DDL = (
    f"{COL_TOPIC} string, {COL_BROKER} string, {COL_QUEUE_ID} int, {COL_QUEUE_OFFSET} long, "
    f"{COL_MSG_ID} string, {COL_OFFSET_MSG_ID} string, {COL_BODY} binary, {COL_TAGS} string, "
    f"{COL_KEYS} string, {COL_PROPERTIES} map<string,string>, {COL_FLAG} int, "
    f"{COL_BORN_TS} timestamp, {COL_STORE_TS} timestamp, {COL_BORN_HOST} string, "
    f"{COL_RECONSUME} int, {COL_SOURCE_CLUSTER} string"
)
"""Row schema. Timestamps are Spark ``timestamp`` (UTC instants, exact: RocketMQ's ms * 1000 us);
``msgId`` is the client id (UNIQ_KEY, Java's ``MessageClientExt.getMsgId``) or, without one, the
offset id; ``offsetMsgId`` is always the store host + commit-log offset id; ``flag`` is the user flag;
``properties`` holds every property exactly as stored (user and system, TAGS/KEYS/UNIQ_KEY included)."""

ARROW_SCHEMA = pa.schema([
    (COL_TOPIC, pa.string()), (COL_BROKER, pa.string()), (COL_QUEUE_ID, pa.int32()),
    (COL_QUEUE_OFFSET, pa.int64()), (COL_MSG_ID, pa.string()), (COL_OFFSET_MSG_ID, pa.string()),
    (COL_BODY, pa.binary()), (COL_TAGS, pa.string()), (COL_KEYS, pa.string()),
    (COL_PROPERTIES, pa.map_(pa.string(), pa.string())), (COL_FLAG, pa.int32()),
    (COL_BORN_TS, pa.timestamp("us", tz="UTC")), (COL_STORE_TS, pa.timestamp("us", tz="UTC")),
    (COL_BORN_HOST, pa.string()), (COL_RECONSUME, pa.int32()), (COL_SOURCE_CLUSTER, pa.string()),
])

COL_FIRST_OFFSET = "firstOffset"
COL_LAST_OFFSET = "lastOffset"
COL_MESSAGE_COUNT = "messageCount"
COL_RECORDS = "records"

RAW_SCHEMA_DDL = (
    f"{COL_TOPIC} string, {COL_BROKER} string, {COL_QUEUE_ID} int, {COL_FIRST_OFFSET} long, "
    f"{COL_LAST_OFFSET} long, {COL_MESSAGE_COUNT} int, {COL_RECORDS} binary, {COL_SOURCE_CLUSTER} string"
)
"""Row schema of ``rowFormat=raw``: one row per pull, the stored records undecoded (V1 layout, back to
back, as the broker returned them, trimmed to the partition's range and tag-filtered): queue offsets
``firstOffset..lastOffset`` (``messageCount`` records; gaps only where a tag filter dropped records).
Meant for ``writeStream.format("rocketmq")``, which decodes the records itself; used by the replicate
job because it skips two conversions per message (see benchmarks/replicator.py)."""

RAW_ARROW_SCHEMA = pa.schema([
    (COL_TOPIC, pa.string()), (COL_BROKER, pa.string()), (COL_QUEUE_ID, pa.int32()),
    (COL_FIRST_OFFSET, pa.int64()), (COL_LAST_OFFSET, pa.int64()), (COL_MESSAGE_COUNT, pa.int32()),
    (COL_RECORDS, pa.binary()), (COL_SOURCE_CLUSTER, pa.string()),
])

COL_START_OFFSET = "startOffset"
COL_END_OFFSET = "endOffset"
COL_FROM_EARLIEST = "fromEarliest"
COL_SOURCE_NAMESRV = "sourceNamesrv"
COL_CONSUMER_GROUP = "consumerGroup"
COL_TAG_FILTER = "tagFilter"
COL_PULL_BATCH_SIZE = "pullBatchSize"
COL_PULL_TIMEOUT_MS = "pullTimeoutMs"
COL_FAIL_ON_DATA_LOSS = "failOnDataLoss"

RANGES_SCHEMA_DDL = (
    f"{COL_TOPIC} string, {COL_BROKER} string, {COL_QUEUE_ID} int, {COL_START_OFFSET} long, "
    f"{COL_END_OFFSET} long, {COL_FROM_EARLIEST} boolean, {COL_SOURCE_CLUSTER} string, "
    f"{COL_SOURCE_NAMESRV} string, {COL_CONSUMER_GROUP} string, {COL_TAG_FILTER} string, "
    f"{COL_PULL_BATCH_SIZE} int, {COL_PULL_TIMEOUT_MS} int, {COL_FAIL_ON_DATA_LOSS} boolean"
)
"""Row schema of ``rowFormat=ranges``: one row per planned queue range ``[startOffset, endOffset)`` and no
message data, with what pulling it takes (name servers, group, tag filter, pull size and timeout,
failOnDataLoss; ``fromEarliest`` as in ``QueueRange``). For ``writeStream.format("rocketmq")``, which pulls
each range itself and sends as it pulls, so the messages never pass through Spark: the replicate job's
format (see the module docstring)."""

RANGES_ARROW_SCHEMA = pa.schema([
    (COL_TOPIC, pa.string()), (COL_BROKER, pa.string()), (COL_QUEUE_ID, pa.int32()),
    (COL_START_OFFSET, pa.int64()), (COL_END_OFFSET, pa.int64()), (COL_FROM_EARLIEST, pa.bool_()),
    (COL_SOURCE_CLUSTER, pa.string()), (COL_SOURCE_NAMESRV, pa.string()), (COL_CONSUMER_GROUP, pa.string()),
    (COL_TAG_FILTER, pa.string()), (COL_PULL_BATCH_SIZE, pa.int32()), (COL_PULL_TIMEOUT_MS, pa.int32()),
    (COL_FAIL_ON_DATA_LOSS, pa.bool_()),
])

ROW_FORMATS = ("arrow", "tuples", "raw", "ranges")

DEFAULT_PULL_BATCH_SIZE = 256
"""Messages per PULL_MESSAGE (the broker caps one pull at max_pull_msg_nums = 1024 and 4 MiB). Each pull
becomes one Arrow batch handed to Spark, and smaller batches let the sink start sending sooner: in
benchmarks/replicator.py 1024 was ~35 % slower end to end than 256 on local[2]."""
RANGES_PULL_BATCH_SIZE = 1024
"""The default with ``rowFormat=ranges``, where no row carries the pulled messages: fewer, larger pulls cost
the sink's task and the source broker less per message (a task had ~8 % less CPU per message at 1024 than
at 256 in an in-process measurement of the sink's pull-and-send path)."""
DEFAULT_PULL_TIMEOUT_MS = 10_000
_DRIVER_PARALLELISM = 16
"""Concurrent admin calls (min/max offsets, offset commits) the driver makes per trigger."""

T = TypeVar("T")
R = TypeVar("R")


# -- options ---------------------------------------------------------------------------------------

def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items() if v is not None}


def parse_bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    """Read a boolean option ("true"/"false", any case); ConfigError naming the option otherwise."""
    raw = options.get(name.lower())
    if raw is None:
        return default
    value = raw.strip().lower()
    if value not in ("true", "false"):
        raise ConfigError(f"must be true or false, got {raw!r}", field=name)
    return value == "true"


def parse_int(options: Mapping[str, str], name: str, default: int | None, *, minimum: int = 0) -> int | None:
    """Read an integer option >= ``minimum``; ConfigError naming the option otherwise."""
    raw = options.get(name.lower())
    if raw is None:
        return default
    try:
        value = int(raw.strip())
    except ValueError as exc:
        raise ConfigError(f"must be an integer, got {raw!r}", field=name) from exc
    if value < minimum:
        raise ConfigError(f"must be >= {minimum}, got {value}", field=name)
    return value


@dataclass(frozen=True)
class TopicSelection:
    """How the reader picks source topics; re-evaluated on every trigger (driver only)."""

    topics: tuple[str, ...] = ()
    """Fixed topic names (``topics`` option)."""
    pattern: str | None = None
    """``topicPattern``: full-match regex over the source's non-system topics."""
    exclude: str | None = None
    """``topicExclude``: full-match regex removed from the pattern's matches."""
    mapping: TopicMappingConfig | None = None
    """A link's topic mapping (``config`` + ``link``); ``TopicMapper.select`` decides."""

    def describe(self) -> str:
        if self.topics:
            return "topics=" + ",".join(self.topics)
        if self.pattern is not None:
            return f"topicPattern={self.pattern} topicExclude={self.exclude}"
        return "link mapping"

    def select(self, all_topics: Callable[[], Sequence[str]], reserved: Callable[[], Iterable[str]]) -> list[str]:
        """The topics to read now. ``all_topics`` / ``reserved`` are only called when needed."""
        if self.topics:
            return list(self.topics)
        listed = all_topics()
        names = frozenset(reserved())
        if self.mapping is not None:
            # the cluster's and brokers' own topics are system topics, known only at run time
            return sorted(TopicMapper(self.mapping, reserved_names=names).select(listed))
        assert self.pattern is not None
        include = re.compile(self.pattern)
        exclude = re.compile(self.exclude) if self.exclude else None
        return sorted(t for t in listed if include.fullmatch(t) and not is_system_topic(t, names)
                      and not (exclude and exclude.fullmatch(t)))


@dataclass(frozen=True)
class SourceOptions:
    """The reader's options, validated once on the driver (``from_options``)."""

    namesrv: str
    selection: TopicSelection
    cluster: str
    tags: str = "*"
    starting_offsets: str = "latest"
    max_messages_per_trigger: int | None = None
    fail_on_data_loss: bool = True
    pull_batch_size: int = DEFAULT_PULL_BATCH_SIZE
    min_partitions: int | None = None
    max_partitions: int | None = None
    report_latest_offset: bool = True
    group: str = ""
    commit_offsets_to_source: bool = True
    delta_location: str | None = None
    """Root of the link tables; the link's tables are ``<deltaLocation>/<link>``."""
    link: str | None = None
    pull_timeout_ms: int = DEFAULT_PULL_TIMEOUT_MS
    row_format: str = "arrow"
    credentials: SessionCredentials | None = None
    """ACL identity for the source cluster (from the link's cluster or accessKeyEnv / secretKeyEnv),
    resolved on the driver; reaches executors inside the pickled reader, never as a Spark option."""

    @classmethod
    def from_options(cls, raw: Mapping[str, str]) -> SourceOptions:
        opts = _lower(raw)
        link_cfg = None
        config_path = opts.get("config")
        link_name = opts.get("link")
        if config_path is not None:
            if not link_name:
                raise ConfigError("option 'config' needs option 'link' (which link of the file to read)",
                                  field="link")
            replicator = load_replicator_config(config_path)
            link_cfg = replicator.link(link_name)
            cluster_cfg = replicator.cluster(link_cfg.source)
        topics = tuple(t.strip() for t in opts.get("topics", "").split(",") if t.strip())
        pattern = opts.get("topicpattern")
        given = [name for name, value in (("topics", topics), ("topicPattern", pattern),
                                          ("config", link_cfg)) if value]
        if len(given) != 1:
            raise ConfigError(f"give exactly one of topics, topicPattern or config+link (got {given or 'none'})",
                              field="topics")
        if pattern is not None:
            try:
                re.compile(pattern)
                if opts.get("topicexclude"):
                    re.compile(opts["topicexclude"])
            except re.error as exc:
                raise ConfigError(f"invalid regular expression: {exc}", field="topicPattern") from exc
        selection = TopicSelection(
            topics=topics, pattern=pattern, exclude=opts.get("topicexclude"),
            mapping=link_cfg.topics if link_cfg is not None else None)
        namesrv = opts.get("namesrv") or (";".join(cluster_cfg.namesrv) if link_cfg is not None else None)
        if not namesrv:
            raise ConfigError("the source name servers are required ('host:port[;host:port]')", field="namesrv")
        cluster = opts.get("cluster") or (link_cfg.source if link_cfg is not None else None)
        if not cluster:
            raise ConfigError("the source cluster name is required (it is written to every row)", field="cluster")
        tags = opts.get("tags") or (link_cfg.tag_filter if link_cfg is not None else "*")
        default_max = link_cfg.max_messages_per_trigger if link_cfg is not None else None
        group = opts.get("group")
        if not group:
            if link_cfg is not None:
                group = link_cfg.group
            elif link_name:
                group = f"{DEFAULT_CONSUMER_GROUP_PREFIX}{link_name}"
            else:
                digest = hashlib.sha1(selection.describe().encode()).hexdigest()[:12]
                group = f"{DEFAULT_CONSUMER_GROUP_PREFIX}{digest}"
        delta = opts.get("deltalocation") or (link_cfg.delta_location if link_cfg is not None else None)
        if delta is not None and not link_name:
            raise ConfigError("option 'deltaLocation' needs option 'link' (tables live in "
                              "<deltaLocation>/<link>)", field="link")
        row_format = opts.get("rowformat", "arrow").strip().lower()
        if row_format not in ROW_FORMATS:
            raise ConfigError(f"must be one of {', '.join(ROW_FORMATS)}, got {row_format!r}", field="rowFormat")
        starting = opts.get("startingoffsets", "latest").strip()
        _check_starting_offsets(starting)
        min_partitions = parse_int(opts, "minPartitions", None, minimum=1)
        max_partitions = parse_int(opts, "maxPartitions", link_cfg.max_partitions if link_cfg is not None else None,
                                   minimum=1)
        if min_partitions and max_partitions and min_partitions > max_partitions:
            raise ConfigError(f"minPartitions {min_partitions} exceeds maxPartitions {max_partitions}",
                              field="maxPartitions")
        if "accesskeyenv" in opts or "secretkeyenv" in opts:
            credentials = resolve_credentials(opts.get("accesskeyenv"), opts.get("secretkeyenv"),
                                              fields=("accessKeyEnv", "secretKeyEnv"))
        else:
            credentials = cluster_cfg.credentials() if link_cfg is not None else None
        return cls(
            namesrv=namesrv, selection=selection, cluster=cluster, tags=tags, starting_offsets=starting,
            max_messages_per_trigger=parse_int(opts, "maxMessagesPerTrigger", default_max, minimum=1),
            fail_on_data_loss=parse_bool(opts, "failOnDataLoss", True),
            pull_batch_size=parse_int(opts, "pullBatchSize", RANGES_PULL_BATCH_SIZE if row_format == "ranges"
                                      else DEFAULT_PULL_BATCH_SIZE, minimum=1) or 1,
            min_partitions=min_partitions, max_partitions=max_partitions,
            report_latest_offset=parse_bool(opts, "reportLatestOffset", True),
            group=group, commit_offsets_to_source=parse_bool(opts, "commitOffsetsToSource", True),
            delta_location=delta, link=link_name,
            pull_timeout_ms=parse_int(opts, "pullTimeoutMs", DEFAULT_PULL_TIMEOUT_MS, minimum=1)
            or DEFAULT_PULL_TIMEOUT_MS,
            row_format=row_format, credentials=credentials,
        )


def _check_starting_offsets(value: str) -> None:
    lowered = value.lower()
    if lowered in ("earliest", "latest"):
        return
    if lowered.startswith("timestamp:"):
        if not value.split(":", 1)[1].strip().isdigit():
            raise ConfigError(f"{value!r}: expected timestamp:<ms since the epoch>", field="startingOffsets")
        return
    try:
        SourceOffset.from_json(value)
    except OffsetFormatError as exc:
        raise ConfigError(f"not earliest, latest, timestamp:<ms> or an offset document: {exc}",
                          field="startingOffsets") from exc


# -- pure planning helpers -------------------------------------------------------------------------

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


# -- executor side ---------------------------------------------------------------------------------

_heap_frozen = False


def freeze_worker_heap() -> None:
    """Leave the objects alive now (pyspark, pyarrow, this package, the clients) out of every later
    cyclic garbage collection of this process. Executor only, called at the start of each task.

    pyspark's daemon runs ``gc.collect()`` after every task of a reused Python worker; with those
    modules loaded a full collection scans ~60k objects, ~25 ms per task (and per trigger with
    several partitions). ``gc.freeze()`` moves them to the permanent generation: they are still freed
    by reference counting, only cycles among them are never collected, which long-lived module state
    does not form."""
    global _heap_frozen
    if not _heap_frozen:
        _heap_frozen = True
        gc.freeze()


_consumer_lock = threading.Lock()
_consumers: dict[tuple[str, str, int, SessionCredentials | None], PullConsumer] = {}


def _executor_consumer(namesrv: str, group: str, pull_timeout_ms: int,
                       credentials: SessionCredentials | None = None) -> PullConsumer:
    """The executor process's PullConsumer for (name servers, group, credentials); created on first use,
    kept for the life of the Python worker (Spark reuses workers across tasks). No heartbeats: executors
    only pull by offset, they are not group members."""
    key = (namesrv, group, pull_timeout_ms, credentials)
    with _consumer_lock:
        consumer = _consumers.get(key)
        if consumer is None:
            consumer = PullConsumer(namesrv, group, pull_timeout=pull_timeout_ms / 1000, heartbeat_interval=None,
                                    credentials=credentials)
            _consumers[key] = consumer
        return consumer


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


class RawRecords(NamedTuple):
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
    consumer = consumer or _executor_consumer(settings.namesrv, settings.group, settings.pull_timeout_ms,
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


_TIMESTAMP_US = pa.timestamp("us", tz="UTC")
_MS = pa.scalar(1000, pa.int64())


def _ms_to_us(values: list[int]) -> pa.Array:
    return pc.multiply(pa.array(values, pa.int64()), _MS).cast(_TIMESTAMP_US)


@functools.lru_cache(maxsize=256)
def _offset_msg_id_prefix(store_host: str) -> str:
    """The first 16 hex digits of an offset message id (store IPv4 + port), per store host."""
    ip, port = host_to_bytes(store_host)
    return (ip + port.to_bytes(4, "big", signed=True)).hex().upper()


def offset_msg_id(m: StoredMessage) -> str:
    """``m.offset_msg_id`` (store host + commit-log offset, 32 hex digits) with the host part cached."""
    return f"{_offset_msg_id_prefix(m.store_host)}{m.commit_log_offset:016X}"


def messages_to_arrow(messages: Sequence[StoredMessage], broker_name: str, cluster: str) -> pa.RecordBatch:
    """One RecordBatch in ``ARROW_SCHEMA`` for messages of one queue (executor).

    The hot path of the reader: one pass over the messages fills plain lists (the properties map as
    flat key / value lists plus offsets) and each column is built from its list in one call.
    Equivalent to the per-message ``StoredMessage`` accessors (``msg_id``, ``offset_msg_id``, ``tags``)."""
    n = len(messages)
    topics: list[str] = []
    queue_ids: list[int] = []
    queue_offsets: list[int] = []
    msg_ids: list[str] = []
    offset_ids: list[str] = []
    bodies: list[bytes] = []
    tags: list[str | None] = []
    keys: list[str | None] = []
    map_offsets = [0]
    map_keys: list[str] = []
    map_values: list[str] = []
    flags: list[int] = []
    born: list[int] = []
    stored: list[int] = []
    born_hosts: list[str] = []
    reconsume: list[int] = []
    for m in messages:
        props = m.properties
        offset_id = offset_msg_id(m)
        topics.append(m.topic)
        queue_ids.append(m.queue_id)
        queue_offsets.append(m.queue_offset)
        msg_ids.append(props.get(PROPERTY_UNIQ_KEY) or offset_id)
        offset_ids.append(offset_id)
        bodies.append(m.body)
        tags.append(props.get(PROPERTY_TAGS))
        keys.append(props.get(PROPERTY_KEYS))
        map_keys.extend(props)
        map_values.extend(props.values())
        map_offsets.append(len(map_keys))
        flags.append(m.flag)
        born.append(m.born_timestamp)
        stored.append(m.store_timestamp)
        born_hosts.append(m.born_host)
        reconsume.append(m.reconsume_times)
    columns = [
        pa.array(topics, pa.string()),
        pa.array([broker_name] * n, pa.string()),
        pa.array(queue_ids, pa.int32()),
        pa.array(queue_offsets, pa.int64()),
        pa.array(msg_ids, pa.string()),
        pa.array(offset_ids, pa.string()),
        pa.array(bodies, pa.binary()),
        pa.array(tags, pa.string()),
        pa.array(keys, pa.string()),
        pa.MapArray.from_arrays(pa.array(map_offsets, pa.int32()), pa.array(map_keys, pa.string()),
                                pa.array(map_values, pa.string())),
        pa.array(flags, pa.int32()),
        _ms_to_us(born),
        _ms_to_us(stored),
        pa.array(born_hosts, pa.string()),
        pa.array(reconsume, pa.int32()),
        pa.array([cluster] * n, pa.string()),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)


# -- driver side -----------------------------------------------------------------------------------

def _parallel(fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
    if len(items) <= 1:
        return [fn(i) for i in items]
    with ThreadPoolExecutor(max_workers=min(_DRIVER_PARALLELISM, len(items))) as pool:
        return list(pool.map(fn, items))


def _mq(queue: QueueKey) -> MessageQueue:
    return MessageQueue(queue.topic, queue.broker_name, queue.queue_id)


@dataclass
class _DriverState:
    """Mutable driver-only state of a reader; never shipped to executors (``__getstate__`` drops it)."""

    admin: Admin | None = None
    committer: PullConsumer | None = None
    latest: SourceOffset | None = None
    """Max offsets seen by the last ``latestOffset`` (what ``reportLatestOffset`` reports)."""
    available_now_target: SourceOffset | None = None
    committed: dict[QueueKey, int] = field(default_factory=dict)
    """Offsets mirrored to the source's consumer group (owned by the commit thread)."""
    pending_commit: dict[QueueKey, int] | None = None
    """The newest end offsets ``commit`` was given that the commit thread has not taken yet."""
    commit_thread: ThreadPoolExecutor | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)


class RocketMQStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader; see the module docstring for options and for what runs where.

    Contract kept with Spark: ``latestOffset(start, limit)`` never returns less than ``start`` for any
    queue and never more than ``limit`` rows in total; with Trigger.AvailableNow it never passes the
    offsets recorded by ``prepareForTriggerAvailableNow`` and eventually returns ``start`` unchanged.
    ``read`` is stateless; partitions are ``QueueRange`` (plain data).
    """

    def __init__(self, options: Mapping[str, str]) -> None:
        self.options = SourceOptions.from_options(options)
        o = self.options
        self.settings = PullSettings(namesrv=o.namesrv, group=o.group, cluster=o.cluster, tags=o.tags,
                                     pull_batch_size=o.pull_batch_size, fail_on_data_loss=o.fail_on_data_loss,
                                     pull_timeout_ms=o.pull_timeout_ms, row_format=o.row_format,
                                     credentials=o.credentials)
        self._state = _DriverState()

    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options, "settings": self.settings}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.options = state["options"]
        self.settings = state["settings"]
        self._state = _DriverState()

    # -- driver helpers ------------------------------------------------------------------------

    @property
    def _admin(self) -> Admin:
        if self._state.admin is None:
            self._state.admin = Admin(self.options.namesrv, credentials=self.options.credentials)
        return self._state.admin

    def _reserved_names(self) -> list[str]:
        info = self._admin.cluster_info()
        return [*info.cluster_addr_table, *info.broker_addr_table]

    def discover_queues(self) -> list[QueueKey]:
        """Readable queues of the selected topics, now (driver). Missing topics are skipped."""
        topics = self.options.selection.select(self._admin.topic_list, self._reserved_names)
        queues: list[QueueKey] = []
        for topic in topics:
            try:
                route = self._admin.topic_route(topic)
            except TopicNotExistError:
                log.info("source topic %s has no route on %s (yet); skipped", topic, self.options.namesrv)
                continue
            queues.extend(QueueKey(mq.topic, mq.broker_name, mq.queue_id) for mq in subscribe_queues(topic, route))
        return queues

    def _offsets(self, fn: Callable[[MessageQueue], int], queues: Sequence[QueueKey]) -> dict[QueueKey, int]:
        return dict(zip(queues, _parallel(lambda q: fn(_mq(q)), list(queues)), strict=True))

    def _starting(self, queues: Sequence[QueueKey]) -> dict[QueueKey, int]:
        spec = self.options.starting_offsets
        lowered = spec.lower()
        if lowered == "earliest":
            return self._offsets(self._admin.min_offset, queues)
        if lowered == "latest":
            return self._offsets(self._admin.max_offset, queues)
        if lowered.startswith("timestamp:"):
            ts = int(spec.split(":", 1)[1])
            return self._offsets(lambda mq: self._admin.search_offset(mq, ts), queues)
        given = SourceOffset.from_json(spec).queues
        missing = [q for q in queues if q not in given]
        return {**given, **self._offsets(self._admin.min_offset, missing)}

    # -- Spark API (driver) --------------------------------------------------------------------

    def initialOffset(self) -> dict[str, Any]:
        """Offsets of a new checkpoint: the link's Delta resume point if it has one (queues not in the
        table start at earliest: at-least-once), else ``startingOffsets``."""
        queues = self.discover_queues()
        o = self.options
        if o.delta_location is not None and o.link:
            tables = LinkTables(Path(o.delta_location) / o.link, source_cluster=o.cluster)
            resume = tables.latest_offsets()
            if resume:
                missing = [q for q in queues if q not in resume]
                offsets = {**self._offsets(self._admin.min_offset, missing), **resume}
                log.info("resuming %d queue(s) from the Delta offsets table of link %s (%d new queue(s) "
                         "from earliest)", len(resume), o.link, len(missing))
                return SourceOffset.of(offsets).to_dict()
        return SourceOffset.of(self._starting(queues)).to_dict()

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_messages_per_trigger is None:
            return ReadAllAvailable()
        return ReadMaxRows(self.options.max_messages_per_trigger)

    def prepareForTriggerAvailableNow(self) -> None:
        """Record every selected queue's max offset now; later batches never read past them."""
        queues = self.discover_queues()
        self._state.available_now_target = SourceOffset.of(self._offsets(self._admin.max_offset, queues))
        log.info("Trigger.AvailableNow: reading up to the max offsets of %d queue(s)", len(queues))

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin = dict(SourceOffset.from_dict(start).queues)
        queues = self.discover_queues()
        target = self._state.available_now_target
        if target is not None:
            queues = [q for q in queues if q in target.queues]
        new = [q for q in queues if q not in begin]
        first = self._offsets(self._admin.min_offset, new)
        maxes = self._offsets(self._admin.max_offset, queues)
        self._state.latest = SourceOffset.of({**begin, **maxes})
        if target is not None:
            maxes = {q: min(m, target.queues[q]) for q, m in maxes.items()}
        reading = {**begin, **first}
        backlog = {q: max(0, maxes[q] - reading[q]) for q in queues}
        if isinstance(limit, ReadMaxRows):
            take = distribute_limit(backlog, limit.max_rows)
        elif isinstance(limit, ReadMinRows) and sum(backlog.values()) < limit.min_rows and target is None:
            take = {}
        else:
            if not isinstance(limit, ReadAllAvailable | ReadMinRows):
                log.warning("read limit %r is not supported by the rocketmq source; reading all available",
                            limit)
            take = {q: n for q, n in backlog.items() if n > 0}
        end = dict(begin)
        for q, n in take.items():
            end[q] = reading[q] + n  # a new queue joins the offset only once it has rows to read
        return SourceOffset.of(end).to_dict()

    def reportLatestOffset(self) -> dict[str, Any] | None:
        if not self.options.report_latest_offset or self._state.latest is None:
            return None
        return self._state.latest.to_dict()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        ranges = plan_ranges(SourceOffset.from_dict(start), SourceOffset.from_dict(end), self.options.min_partitions)
        return group_ranges(ranges, self.options.max_partitions)

    def commit(self, end: dict[str, Any]) -> None:
        """Spark processed everything below ``end``: mirror it as the consumer group's offsets on the
        source (UPDATE_CONSUMER_OFFSET) so mqadmin-style tools show progress and lag. Advisory only:
        the checkpoint and the Delta offsets table are what the query resumes from, so an error here
        is logged, not raised, and the updates run on a background thread (Spark counts the time of
        ``commit`` in every batch's commitOffsets; the round trips to the source would add ~50-100 ms).
        Ends given while an update runs are coalesced: only the newest is mirrored next. Spark calls
        this lazily (when planning the next batch), so the group trails the query by one batch and the
        last batch of an AvailableNow run is not mirrored."""
        if not self.options.commit_offsets_to_source:
            return
        offsets = SourceOffset.from_dict(end).queues
        state = self._state
        with state.lock:
            queued = state.pending_commit is not None
            state.pending_commit = offsets
            if state.commit_thread is None:
                state.commit_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rocketmq-offset-mirror")
        if not queued:
            state.commit_thread.submit(self._mirror_pending_commit)

    def _mirror_pending_commit(self) -> None:
        """The background half of ``commit``: the newest end offsets, the queues whose offset changed."""
        state = self._state
        with state.lock:
            offsets, state.pending_commit = state.pending_commit, None
        if not offsets:
            return
        changed = [(q, n) for q, n in offsets.items() if state.committed.get(q) != n]
        if not changed:
            return
        if state.committer is None:
            state.committer = PullConsumer(self.options.namesrv, self.options.group, heartbeat_interval=None,
                                           credentials=self.options.credentials)
        committer = state.committer

        def update(item: tuple[QueueKey, int]) -> tuple[QueueKey, int, RocketMQError | None]:
            queue, offset = item
            try:
                committer.update_consumer_offset(_mq(queue), offset)
            except RocketMQError as exc:
                return queue, offset, exc
            return queue, offset, None

        failed = 0
        for queue, offset, error in _parallel(update, changed):
            if error is None:
                state.committed[queue] = offset
            else:
                failed += 1
                log.warning("could not commit offset %d of %s for group %s: %s", offset, queue.to_key(),
                            self.options.group, error)
        log.debug("committed %d queue offset(s) for group %s (%d failed)", len(changed) - failed,
                  self.options.group, failed)

    def stop(self) -> None:
        if self._state.commit_thread is not None:
            self._state.commit_thread.shutdown(wait=True)  # the last mirrored offsets go out first
            self._state.commit_thread = None
        for client in (self._state.admin, self._state.committer):
            if client is not None:
                client.close()
        self._state.admin = self._state.committer = None

    # -- Spark API (executors) -----------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch] | Iterator[tuple[Any, ...]]:
        """Executor: pull the partition's range and yield one Arrow record batch per pull (default), or
        one tuple per message with ``rowFormat=tuples`` (slower: see the report in README / benchmarks)."""
        freeze_worker_heap()
        if self.settings.row_format == "ranges":
            return self._read_ranges(partition.ranges if isinstance(partition, QueueRangeGroup) else [partition])
        if isinstance(partition, QueueRangeGroup):
            return itertools.chain.from_iterable(self._read_range(r) for r in partition.ranges)
        assert isinstance(partition, QueueRange)
        return self._read_range(partition)

    def _read_range(self, partition: QueueRange) -> Iterator[pa.RecordBatch] | Iterator[tuple[Any, ...]]:
        if self.settings.row_format == "tuples":
            return self._read_tuples(partition)
        if self.settings.row_format == "raw":
            return self._read_raw(partition)
        if self.settings.row_format == "ranges":
            return self._read_ranges([partition])
        return (messages_to_arrow(messages, partition.broker_name, self.settings.cluster)
                for messages in pull_range(self.settings, partition))

    def _read_raw(self, partition: QueueRange) -> Iterator[pa.RecordBatch]:
        topic = pa.array([partition.topic], pa.string())
        broker = pa.array([partition.broker_name], pa.string())
        queue_id = pa.array([partition.queue_id], pa.int32())
        cluster = pa.array([self.settings.cluster], pa.string())
        for raw in pull_range_raw(self.settings, partition):
            yield pa.RecordBatch.from_arrays(
                [topic, broker, queue_id, pa.array([raw.first_offset], pa.int64()),
                 pa.array([raw.last_offset], pa.int64()), pa.array([raw.count], pa.int32()),
                 pa.array([raw.records], pa.binary()), cluster], schema=RAW_ARROW_SCHEMA)

    def _read_ranges(self, ranges: Sequence[QueueRange]) -> Iterator[pa.RecordBatch]:
        """One row per range, pulled by the sink (``rowFormat=ranges``); nothing is read here."""
        s = self.settings
        n = len(ranges)
        yield pa.RecordBatch.from_pydict({
            COL_TOPIC: [r.topic for r in ranges], COL_BROKER: [r.broker_name for r in ranges],
            COL_QUEUE_ID: [r.queue_id for r in ranges], COL_START_OFFSET: [r.start for r in ranges],
            COL_END_OFFSET: [r.end for r in ranges], COL_FROM_EARLIEST: [r.from_earliest for r in ranges],
            COL_SOURCE_CLUSTER: [s.cluster] * n, COL_SOURCE_NAMESRV: [s.namesrv] * n,
            COL_CONSUMER_GROUP: [s.group] * n, COL_TAG_FILTER: [s.tags] * n,
            COL_PULL_BATCH_SIZE: [s.pull_batch_size] * n, COL_PULL_TIMEOUT_MS: [s.pull_timeout_ms] * n,
            COL_FAIL_ON_DATA_LOSS: [s.fail_on_data_loss] * n,
        }, schema=RANGES_ARROW_SCHEMA)

    def _read_tuples(self, partition: QueueRange) -> Iterator[tuple[Any, ...]]:
        cluster = self.settings.cluster
        for messages in pull_range(self.settings, partition):
            for m in messages:
                props = m.properties
                yield (m.topic, partition.broker_name, m.queue_id, m.queue_offset, m.msg_id, m.offset_msg_id,
                       m.body, props.get("TAGS"), props.get("KEYS"), dict(props), m.flag,
                       datetime.fromtimestamp(m.born_timestamp / 1000, UTC),
                       datetime.fromtimestamp(m.store_timestamp / 1000, UTC), m.born_host, m.reconsume_times,
                       cluster)


class RocketMQDataSource(DataSource):
    """``format("rocketmq")``: stream reader (this module) and stream writer (``connectors.sink``).

    Instances are pickled to Spark's Python workers; they hold only the options.
    """

    @classmethod
    def name(cls) -> str:
        return DATA_SOURCE_NAME

    def schema(self) -> str:
        fmt = next((str(v) for k, v in self.options.items() if str(k).lower() == "rowformat"), "").strip().lower()
        return {"raw": RAW_SCHEMA_DDL, "ranges": RANGES_SCHEMA_DDL}.get(fmt, SOURCE_SCHEMA_DDL)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return RocketMQStreamReader(self.options)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from connectors.sink import RocketMQStreamWriter  # noqa: PLC0415 - sink imports this module

        return RocketMQStreamWriter(self.options, schema)

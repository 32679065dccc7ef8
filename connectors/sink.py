"""The ``rocketmq`` stream writer: batch-sends the source rows to the target cluster, then commits the
batch to the link's Delta tables.

Created by ``RocketMQDataSource.streamWriter`` (``writeStream.format("rocketmq")``). What runs where:

* driver, at query start: ``RocketMQStreamWriter.__init__`` validates the options and the input
  schema and loads the failure hook once (a bad hook fails the query before any data moves).
* executors, one call per partition and batch: ``write(batches)`` places each message on a target queue,
  sends consecutive messages of one target queue as SEND_BATCH_MESSAGE (bounded count and bytes), keeps
  at most ``maxInFlight`` sends outstanding, retries with exponential backoff, and returns a
  ``ReplicationCommitMessage`` (plain picklable data). It never raises for a message the target
  refuses: the message becomes a ``FailedMessage`` (the whole message) in the commit message.
  Input rows: the source's per-message rows (arrow / tuples, or any query's rows with those columns);
  ``rowFormat=raw`` rows (a pull's stored records, forwarded record by record by
  ``connectors.forwarding`` without decoding them); or ``rowFormat=ranges`` rows, where the task pulls
  each queue range itself (concurrently, one pull in flight per range; the rows carry what pulling
  takes, ``sourceAccessKeyEnv`` / ``sourceSecretKeyEnv`` sign the pulls) and sends as it pulls.

Target unavailable vs. message refused. The failure policy is about messages the target *refuses*
(too big, no permission, topic missing while the cluster is up): those get ``maxRetries`` and are then
recorded. A target that is *down* (connection refused / lost, timeouts, SYSTEM_BUSY,
SERVICE_NOT_AVAILABLE, SYSTEM_ERROR, flush timeouts, or name servers that are unreachable or list no
broker) refuses nothing: the task blocks and retries with doubling backoff capped at
``retryBackoffMaxMs`` for up to ``retryTimeoutMs`` (default 10 minutes), as Kafka Connect / MirrorMaker 2
sinks do. If the outage outlasts that budget the task raises ``TargetUnavailableError``: the batch is
not committed, nothing is recorded as failed, and a restart re-runs it (at-least-once).
* driver, once per batch: ``commit(messages, batchId)`` applies the failure policy
  (``connectors.failure_policy``); a failed batch raises ``BatchFailedError`` so Spark does not commit
  it (the query stops; a restart re-runs the batch: at-least-once). Otherwise it writes the offsets,
  offset map, failures and metrics with ``LinkTables.commit_batch``, idempotent per (query id, batch id).

At-least-once: a row reaches ``commit`` only after the target acknowledged it (SendResult: stored) or
it was recorded as failed; Spark advances the checkpoint's source offsets only after ``commit``
returned; the reader's ``commit(end)`` (consumer group on the source) comes later still.

End offsets of a batch. The Delta offsets table needs every source queue's *next* offset after the
batch, including queues whose rows were all filtered (tags) or skipped, which no row can carry. The
driver commit therefore reads the batch's end offset from Spark's own write-ahead offset log,
``<checkpointLocation>/offsets/<batchId>`` (written before the batch ran; its source line is the
reader's ``SourceOffset`` JSON), and records the queues whose offset changed since ``offsets/<batchId-1>``.
Rows carry a cross-check: each task reports max(queueOffset)+1 per source queue it saw
(``source_next``); an offset log entry below that is an inconsistency and fails the commit. When the
offset log cannot be read (a non-local checkpoint, or a source other than ``rocketmq``), the row-derived
offsets are used, so only queues with rows advance in the table (resuming from it re-reads the rest:
duplicates, never loss).

Options (case-insensitive; ``config`` + ``link`` fill every one from replicator.yaml, explicit
options win)::

    namesrv            target name servers              targetCluster    target cluster name (loop guard)
    sourceCluster      default: each row's sourceCluster  sourceNamesrv   source name servers (queue counts)
    topic              one fixed target topic; else a non-null ``targetTopic`` column; else the link's
                       TopicMapper (config+link); else ``topicMapping`` JSON {"src": "dst"}; else same name
    preserveQueues     true: the n-th queue (by broker name, queue id) of the source topic goes to the n-th
                       queue of the target topic when both have as many queues; otherwise, and without
                       sourceNamesrv, a stable hash of (source broker, queue id) picks the target queue, so
                       one source queue always lands in one target queue (order kept)
    maxInFlight        outstanding batch sends per task (default 4; 1 keeps strict order under retries)
    maxRetries         retries of a refused message (default 3)        retryBackoffMs  first wait (1000)
    retryTimeoutMs     how long to keep retrying while the target is unavailable (default 600000)
    retryBackoffMaxMs  cap of the doubling backoff during an outage (default 10000)
    sendTimeoutMs      per attempt (default 3000)
    batchMaxMessages   messages per SEND_BATCH_MESSAGE (default 256)   batchMaxBytes  body bytes (1 MiB)
    failurePolicy      dismiss | custom                                failureHook    "module:function"
    deltaLocation, link   the link's tables (<deltaLocation>/<link>)  checkpointLocation  (writeStream's)
    producerGroup      default PID_RMQ_SYS_REPLICATOR_<link>           autoCreateTopic  default true
    accessKeyEnv, secretKeyEnv              NAMES of environment variables with the target's ACL keys
    sourceAccessKeyEnv, sourceSecretKeyEnv  the same for sourceNamesrv (default with config+link: the
                       clusters' access_key_env / secret_key_env). Read on the driver; the keys reach
                       executors inside the pickled writer, never as Spark options

Property handling (``target_properties``): every user and system property is copied, except those a
broker or client generates for the cluster it is on, or that would make the target act on the message
again (``DROPPED_PROPERTIES``). UNIQ_KEY is kept, so the client msgId survives (a message without one
gets its source msgId as UNIQ_KEY, so re-sends of the same source message carry the same id), and
ROCKETMQ_REPLICATOR_SOURCE gets the source cluster appended (``connectors.loop_guard.stamp``). Body
bytes and the user flag are sent unchanged. Born timestamp and born host are the replicator's (the
target broker stamps them); the source values stay in the source and in the failures table.
"""

from __future__ import annotations

import itertools
import json
import logging
import random
import threading
import time
import zlib
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from broker_store.client import Admin, MessageQueue, Producer, PullResult, SendResult
from broker_store.client.route_cache import subscribe_queues
from broker_store.protocol.acl import SessionCredentials
from broker_store.protocol.codes import ResponseCode
from broker_store.protocol.errors import ProtocolError, RequestTimeoutError, RocketMQError, TopicNotExistError
from broker_store.protocol.message import (
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    decode_stored_message,
    encode_properties,
)
from connectors import loop_guard
from connectors.config import FailurePolicy, TopicMappingConfig, load_replicator_config, resolve_credentials
from connectors.errors import ConfigError, OffsetFormatError, ReplicatorError, TargetUnavailableError
from connectors.failure_policy import apply_failure_policy, load_failure_hook
from connectors.forwarding import (
    DROPPED_PROPERTIES,
    SKIP,
    ForwardedPull,
    RecordForwarder,
    encode_entry,
    entry_body_length,
    forwarded_properties,
)
from connectors.offsets import QueueKey, SourceOffset
from connectors.records import (
    BatchMetrics,
    FailedMessage,
    LatencySummary,
    OffsetMapping,
    summarise_latencies,
)
from connectors.source import (
    COL_BODY,
    COL_BORN_TS,
    COL_BROKER,
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
    COL_QUEUE_OFFSET,
    COL_RECORDS,
    COL_SOURCE_CLUSTER,
    COL_SOURCE_NAMESRV,
    COL_START_OFFSET,
    COL_STORE_TS,
    COL_TAG_FILTER,
    COL_TAGS,
    COL_TARGET_TOPIC,
    COL_TOPIC,
    PullSettings,
    QueueRange,
    freeze_worker_heap,
    offset_msg_id,
    parse_bool,
    parse_int,
    pull_results,
)
from connectors.tables import LinkTables, query_id_from_checkpoint
from connectors.topic_mapping import TopicMapper

log = logging.getLogger(__name__)

REQUIRED_COLUMNS = (COL_TOPIC, COL_BROKER, COL_QUEUE_ID, COL_QUEUE_OFFSET, COL_BODY)
"""Columns the sink cannot work without; ``properties`` (or at least tags/keys) should be there too."""
RAW_REQUIRED_COLUMNS = (COL_TOPIC, COL_BROKER, COL_QUEUE_ID, COL_RECORDS)
"""The same for the source's ``rowFormat=raw`` rows (records decoded by the sink)."""
RANGES_REQUIRED_COLUMNS = (COL_TOPIC, COL_BROKER, COL_QUEUE_ID, COL_START_OFFSET, COL_END_OFFSET, COL_FROM_EARLIEST,
                           COL_SOURCE_CLUSTER, COL_SOURCE_NAMESRV, COL_CONSUMER_GROUP, COL_TAG_FILTER,
                           COL_PULL_BATCH_SIZE, COL_PULL_TIMEOUT_MS, COL_FAIL_ON_DATA_LOSS)
"""The same for the source's ``rowFormat=ranges`` rows (every column: the sink pulls the ranges itself)."""

DEFAULT_BATCH_MAX_MESSAGES = 256
DEFAULT_BATCH_MAX_BYTES = 1024 * 1024
DEFAULT_SEND_TIMEOUT_MS = 3000
CLIENT_MAX_MESSAGE_SIZE = 1 << 30
"""The producer's own size check is disabled (the target broker's max_message_size decides and its
MESSAGE_ILLEGAL answer becomes a recorded failure)."""
LATENCY_SAMPLES_PER_TASK = 2048
DEFAULT_PRODUCER_GROUP_PREFIX = "PID_RMQ_SYS_REPLICATOR_"


def target_properties(source_properties: Mapping[str, str], source_cluster: str | None,
                      msg_id: str | None = None) -> dict[str, str]:
    """The properties a replicated message is sent with (see ``DROPPED_PROPERTIES``); input untouched.

    ``source_cluster`` None (rows without a cluster name) copies the chain unchanged."""
    props = forwarded_properties(source_properties.items(), msg_id, None)
    return loop_guard.stamp(props, source_cluster) if source_cluster else props


def _checkpoint_dir(location: str) -> Path | None:
    """A local checkpoint path (``file:`` URIs accepted); None for other file systems."""
    if location.startswith("file://"):
        return Path(location[len("file://"):])
    if location.startswith("file:"):
        return Path(location[len("file:"):])
    if "://" in location:
        return None
    return Path(location)


def read_offset_log(checkpoint_location: str, batch_id: int) -> SourceOffset | None:
    """The ``rocketmq`` source's end offset of ``batch_id`` from Spark's offset log, or None.

    ``<checkpoint>/offsets/<batchId>`` is ``v1``, a metadata JSON line, then one line per source; the
    first source line that parses as a ``SourceOffset`` is ours.
    """
    root = _checkpoint_dir(checkpoint_location)
    if root is None or batch_id < 0:
        return None
    try:
        lines = (root / "offsets" / str(batch_id)).read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    for line in lines[2:]:
        try:
            return SourceOffset.from_json(line)
        except OffsetFormatError:
            continue
    return None


# -- options ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SinkOptions:
    """The writer's options, validated on the driver; pickled to executors with the writer."""

    namesrv: str
    target_cluster: str
    source_cluster: str | None = None
    source_namesrv: str | None = None
    topic: str | None = None
    mapping: TopicMappingConfig | None = None
    topic_map: Mapping[str, str] | None = None
    preserve_queues: bool = True
    max_in_flight: int = 4
    max_retries: int = 3
    retry_backoff_ms: int = 1000
    retry_timeout_ms: int = 600_000
    retry_backoff_max_ms: int = 10_000
    send_timeout_ms: int = DEFAULT_SEND_TIMEOUT_MS
    batch_max_messages: int = DEFAULT_BATCH_MAX_MESSAGES
    batch_max_bytes: int = DEFAULT_BATCH_MAX_BYTES
    failure_policy: FailurePolicy = FailurePolicy.DISMISS
    failure_hook: str | None = None
    delta_location: str | None = None
    link: str | None = None
    checkpoint_location: str | None = None
    producer_group: str = f"{DEFAULT_PRODUCER_GROUP_PREFIX}spark"
    auto_create_topic: bool = True
    credentials: SessionCredentials | None = None
    """ACL identity for the target cluster; None = no ACL."""
    source_credentials: SessionCredentials | None = None
    """ACL identity for ``source_namesrv`` (queue-count look-ups); None = no ACL."""

    @property
    def label(self) -> str:
        return self.link or "rocketmq-sink"

    @classmethod
    def from_options(cls, raw: Mapping[str, str]) -> SinkOptions:
        opts = {str(k).lower(): str(v) for k, v in raw.items() if v is not None}
        values: dict[str, Any] = {}
        link_name = opts.get("link")
        if "config" in opts:
            if not link_name:
                raise ConfigError("option 'config' needs option 'link'", field="link")
            replicator = load_replicator_config(opts["config"])
            link = replicator.link(link_name)
            values.update(
                namesrv=";".join(replicator.cluster(link.target).namesrv), target_cluster=link.target,
                source_cluster=link.source, source_namesrv=";".join(replicator.cluster(link.source).namesrv),
                mapping=link.topics, preserve_queues=link.preserve_queues, max_in_flight=link.max_in_flight,
                max_retries=link.max_retries, retry_backoff_ms=link.retry_backoff_ms,
                retry_timeout_ms=link.retry_timeout_ms, retry_backoff_max_ms=link.retry_backoff_max_ms,
                failure_policy=link.failure_policy, failure_hook=link.failure_hook,
                delta_location=link.delta_location, checkpoint_location=link.checkpoint_location,
                credentials=replicator.cluster(link.target).credentials(),
                source_credentials=replicator.cluster(link.source).credentials())
        for key, name in (("namesrv", "namesrv"), ("targetcluster", "target_cluster"),
                          ("sourcecluster", "source_cluster"), ("sourcenamesrv", "source_namesrv"),
                          ("topic", "topic"), ("deltalocation", "delta_location"),
                          ("checkpointlocation", "checkpoint_location"), ("failurehook", "failure_hook")):
            if opts.get(key):
                values[name] = opts[key]
        if "topicmapping" in opts:
            try:
                mapping = json.loads(opts["topicmapping"])
            except json.JSONDecodeError as exc:
                raise ConfigError(f"not JSON: {exc}", field="topicMapping") from exc
            if not isinstance(mapping, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                        for k, v in mapping.items()):
                raise ConfigError('must be a JSON object {"source topic": "target topic"}', field="topicMapping")
            values["topic_map"] = mapping
        if "failurepolicy" in opts:
            try:
                values["failure_policy"] = FailurePolicy(opts["failurepolicy"].strip().lower())
            except ValueError as exc:
                raise ConfigError(f"{opts['failurepolicy']!r} is not one of {[p.value for p in FailurePolicy]}",
                                  field="failurePolicy") from exc
        for key, name, minimum in (("maxInFlight", "max_in_flight", 1), ("maxRetries", "max_retries", 0),
                                   ("retryBackoffMs", "retry_backoff_ms", 0),
                                   ("retryTimeoutMs", "retry_timeout_ms", 0),
                                   ("retryBackoffMaxMs", "retry_backoff_max_ms", 0),
                                   ("sendTimeoutMs", "send_timeout_ms", 1),
                                   ("batchMaxMessages", "batch_max_messages", 1),
                                   ("batchMaxBytes", "batch_max_bytes", 1)):
            parsed = parse_int(opts, key, None, minimum=minimum)
            if parsed is not None:
                values[name] = parsed
        for ak_option, sk_option, name in (("accessKeyEnv", "secretKeyEnv", "credentials"),
                                           ("sourceAccessKeyEnv", "sourceSecretKeyEnv", "source_credentials")):
            ak, sk = opts.get(ak_option.lower()), opts.get(sk_option.lower())
            if ak is not None or sk is not None:
                values[name] = resolve_credentials(ak, sk, fields=(ak_option, sk_option))
        values["preserve_queues"] = parse_bool(opts, "preserveQueues", values.get("preserve_queues", True))
        values["auto_create_topic"] = parse_bool(opts, "autoCreateTopic", True)
        if link_name:
            values["link"] = link_name
        values["producer_group"] = opts.get("producergroup") or (
            f"{DEFAULT_PRODUCER_GROUP_PREFIX}{link_name or 'spark'}")
        for required, option in (("namesrv", "namesrv"), ("target_cluster", "targetCluster")):
            if not values.get(required):
                raise ConfigError("required (or give config + link)", field=option)
        if values.get("failure_policy") is FailurePolicy.CUSTOM and not values.get("failure_hook"):
            raise ConfigError("failurePolicy custom needs failureHook \"module:function\"", field="failureHook")
        if values.get("delta_location") and not link_name:
            raise ConfigError("deltaLocation needs link (tables live in <deltaLocation>/<link>)", field="link")
        if values.get("delta_location") and not values.get("source_cluster"):
            raise ConfigError("deltaLocation needs sourceCluster (the offsets table is per source cluster)",
                              field="sourceCluster")
        if values.get("delta_location") and not values.get("checkpoint_location"):
            raise ConfigError("deltaLocation needs the query's checkpointLocation (the Delta commits are "
                              "idempotent per Spark query id, read from the checkpoint)", field="checkpointLocation")
        return cls(**values)


# -- executor side ---------------------------------------------------------------------------------

_client_lock = threading.Lock()
_producers: dict[tuple[Any, ...], Producer] = {}
_admins: dict[tuple[str, SessionCredentials | None], Admin] = {}


def _executor_producer(o: SinkOptions) -> Producer:
    """The executor process's Producer for these target settings (kept across tasks). Its own retries
    are off: the sink retries with its backoff policy and pins the queue."""
    key = (o.namesrv, o.producer_group, o.send_timeout_ms, o.auto_create_topic, o.credentials)
    with _client_lock:
        producer = _producers.get(key)
        if producer is None:
            producer = Producer(o.namesrv, o.producer_group, send_timeout=o.send_timeout_ms / 1000,
                                retry_times_when_send_failed=0, max_message_size=CLIENT_MAX_MESSAGE_SIZE,
                                auto_create_topic=o.auto_create_topic, credentials=o.credentials)
            _producers[key] = producer
        return producer


_tables_lock = threading.Lock()
_tables: dict[tuple[str, str], LinkTables] = {}


def _link_tables(location: str, source_cluster: str) -> LinkTables:
    """The process's ``LinkTables`` for a link (driver). Spark reuses the Python worker that runs
    ``commit`` across batches, so the open Delta tables are kept and only caught up each batch."""
    with _tables_lock:
        tables = _tables.get((location, source_cluster))
        if tables is None:
            tables = _tables[(location, source_cluster)] = LinkTables(location, source_cluster=source_cluster)
        return tables


def _executor_admin(namesrv: str, credentials: SessionCredentials | None) -> Admin:
    with _client_lock:
        admin = _admins.get((namesrv, credentials))
        if admin is None:
            admin = _admins[(namesrv, credentials)] = Admin(namesrv, credentials=credentials)
        return admin


@dataclass(frozen=True)
class ReplicationCommitMessage(WriterCommitMessage):
    """What one write task reports to the driver's commit. Plain data; picklable."""

    delivered: int
    """Messages the target stored."""
    bytes: int
    """Body bytes the target stored."""
    skipped_loop: int
    """Messages not sent because the target cluster was already in their chain."""
    failures: tuple[FailedMessage, ...]
    """Messages still refused after retries (whole messages, source properties)."""
    offset_map: tuple[OffsetMapping, ...]
    """Source offset runs -> target offset runs, from the SendResults."""
    source_next: Mapping[QueueKey, int]
    """max(queueOffset) + 1 per source queue seen by this task (cross-check of the end offsets)."""
    latency_samples_ms: tuple[int, ...]
    """Up to LATENCY_SAMPLES_PER_TASK samples of (ack time - source born time)."""
    latency: LatencySummary
    """Exact p50 / p99 / max over all of this task's messages."""
    oldest_store_ms: int | None
    started_ms: int
    finished_ms: int
    target_unavailable_retries: int = 0
    """Attempts this task repeated because the target was unavailable (logged by the driver commit)."""


@dataclass
class _Item:
    """A message of the per-message row formats (arrow / tuples): what a failure record is rebuilt from."""

    source: QueueKey
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
class _StoredOrigin:
    """Where a raw-input message came from: its record in a pull's buffer (decoded only on failure)."""

    buffer: bytes
    broker_name: str


@dataclass
class _Batch:
    """Consecutive messages for one target queue, sent as one SEND_BATCH_MESSAGE. Per-entry data is
    kept in parallel lists (the sink's hot path appends whole pulls with list slices)."""

    topic: str
    queue: MessageQueue | None
    """None: the target topic's queues could not be listed; the send fails and is retried / recorded."""
    entries: list[bytes] = field(default_factory=list)
    """Encoded batch entries (``connectors.forwarding``), in send order."""
    offsets: list[int] = field(default_factory=list)
    """Source queue offset of each entry."""
    borns: list[int] = field(default_factory=list)
    """Source born timestamp (ms, 0 unknown) of each entry."""
    origins: list[Any] = field(default_factory=list)
    """Per entry: its ``_Item``, or (``_StoredOrigin``, record start) for raw input."""
    runs: list[tuple[QueueKey, int]] = field(default_factory=list)
    """(source queue, index of its first entry); a new run starts whenever the source queue changes."""
    size: int = 0
    """Body bytes."""

    def source_of(self, index: int) -> QueueKey:
        source = self.runs[0][0]
        for queue, first in self.runs:
            if first > index:
                break
            source = queue
        return source

    def single(self, index: int) -> _Batch:
        """Entry ``index`` alone (a refused batch is retried message by message)."""
        return _Batch(self.topic, self.queue, [self.entries[index]], [self.offsets[index]], [self.borns[index]],
                      [self.origins[index]], [(self.source_of(index), 0)], entry_body_length(self.entries[index]))


_SKIP = SKIP
"""``_PartitionWriter._chain``: the message would close a replication loop."""
_UNKNOWN = object()


@dataclass(frozen=True)
class _Unmapped:
    """``_PartitionWriter._target_for``: no target topic for a source topic; its messages fail."""

    hint: str
    """Target topic recorded with the failures ("" when the link maps none)."""
    error: str


def _driver_logging() -> None:
    """Spark runs ``commit`` in a fresh Python worker without logging configuration; give the
    ``connectors`` loggers a stderr handler there so the per-batch line reaches the driver's log."""
    package = logging.getLogger("connectors")
    if not package.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        package.addHandler(handler)
        package.setLevel(logging.INFO)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _retriable(exc: RocketMQError) -> bool:
    return bool(exc.retriable or exc.invalid_route)


_sleep = time.sleep
_monotonic = time.monotonic
"""Module-level so unit tests can drive the outage retries without waiting."""
_MIN_OUTAGE_BACKOFF_MS = 10
"""Floor of the outage backoff, so retryBackoffMs=0 does not spin on a refused connection."""


class _TargetOutage:
    """Blocking retries while the target cluster is unavailable (see the module docstring); one per
    task, shared by queue placement and sends. Executor only."""

    def __init__(self, options: SinkOptions) -> None:
        self.o = options
        self.retries = 0
        """Attempts (sends and route look-ups) repeated because the target was unavailable."""

    def unavailable(self, error: RocketMQError) -> bool:
        """True when ``error`` says the target cannot take writes now, as opposed to refusing this
        message. Retriable errors always do; a missing route / permission only when the target's name
        servers are unreachable or list no broker at all (every broker down and expired)."""
        if error.retriable:
            return True
        if not error.invalid_route:
            return False
        try:
            info = _executor_admin(self.o.namesrv, self.o.credentials).cluster_info()
        except RocketMQError:
            return True
        return not info.broker_addr_table

    def wait(self, error: RocketMQError, what: str, started: float, waits: int) -> None:
        """Sleep before retry number ``waits`` of an outage that began at ``started`` (monotonic), or
        raise ``TargetUnavailableError`` when ``retryTimeoutMs`` is spent."""
        o = self.o
        elapsed = _monotonic() - started
        budget = o.retry_timeout_ms / 1000
        if elapsed >= budget:
            raise TargetUnavailableError(
                f"link {o.label}: target {o.namesrv} unavailable for {elapsed:.1f}s while sending to {what} "
                f"(retryTimeoutMs {o.retry_timeout_ms}); last error {type(error).__name__}: {error}") from error
        delay_ms = min(o.retry_backoff_max_ms,
                       max(o.retry_backoff_ms, _MIN_OUTAGE_BACKOFF_MS) * (2 ** min(waits, 30)))
        delay = min(max(delay_ms, _MIN_OUTAGE_BACKOFF_MS) / 1000, budget - elapsed)
        if waits % 10 == 0:
            log.warning("link %s: target unavailable (%s: %s) while sending to %s; retrying in %.2fs "
                        "(%.1fs of %.0fs retryTimeoutMs spent)", o.label, type(error).__name__, error, what,
                        delay, elapsed, budget)
        self.retries += 1
        _sleep(delay)


_seen_target_queues: dict[tuple[str, str], list[MessageQueue]] = {}


def _stable_queue_list(namesrv: str, topic: str, queues: list[MessageQueue]) -> list[MessageQueue]:
    """``queues`` (a target topic's writable queues now), unless they are a strict subset of the list this
    executor process saw before: then a broker group is down or not re-registered yet (the name servers
    drop it from the route), and placing on the shrunken list would move source queues to other target
    queues (preserveQueues sees a count mismatch and hashes). The earlier list is kept instead; sends to
    the missing queues wait for their broker like any outage. A process that never saw the full list
    (a fresh executor during a partial outage) cannot tell, and places on what the route says."""
    key = (namesrv, topic)
    with _client_lock:
        seen = _seen_target_queues.get(key)
        if seen is not None and set(queues) < set(seen):
            log.warning("target topic %s: the route lists %d of the %d queues seen before (a broker group is "
                        "down?); keeping the full list so queue placement does not change", topic, len(queues),
                        len(seen))
            return seen
        _seen_target_queues[key] = queues
        return queues


class _QueuePlacement:
    """Source queue -> target queue for one task (see ``preserveQueues``); queue lists cached per task."""

    def __init__(self, options: SinkOptions, producer: Producer, outage: _TargetOutage | None = None) -> None:
        self.options = options
        self.producer = producer
        self.outage = outage or _TargetOutage(options)
        self._target: dict[str, list[MessageQueue] | None] = {}
        self._source: dict[str, list[MessageQueue] | None] = {}
        self._source_namesrv: dict[str, str] = {}
        self._placed: dict[tuple[str, QueueKey], MessageQueue] = {}

    def pulled_from(self, source_topic: str, namesrv: str | None) -> None:
        """Where the rows say a source topic is pulled from (``rowFormat=ranges``): its queues are counted
        there, before the sink's ``sourceNamesrv`` option (which only a job with config + link sets)."""
        if namesrv:
            self._source_namesrv.setdefault(source_topic, namesrv)

    def _target_queues(self, topic: str) -> list[MessageQueue] | None:
        """The target topic's writable queues. While the target is unavailable this waits (an unpinned
        send would break queue preservation); a topic the live target has no writable queue for is
        cached as None and its messages fail under the failure policy."""
        started: float | None = None
        waits = 0
        while topic not in self._target:
            try:
                self._target[topic] = _stable_queue_list(self.options.namesrv, topic,
                                                         sorted(self.producer.writable_queues(topic)))
            except RocketMQError as exc:
                if not self.outage.unavailable(exc):
                    log.warning("no writable queue for target topic %s: %s", topic, exc)
                    self._target[topic] = None
                    break
                started = _monotonic() if started is None else started
                self.outage.wait(exc, f"topic {topic} (route)", started, waits)
                waits += 1
        return self._target[topic]

    def _source_queues(self, topic: str) -> list[MessageQueue] | None:
        namesrv = self._source_namesrv.get(topic) or self.options.source_namesrv
        if namesrv is None:
            return None
        if topic not in self._source:
            try:
                admin = _executor_admin(namesrv, self.options.source_credentials)
                self._source[topic] = subscribe_queues(topic, admin.topic_route(topic))
            except RocketMQError as exc:
                log.warning("cannot list source queues of %s (placement falls back to hashing): %s", topic, exc)
                self._source[topic] = None
        return self._source[topic]

    def forget(self, target_topic: str) -> None:
        """Drop a topic's cached "no writable queue" answer so the next ``place`` looks again."""
        if self._target.get(target_topic, ()) is None:
            del self._target[target_topic]

    def place(self, target_topic: str, source: QueueKey) -> MessageQueue | None:
        placed = self._placed.get((target_topic, source))
        if placed is None:
            placed = self._place(target_topic, source)
            if placed is not None:  # None is retried per row (the topic's queues may show up)
                self._placed[(target_topic, source)] = placed
        return placed

    def _place(self, target_topic: str, source: QueueKey) -> MessageQueue | None:
        targets = self._target_queues(target_topic)
        if not targets:
            return None
        if self.options.preserve_queues:
            sources = self._source_queues(source.topic)
            if sources is not None and len(sources) == len(targets):
                mq = MessageQueue(source.topic, source.broker_name, source.queue_id)
                try:
                    return targets[sources.index(mq)]
                except ValueError:
                    pass
        return targets[zlib.crc32(f"{source.broker_name}/{source.queue_id}".encode()) % len(targets)]


class _PartitionWriter:
    """Sends one task's rows; see ``RocketMQStreamWriter.write``. Executor only, one thread."""

    def __init__(self, options: SinkOptions) -> None:
        self.o = options
        self.producer = _executor_producer(options)
        self.outage = _TargetOutage(options)
        self.placement = _QueuePlacement(options, self.producer, self.outage)
        self.mapper = TopicMapper(options.mapping) if options.mapping is not None else None
        self.in_flight: deque[tuple[Future[SendResult], _Batch]] = deque()
        self.open: dict[tuple[str, MessageQueue | None], _Batch] = {}
        """The batch being filled per target queue (a task's source queues are pulled concurrently, so
        messages for several target queues arrive interleaved)."""
        self.delivered = 0
        self.bytes = 0
        self.skipped = 0
        self.failures: list[FailedMessage] = []
        self.mappings: list[OffsetMapping] = []
        self.source_next: dict[QueueKey, int] = {}
        self.latencies: list[int] = []
        self.oldest_store_ms: int | None = None
        self.started_ms = _now_ms()
        self._source_keys: dict[tuple[str, str, int], QueueKey] = {}
        self._targets: dict[str, str] = {}
        """Source topic -> target topic, for rows without a targetTopic value."""
        self._chains: dict[tuple[str | None, str | None], str | None | object] = {}
        self._forwarders: dict[str | None, RecordForwarder] = {}

    # -- rows -------------------------------------------------------------------------------------

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
            return column.to_pylist()

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
        sends, record by record through ``connectors.forwarding`` (no per-message decoding)."""
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
        offset order and stopping exactly at its end (``connectors.source.pull_results``: data loss,
        offset moves and truncation are handled as the source's reader does). The ranges are pulled
        concurrently, one pull in flight per range, and handled round-robin, so this thread always has
        a response to forward while the next ones travel."""
        active: deque[tuple[QueueRange, str, str | None, Iterator[tuple[int, PullResult]]]] = deque()
        for row in itertools.chain.from_iterable(rb.to_pylist() for rb in batches):
            settings = PullSettings(
                namesrv=row[COL_SOURCE_NAMESRV], group=row[COL_CONSUMER_GROUP], cluster=row[COL_SOURCE_CLUSTER],
                tags=row[COL_TAG_FILTER], pull_batch_size=row[COL_PULL_BATCH_SIZE],
                fail_on_data_loss=row[COL_FAIL_ON_DATA_LOSS], pull_timeout_ms=row[COL_PULL_TIMEOUT_MS],
                row_format="raw", credentials=self.o.source_credentials)
            queue = QueueRange(row[COL_TOPIC], row[COL_BROKER], row[COL_QUEUE_ID], row[COL_START_OFFSET],
                               row[COL_END_OFFSET], row[COL_FROM_EARLIEST])
            self.placement.pulled_from(queue.topic, settings.namesrv)
            active.append((queue, settings.cluster, row.get(COL_TARGET_TOPIC),
                           pull_results(settings, queue, decode=False)))
        while active:
            queue, cluster, target, pulls = active.popleft()
            pulled = next(pulls, None)
            if pulled is None:
                continue
            begin, result = pulled
            if result.raw:
                self.add_pull(result.raw, queue.topic, queue.broker_name, queue.queue_id, cluster, target, begin,
                              queue.end)
            active.append((queue, cluster, target, pulls))

    def _source_key(self, topic: str, broker: str, queue_id: int) -> QueueKey:
        where = (topic, broker, queue_id)
        source = self._source_keys.get(where)
        if source is None:
            source = self._source_keys[where] = QueueKey(*where)
        return source

    def _forwarder(self, source_cluster: str | None) -> RecordForwarder:
        forwarder = self._forwarders.get(source_cluster)
        if forwarder is None:
            forwarder = self._forwarders[source_cluster] = RecordForwarder(
                DROPPED_PROPERTIES, lambda chain: self._chain(chain, source_cluster))
        return forwarder

    def add_pull(self, records: bytes, topic: str, broker: str, queue_id: int, cluster: str | None,
                 column_target: str | None = None, first: int = 0, stop: int = 1 << 63) -> None:
        """Send the stored records of one pull of source queue (topic, broker, queue_id) whose queue
        offsets fall in ``[first, stop)``."""
        source = self._source_key(topic, broker, queue_id)
        try:
            pulled = self._forwarder(self.o.source_cluster or cluster).forward(records, topic, queue_id, first, stop)
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
        origin = _StoredOrigin(records, broker)
        target = self._target_for(source, column_target)
        if isinstance(target, _Unmapped):
            self._fail_origins([(origin, start) for start in pulled.starts], target=target.hint, error=target.error,
                               attempts=0)
            target = target.hint
        else:
            self._append_pull(target, self.placement.place(target, source), source, pulled, origin)
        for start, reason in pulled.refused:
            self._fail_origins([(origin, start)], target=target, error=f"MessageIllegalError: {reason}", attempts=0)

    def _target_for(self, source: QueueKey, column_target: str | None) -> str | _Unmapped:
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
            chain = self._chain(source_props.get(loop_guard.CHAIN_PROPERTY), source_cluster)
            if chain is _SKIP:
                self.skipped += 1
                continue
            body = bodies[i]
            item = _Item(source=source, queue_offset=offset, body=body, born_ms=born[i] or 0, store_ms=store_ms,
                         offset_msg_id=offset_ids[i] or "", source_properties=raw_props,
                         tags=source_props.get(PROPERTY_TAGS), keys=source_props.get(PROPERTY_KEYS))
            target = self._target_for(source, targets[i])
            if isinstance(target, _Unmapped):
                self._fail_origins([item], target=target.hint, error=target.error, attempts=0)
                continue
            props = forwarded_properties(source_props.items(), msg_ids[i], chain)
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

    def _chain(self, chain: str | None, source_cluster: str | None) -> str | None | object:
        """The loop-guard chain a message with ``chain`` from ``source_cluster`` is sent with, or
        ``_SKIP`` when sending it would close a loop (``connectors.loop_guard``); memoised."""
        key = (chain, source_cluster)
        stamped = self._chains.get(key, _UNKNOWN)
        if stamped is _UNKNOWN:
            props = {loop_guard.CHAIN_PROPERTY: chain} if chain is not None else {}
            if loop_guard.should_skip(props, self.o.target_cluster, source_cluster):
                stamped = _SKIP
            elif source_cluster:
                stamped = loop_guard.stamp(props, source_cluster)[loop_guard.CHAIN_PROPERTY]
            else:
                stamped = chain
            self._chains[key] = stamped
        return stamped

    # -- batching and sending ---------------------------------------------------------------------

    def _batch_for(self, topic: str, queue: MessageQueue | None) -> _Batch:
        batch = self.open.get((topic, queue))
        if batch is None:
            batch = self.open[(topic, queue)] = _Batch(topic, queue)
        return batch

    def _submit_open(self, batch: _Batch) -> None:
        del self.open[(batch.topic, batch.queue)]
        self._submit(batch)

    def _append(self, topic: str, queue: MessageQueue | None, source: QueueKey, entry: bytes, size: int,
                offset: int, born_ms: int, origin: Any) -> None:
        batch = self._batch_for(topic, queue)
        if batch.entries and (len(batch.entries) >= self.o.batch_max_messages
                              or batch.size + size > self.o.batch_max_bytes):
            self._submit_open(batch)
            batch = self._batch_for(topic, queue)
        if not batch.runs or batch.runs[-1][0] != source:
            batch.runs.append((source, len(batch.entries)))
        batch.entries.append(entry)
        batch.offsets.append(offset)
        batch.borns.append(born_ms)
        batch.origins.append(origin)
        batch.size += size

    def _append_pull(self, topic: str, queue: MessageQueue | None, source: QueueKey, pulled: ForwardedPull,
                     origin: _StoredOrigin) -> None:
        """``_append`` for a whole pull: fills batches up to the count and byte limits with list slices;
        a batch that is full is sent at once."""
        sizes = pulled.sizes
        i, n = 0, len(sizes)
        max_messages, max_bytes = self.o.batch_max_messages, self.o.batch_max_bytes
        while i < n:
            batch = self._batch_for(topic, queue)
            room = max_messages - len(batch.entries)
            size = batch.size
            j = i
            while j < n and j - i < room and (size + sizes[j] <= max_bytes or (j == i and not batch.entries)):
                size += sizes[j]
                j += 1
            if j > i:
                if not batch.runs or batch.runs[-1][0] != source:
                    batch.runs.append((source, len(batch.entries)))
                batch.entries.extend(pulled.entries[i:j])
                batch.offsets.extend(pulled.offsets[i:j])
                batch.borns.extend(pulled.borns[i:j])
                batch.origins.extend(zip(itertools.repeat(origin), pulled.starts[i:j]))
                batch.size = size
                i = j
            if len(batch.entries) >= max_messages or j < n:  # full (by count or bytes)
                self._submit_open(batch)

    def _send_async(self, batch: _Batch) -> Future[SendResult]:
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
        return self.producer.send_encoded_batch_async(batch.topic, b"".join(batch.entries), batch.queue,
                                                      timeout=self.o.send_timeout_ms / 1000)

    def _submit(self, batch: _Batch) -> None:
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

    def _send_now(self, batch: _Batch) -> SendResult:
        return self._wait(self._send_async(batch))

    def _complete(self, future: Future[SendResult], batch: _Batch) -> None:
        try:
            result = self._wait(future)
        except RocketMQError as exc:
            self._retry(batch, exc)
            return
        self._delivered(batch, result)

    def _retry(self, batch: _Batch, error: RocketMQError, attempts: int = 1) -> None:
        """Retry a failed send (blocking, exponential backoff): without limit but ``retryTimeoutMs`` while
        the target is unavailable, ``maxRetries`` times when it refuses the message; split a refused
        batch into single sends so one bad message does not fail its neighbours; record what still
        fails. Raises ``TargetUnavailableError`` when an outage outlasts ``retryTimeoutMs``."""
        outage_started: float | None = None
        waits = 0
        while True:
            if self.outage.unavailable(error):
                outage_started = _monotonic() if outage_started is None else outage_started
                self.outage.wait(error, str(batch.queue or batch.topic), outage_started, waits)
                waits += 1
            elif _retriable(error) and attempts <= self.o.max_retries:
                outage_started, waits = None, 0
                _sleep(self.o.retry_backoff_ms * (2 ** (attempts - 1)) / 1000)
                attempts += 1
            else:
                break
            try:
                self._delivered(batch, self._send_now(batch))
                return
            except RocketMQError as exc:
                error = exc
        if len(batch.entries) > 1 and not _retriable(error):
            log.info("batch of %d to %s refused (%s); sending its messages one by one", len(batch.entries),
                     batch.queue or batch.topic, error)
            for i in range(len(batch.entries)):
                single = batch.single(i)
                try:
                    self._delivered(single, self._send_now(single))
                except RocketMQError as exc:
                    self._retry(single, exc, 1)
            return
        self._fail_origins(batch.origins, target=batch.topic, error=f"{type(error).__name__}: {error}",
                           attempts=attempts)

    def _fail_origins(self, origins: Sequence[Any], *, target: str, error: str, attempts: int) -> None:
        """Record messages as failed, each rebuilt whole from its origin (``_Batch.origins``)."""
        for origin in origins:
            if isinstance(origin, _Item):
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
                msg_id=offset_msg_id(m), target_topic=target, body=m.body, properties=dict(m.properties),
                error=error, attempts=attempts, tags=m.properties.get(PROPERTY_TAGS),
                keys=m.properties.get(PROPERTY_KEYS), born_timestamp=m.born_timestamp,
                store_timestamp=m.store_timestamp))

    def _delivered(self, batch: _Batch, result: SendResult) -> None:
        now = _now_ms()
        mq = result.message_queue
        first_target = result.queue_offset
        runs, offsets, n = batch.runs, batch.offsets, len(batch.entries)
        for k, (source, first) in enumerate(runs):
            end = runs[k + 1][1] if k + 1 < len(runs) else n
            self._map(source, offsets[first], offsets[end - 1], end - first, mq, first_target + first)
        self.bytes += batch.size
        self.latencies.extend([now - born for born in batch.borns if born])
        self.delivered += n

    def _map(self, src: QueueKey, source_first: int, source_last: int, count: int, mq: MessageQueue,
             target_first: int) -> None:
        target_last = target_first + count - 1
        last = self.mappings[-1] if self.mappings else None
        if (last is not None and last.source_topic == src.topic and last.source_broker == src.broker_name
                and last.source_queue_id == src.queue_id and last.target_topic == mq.topic
                and last.target_broker == mq.broker_name and last.target_queue_id == mq.queue_id
                and last.target_last_offset + 1 == target_first
                and last.source_last_offset < source_first):
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
            oldest_store_ms=self.oldest_store_ms, started_ms=self.started_ms, finished_ms=_now_ms(),
            target_unavailable_retries=self.outage.retries)


# -- the writer ------------------------------------------------------------------------------------

class RocketMQStreamWriter(DataSourceStreamArrowWriter):
    """Stream writer of ``format("rocketmq")``; see the module docstring for what runs where.

    Contract: ``write`` returns only after every row of its partition was either stored by the target
    or recorded as a ``FailedMessage`` (never dropped); ``commit`` raises when the failure policy fails
    the batch (the batch is then not committed and is re-run after a restart).
    """

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.options = SinkOptions.from_options(options)
        names = schema.fieldNames()
        required = (RANGES_REQUIRED_COLUMNS if COL_START_OFFSET in names
                    else RAW_REQUIRED_COLUMNS if COL_RECORDS in names else REQUIRED_COLUMNS)
        missing = [c for c in required if c not in names]
        if missing:
            raise ConfigError(f"the rows lack column(s) {missing}; write the rocketmq source's rows "
                              f"(columns {list(REQUIRED_COLUMNS)} at least, {list(RAW_REQUIRED_COLUMNS)} with "
                              f"rowFormat=raw, or the {list(RANGES_REQUIRED_COLUMNS)} of rowFormat=ranges)",
                              field="schema")
        if self.options.failure_hook:
            load_failure_hook(self.options.failure_hook)  # fail the query now, not at the first failure

    # -- executors -------------------------------------------------------------------------------

    def write(self, iterator: Iterator[pa.RecordBatch]) -> ReplicationCommitMessage:
        """Executor: send this partition's rows; see ``_PartitionWriter``."""
        freeze_worker_heap()
        writer = _PartitionWriter(self.options)
        ranges: list[pa.RecordBatch] = []
        for rb in iterator:
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

    # -- driver ----------------------------------------------------------------------------------

    def _end_offsets(self, batch_id: int, messages: Sequence[ReplicationCommitMessage]) -> dict[QueueKey, int]:
        row_next: dict[QueueKey, int] = {}
        for m in messages:
            for q, n in m.source_next.items():
                row_next[q] = max(n, row_next.get(q, 0))
        checkpoint = self.options.checkpoint_location
        end = read_offset_log(checkpoint, batch_id) if checkpoint else None
        if end is None:
            log.warning("link %s batch %d: no rocketmq offset in the checkpoint's offset log; recording "
                        "offsets only for queues with rows", self.options.label, batch_id)
            return row_next
        behind = {q.to_key(): (n, end.get(q)) for q, n in row_next.items()
                  if end.get(q) is not None and n > (end.get(q) or 0)}
        if behind:
            raise ReplicatorError(f"link {self.options.label} batch {batch_id}: rows past the batch's end offset "
                                  f"(queue: (row next, log end)) {behind}")
        previous = read_offset_log(checkpoint, batch_id - 1) if checkpoint else None
        return {q: n for q, n in end.queues.items() if previous is None or previous.get(q) != n}

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        """Driver: failure policy, then the Delta tables (idempotent per query id and batch id)."""
        _driver_logging()
        o = self.options
        if any(not isinstance(m, ReplicationCommitMessage) for m in messages):
            raise ReplicatorError(f"link {o.label} batch {batchId}: a write task returned no commit message")
        results = [m for m in messages if isinstance(m, ReplicationCommitMessage)]
        failures = [f for m in results for f in m.failures]
        hook = load_failure_hook(o.failure_hook) if (failures and o.failure_hook) else None
        decision = apply_failure_policy(o.failure_policy, failures, hook)
        if decision.batch_failed:
            log.error("link %s batch %d: failure policy %s failed the batch (%d failed message(s)); not "
                      "committing", o.label, batchId, o.failure_policy.value, len(failures))
        decision.raise_if_failed(link=o.label, batch_id=batchId)
        now = _now_ms()
        samples = [s for m in results for s in m.latency_samples_ms]
        summary = summarise_latencies(samples)
        maxima = [m.latency.max_ms for m in results if m.latency.max_ms is not None]
        if maxima:
            summary = LatencySummary(summary.p50_ms, summary.p99_ms, max(maxima))
        oldest = [m.oldest_store_ms for m in results if m.oldest_store_ms is not None]
        metrics = BatchMetrics(
            messages=sum(m.delivered for m in results), bytes=sum(m.bytes for m in results),
            skipped_loop=sum(m.skipped_loop for m in results), failed=len(failures), latency=summary,
            record_age_ms=now - min(oldest) if oldest else None,
            wall_time_ms=now - min((m.started_ms for m in results), default=now))
        end_offsets = self._end_offsets(batchId, results)
        committed = "no Delta tables (deltaLocation not set)"
        if o.delta_location and o.link and o.checkpoint_location:
            tables = _link_tables(str(Path(o.delta_location) / o.link), o.source_cluster or "")
            query_id = query_id_from_checkpoint(_checkpoint_dir(o.checkpoint_location) or Path(o.checkpoint_location))
            commit_started = time.monotonic()
            result = tables.commit_batch(query_id, batchId, end_offsets,
                                         [mp for m in results for mp in m.offset_map], decision.recorded(),
                                         metrics)
            committed = ("already committed (replayed batch)" if result.duplicate else
                         f"committed to Delta in {(time.monotonic() - commit_started) * 1000:.0f} ms")
        else:
            for f in failures:
                log.warning("link %s batch %d: dismissed failed message %s/%s/%d@%d (%s) - not recorded: no "
                            "deltaLocation", o.label, batchId, f.topic, f.broker_name, f.queue_id,
                            f.queue_offset, f.error)
        log.info("link %s batch %d: %d delivered, %d bytes, %d skipped (loop), %d failed (dismissed), "
                 "%d queue offset(s) advanced, latency p50/p99/max %s/%s/%s ms, slowest task %d ms, %d retries "
                 "while the target was unavailable; %s", o.label, batchId, metrics.messages, metrics.bytes,
                 metrics.skipped_loop, metrics.failed, len(end_offsets), summary.p50_ms, summary.p99_ms, summary.max_ms,
                 max((m.finished_ms - m.started_ms for m in results), default=0),
                 sum(m.target_unavailable_retries for m in results), committed)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        """Driver: a write task failed. Messages already sent stay on the target (they are re-sent when
        the batch re-runs: at-least-once); nothing is recorded for this batch."""
        _driver_logging()
        sent = sum(m.delivered for m in messages if isinstance(m, ReplicationCommitMessage))
        log.warning("link %s batch %d aborted; %d message(s) already on the target will be sent again when "
                    "the batch re-runs", self.options.label, batchId, sent)

"""A link's Delta tables: source offsets, source->target offset map, failures and batch metrics.

Written on the driver by the sink's ``commit(messages, batchId)`` through ``LinkTables.commit_batch``;
read by the source's ``initialOffset`` (``latest_offsets``, when the Spark checkpoint is gone) and by
``jobs.replay_failures`` (``unreplayed_failures`` / ``mark_replayed``). Uses delta-rs (``deltalake``),
not Spark: the tables are plain Delta (protocol reader 1 / writer 2, no table features, no partition
columns, no deletion vectors), readable by any Delta reader.

Layout, one directory per link (``LinkConfig.tables_location``)::

    <delta_location>/<link>/offsets/      append-only; newest row per queue = resume point
    <delta_location>/<link>/offset_map/   append-only; source offset runs -> target offset runs
    <delta_location>/<link>/failures/     one row per failed message; `replayed` updated in place
    <delta_location>/<link>/metrics/      one row per batch

Idempotency per (query id, batch id). Every batch commit of a table carries a Delta ``txn`` action
``{"appId": <Spark query id>, "version": <batch id>}`` (``CommitProperties(app_transactions=[...])``);
before writing, ``commit_batch`` reads ``DeltaTable.transaction_version(query id)`` and skips the
table when it is already >= the batch id, as Spark's own Delta sink does. delta-rs does not enforce
monotonic versions itself, but its conflict checker fails a commit when a concurrent commit carried a
txn for the same app id ("Concurrent transaction failed"); ``commit_batch`` then re-reads the version
and treats the batch as done if the other writer committed it. Spark keeps the query id across
restarts from the same checkpoint, so a re-run batch finds its txn and writes nothing twice.

The four tables are separate Delta tables, so a batch commit is four commits: failures, offset_map
and metrics concurrently, then offsets once all three succeeded. A crash in between leaves some of the
first three; the re-run of the batch completes them (each table checks its own txn). Offsets go last
so a resume point never moves past a failure that is not recorded.

Maintenance. Each batch appends one small file per table, so a query that runs for days would leave
tens of thousands of files and a snapshot that grows with them. Every ``compact_every`` batches (500
by default) ``commit_batch`` compacts each table into a few files (``optimize.compact``, a data-neutral
commit that keeps every txn), writes a checkpoint and vacuums files unreferenced for longer than the
7-day default retention, so readers time-travelling within a week are not affected.

Table format version: ``TABLE_FORMAT_VERSION``, written into each table's description on creation
(delta-rs refuses custom ``configuration`` keys).
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import CommitFailedError, DeltaError

from connectors.config import LinkConfig
from connectors.errors import TableError
from connectors.offsets import QueueKey
from connectors.records import (
    BatchMetrics,
    FailedMessage,
    FailureOutcome,
    OffsetMapping,
    RecordedFailure,
)

log = logging.getLogger(__name__)

TABLE_FORMAT_VERSION = 1
OFFSETS = "offsets"
OFFSET_MAP = "offset_map"
FAILURES = "failures"
METRICS = "metrics"
COMMIT_ORDER = (FAILURES, OFFSET_MAP, METRICS, OFFSETS)
"""Order of the per-table commits of one batch; offsets last (see the module docstring)."""

_TS = pa.timestamp("us", tz="UTC")
_FAILURE_ID_NAMESPACE = uuid.UUID("6f1c5d0e-3a4b-5c6d-8e9f-0a1b2c3d4e5f")
_MARK_CHUNK = 500

OFFSETS_SCHEMA = pa.schema([
    ("cluster", pa.string()),           # source cluster name
    ("topic", pa.string()),
    ("broker_name", pa.string()),
    ("queue_id", pa.int32()),
    ("next_offset", pa.int64()),        # first source queue offset not yet replicated
    ("batch_id", pa.int64()),
    ("query_id", pa.string()),
    ("commit_version", pa.int64()),     # table version read before the commit + 1: orders rows across
                                        # queries (batch ids restart when a checkpoint is lost)
    ("updated_at", _TS),
])
OFFSET_MAP_SCHEMA = pa.schema([
    ("source_topic", pa.string()),
    ("source_broker", pa.string()),
    ("source_queue_id", pa.int32()),
    ("source_first_offset", pa.int64()),
    ("source_last_offset", pa.int64()),
    ("target_topic", pa.string()),
    ("target_broker", pa.string()),
    ("target_queue_id", pa.int32()),
    ("target_first_offset", pa.int64()),
    ("target_last_offset", pa.int64()),
    ("messages", pa.int64()),
    ("batch_id", pa.int64()),
    ("query_id", pa.string()),
    ("committed_at", _TS),
])
FAILURES_SCHEMA = pa.schema([
    ("failure_id", pa.string()),        # uuid5(query id, batch id, source queue, offset), 32 hex chars
    ("query_id", pa.string()),
    ("batch_id", pa.int64()),
    ("topic", pa.string()),
    ("broker_name", pa.string()),
    ("queue_id", pa.int32()),
    ("queue_offset", pa.int64()),
    ("msg_id", pa.string()),
    ("target_topic", pa.string()),
    ("body", pa.binary()),
    ("properties", pa.map_(pa.string(), pa.string())),
    ("tags", pa.string()),
    ("keys", pa.string()),
    ("born_timestamp", pa.int64()),     # ms since the epoch
    ("store_timestamp", pa.int64()),    # ms since the epoch
    ("error", pa.string()),
    ("attempts", pa.int32()),
    ("policy", pa.string()),            # dismiss | custom
    ("outcome", pa.string()),           # FailureOutcome value
    ("failed_at", _TS),
    ("replayed", pa.bool_()),
    ("replayed_at", _TS),
])
METRICS_SCHEMA = pa.schema([
    ("query_id", pa.string()),
    ("batch_id", pa.int64()),
    ("messages", pa.int64()),
    ("bytes", pa.int64()),
    ("skipped_loop", pa.int64()),
    ("failed", pa.int64()),
    ("latency_p50_ms", pa.int64()),
    ("latency_p99_ms", pa.int64()),
    ("latency_max_ms", pa.int64()),
    ("record_age_ms", pa.int64()),
    ("wall_time_ms", pa.int64()),
    ("committed_at", _TS),
])
SCHEMAS: Mapping[str, pa.Schema] = {
    OFFSETS: OFFSETS_SCHEMA,
    OFFSET_MAP: OFFSET_MAP_SCHEMA,
    FAILURES: FAILURES_SCHEMA,
    METRICS: METRICS_SCHEMA,
}


def failure_id(query_id: str, batch_id: int, queue: QueueKey, queue_offset: int) -> str:
    """Deterministic id of a failure row: a re-run of the batch yields the same id."""
    name = "\n".join((query_id, str(batch_id), queue.topic, queue.broker_name, str(queue.queue_id),
                      str(queue_offset)))
    return uuid.uuid5(_FAILURE_ID_NAMESPACE, name).hex


def query_id_from_checkpoint(checkpoint_location: str | Path) -> str:
    """The Spark query id stored in ``<checkpoint>/metadata`` (``{"id": "<uuid>"}``).

    Python stream writers are not told the query id; the sink's commit reads it here. It is the id
    Spark keeps across restarts from the same checkpoint, hence the right Delta txn app id.
    """
    path = Path(checkpoint_location) / "metadata"
    try:
        first_line = path.read_text(encoding="utf-8").splitlines()[0]
        query_id = json.loads(first_line)["id"]
    except (OSError, IndexError, KeyError, TypeError, json.JSONDecodeError) as exc:
        raise TableError(f"cannot read the Spark query id from {path}: {exc!r}") from exc
    if not isinstance(query_id, str) or not query_id:
        raise TableError(f"{path}: 'id' is {query_id!r}, not a query id")
    return query_id


def _ts(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def _ms(value: datetime | None) -> int | None:
    return None if value is None else int(value.timestamp() * 1000)


@dataclass(frozen=True)
class CommitResult:
    """What ``commit_batch`` did, per table: True = rows appended, False = skipped."""

    written: Mapping[str, bool]
    already_committed: frozenset[str]
    """Tables skipped because their txn for the query id was already >= the batch id."""

    @property
    def duplicate(self) -> bool:
        """True when every table with rows had this batch already (a replayed commit)."""
        return not any(self.written.values()) and bool(self.already_committed)


@dataclass(frozen=True)
class StoredFailure:
    """A failures-table row read back for replay."""

    failure_id: str
    query_id: str
    batch_id: int
    message: FailedMessage
    policy: str
    outcome: FailureOutcome
    failed_at_ms: int
    replayed: bool
    replayed_at_ms: int | None


class LinkTables:
    """The four Delta tables of one link. Driver only; not thread-safe; one writer query per link."""

    def __init__(self, location: str | Path, *, source_cluster: str,
                 clock_ms: Callable[[], int] | None = None,
                 storage_options: Mapping[str, str] | None = None, compact_every: int = 500) -> None:
        """``location``: the link's directory (``<delta_location>/<link>``); tables are created lazily.
        ``compact_every``: batches between two compactions (see Maintenance above); 0 = never.

        ``clock_ms`` (ms since the epoch) stamps ``updated_at`` / ``failed_at`` / ``replayed_at``.
        """
        self.location = str(location)
        self.source_cluster = source_cluster
        self._clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        self._storage_options = dict(storage_options) if storage_options else None
        if compact_every < 0:
            raise ValueError(f"compact_every must be >= 0, got {compact_every}")
        self.compact_every = compact_every
        self._opened: dict[str, DeltaTable] = {}
        """Tables opened before, brought up to date incrementally on the next ``open`` (re-reading the
        whole log costs ~40 ms per table at 60 versions, once per batch and table: a streaming query's
        fixed cost per trigger)."""

    @classmethod
    def for_link(cls, link: LinkConfig, **kwargs: Any) -> LinkTables:
        return cls(link.tables_location, source_cluster=link.source, **kwargs)

    def path(self, table: str) -> str:
        if table not in SCHEMAS:
            raise ValueError(f"unknown table {table!r}; tables: {sorted(SCHEMAS)}")
        return f"{self.location.rstrip('/')}/{table}"

    # -- reading ---------------------------------------------------------------------------------

    def open(self, table: str) -> DeltaTable | None:
        """The table at its newest version, or ``None`` if it was never written."""
        path = self.path(table)
        cached = self._opened.get(table)
        if cached is not None:
            try:
                if DeltaTable.is_deltatable(path, storage_options=self._storage_options):
                    cached.update_incremental()
                    return cached
            except (DeltaError, OSError) as exc:
                log.debug("re-opening Delta table %s: %s", path, exc)
            del self._opened[table]  # gone or replaced: open it afresh
        try:
            if not DeltaTable.is_deltatable(path, storage_options=self._storage_options):
                return None
            dt = self._opened[table] = DeltaTable(path, storage_options=self._storage_options)
            return dt
        except (DeltaError, OSError) as exc:
            raise TableError(f"cannot open Delta table {path}: {exc}") from exc

    def read(self, table: str) -> pa.Table:
        """The whole table (empty, with the schema, if never written)."""
        dt = self.open(table)
        if dt is None:
            return SCHEMAS[table].empty_table()
        try:
            return dt.to_pyarrow_table()
        except (DeltaError, OSError, pa.ArrowException) as exc:
            raise TableError(f"cannot read Delta table {self.path(table)}: {exc}") from exc

    def committed_batch(self, query_id: str, table: str = OFFSETS) -> int | None:
        """Highest batch id of ``query_id`` committed to ``table`` (its Delta txn version), or None."""
        dt = self.open(table)
        return None if dt is None else dt.transaction_version(query_id)

    def latest_offsets(self) -> dict[QueueKey, int]:
        """Resume point: next offset per source queue, from each queue's newest offsets row.

        Newest = highest ``commit_version`` (then ``batch_id``, then ``updated_at``): Delta versions only
        grow, so this orders rows across queries even though batch ids restart with a new checkpoint.
        Rows of another source cluster (the link was re-pointed) are ignored.
        """
        dt = self.open(OFFSETS)
        if dt is None:
            return {}
        columns = ["cluster", "topic", "broker_name", "queue_id", "next_offset", "commit_version", "batch_id",
                   "updated_at"]
        try:
            rows = dt.to_pyarrow_table(columns=columns)
        except (DeltaError, OSError, pa.ArrowException) as exc:
            raise TableError(f"cannot read Delta table {self.path(OFFSETS)}: {exc}") from exc
        rows = rows.filter(pc.equal(rows["cluster"], self.source_cluster))
        if rows.num_rows == 0:
            return {}
        ordered = rows.sort_by([("commit_version", "ascending"), ("batch_id", "ascending"),
                                ("updated_at", "ascending")])
        latest = ordered.group_by(["topic", "broker_name", "queue_id"], use_threads=False).aggregate(
            [("next_offset", "last")])
        return {
            QueueKey(row["topic"], row["broker_name"], row["queue_id"]): row["next_offset_last"]
            for row in latest.to_pylist()
        }

    def unreplayed_failures(self) -> list[StoredFailure]:
        """Failures not yet replayed, in source order (topic, broker, queue, offset) then failure id."""
        dt = self.open(FAILURES)
        if dt is None:
            return []
        try:
            rows = dt.to_pyarrow_table(filters=[("replayed", "=", False)])
        except (DeltaError, OSError, pa.ArrowException) as exc:
            raise TableError(f"cannot read Delta table {self.path(FAILURES)}: {exc}") from exc
        rows = rows.sort_by([("topic", "ascending"), ("broker_name", "ascending"), ("queue_id", "ascending"),
                             ("queue_offset", "ascending"), ("failure_id", "ascending")])
        return [self._stored_failure(row) for row in rows.to_pylist()]

    @staticmethod
    def _stored_failure(row: Mapping[str, Any]) -> StoredFailure:
        message = FailedMessage(
            topic=row["topic"], broker_name=row["broker_name"], queue_id=row["queue_id"],
            queue_offset=row["queue_offset"], msg_id=row["msg_id"], target_topic=row["target_topic"],
            body=row["body"], properties=dict(row["properties"] or ()), error=row["error"],
            attempts=row["attempts"], tags=row["tags"], keys=row["keys"],
            born_timestamp=row["born_timestamp"], store_timestamp=row["store_timestamp"],
        )
        return StoredFailure(
            failure_id=row["failure_id"], query_id=row["query_id"], batch_id=row["batch_id"], message=message,
            policy=row["policy"], outcome=FailureOutcome(row["outcome"]),
            failed_at_ms=_ms(row["failed_at"]) or 0, replayed=bool(row["replayed"]),
            replayed_at_ms=_ms(row["replayed_at"]),
        )

    # -- writing ---------------------------------------------------------------------------------

    def commit_batch(self, query_id: str, batch_id: int, offsets_rows: Mapping[QueueKey, int],
                     map_rows: Sequence[OffsetMapping], failure_rows: Sequence[RecordedFailure],
                     metrics_row: BatchMetrics) -> CommitResult:
        """Record one micro-batch, at most once per (query id, batch id), whatever the number of calls.

        ``offsets_rows``: next source offset of every queue the batch advanced. ``failure_rows`` must all
        be ``DISMISSED`` (a failed batch is never committed). One append per table with rows.
        """
        if not query_id:
            raise ValueError("query_id must be a non-empty string")
        if batch_id < 0:
            raise ValueError(f"batch_id must be >= 0, got {batch_id}")
        blocked = [r for r in failure_rows if r.outcome is not FailureOutcome.DISMISSED]
        if blocked:
            raise ValueError(f"{len(blocked)} failure row(s) are {blocked[0].outcome.value}; a failed batch "
                             f"must not be committed")
        now_ms = self._clock_ms()
        builders: dict[str, Callable[[DeltaTable | None], list[dict[str, Any]]]] = {
            FAILURES: lambda _dt: self._failure_rows(query_id, batch_id, failure_rows, now_ms),
            OFFSET_MAP: lambda _dt: self._map_rows(query_id, batch_id, map_rows, now_ms),
            METRICS: lambda _dt: [self._metrics_row(query_id, batch_id, metrics_row, now_ms)],
            OFFSETS: lambda dt: self._offset_rows(query_id, batch_id, offsets_rows, now_ms,
                                                  0 if dt is None else dt.version() + 1),
        }
        # The tables before offsets are independent: committed concurrently (delta-rs writes without
        # holding the GIL); offsets only once they all succeeded (see the module docstring).
        *first, last = COMMIT_ORDER
        with ThreadPoolExecutor(max_workers=len(first), thread_name_prefix="delta-commit") as pool:
            futures = {table: pool.submit(self._append_once, table, query_id, batch_id, builders[table], now_ms)
                       for table in first}
        outcomes = {table: future.result() for table, future in futures.items()}  # raises the first error
        outcomes[last] = self._append_once(last, query_id, batch_id, builders[last], now_ms)
        written = {table: outcome is True for table, outcome in outcomes.items()}
        already = {table for table, outcome in outcomes.items() if outcome is None}
        if self.compact_every and batch_id and batch_id % self.compact_every == 0 and any(written.values()):
            self.compact()
        return CommitResult(written, frozenset(already))

    def compact(self) -> None:
        """Compact every table, checkpoint it and vacuum expired files (see Maintenance above).
        Best effort: a table that cannot be compacted now (a concurrent writer, an I/O error) is
        logged and left for the next round; the data and the txns are never affected."""
        for table in COMMIT_ORDER:
            dt = self.open(table)
            if dt is None:
                continue
            try:
                stats = dt.optimize.compact()
                dt.create_checkpoint()
                removed = dt.vacuum(dry_run=False)
            except (DeltaError, OSError) as exc:
                log.warning("compaction of Delta table %s skipped: %s", self.path(table), exc)
                continue
            log.info("compacted Delta table %s: %s files -> %s, %d expired files vacuumed", self.path(table),
                     stats.get("numFilesRemoved"), stats.get("numFilesAdded"), len(removed))

    def _append_once(self, table: str, query_id: str, batch_id: int,
                     build: Callable[[DeltaTable | None], list[dict[str, Any]]], now_ms: int) -> bool | None:
        """Append ``build``'s rows with txn (query_id, batch_id). True = written, False = no rows,
        None = the txn was already there (this batch was committed before)."""
        dt = self.open(table)
        if dt is not None and self._has_batch(dt, query_id, batch_id):
            return None
        rows = build(dt)
        if not rows:
            return False
        path = self.path(table)
        data = pa.Table.from_pylist(rows, schema=SCHEMAS[table])
        commit = CommitProperties(
            app_transactions=[Transaction(query_id, batch_id, now_ms)],
            custom_metadata={"rocketmq_replicator.batch_id": batch_id,
                             "rocketmq_replicator.query_id": query_id},
        )
        try:
            if dt is None:  # name and description are set once, by the commit that creates the table
                write_deltalake(path, data, mode="append", commit_properties=commit,
                                storage_options=self._storage_options,
                                name=f"{Path(self.location).name}.{table}",
                                description=f"rocketmq-replicator {table} table, "
                                            f"format {TABLE_FORMAT_VERSION}")
            else:
                write_deltalake(dt, data, mode="append", commit_properties=commit)
        except CommitFailedError as exc:
            # A concurrent writer won. If it committed this very batch, we are done; otherwise let the
            # caller re-run the batch commit (retriable).
            fresh = self.open(table)
            if fresh is not None and self._has_batch(fresh, query_id, batch_id):
                return None
            raise TableError(f"commit of batch {batch_id} (query {query_id}) to {path} failed: "
                             f"{exc}") from exc
        except (DeltaError, OSError, pa.ArrowException) as exc:
            raise TableError(f"cannot append batch {batch_id} (query {query_id}) to {path}: {exc}") from exc
        return True

    @staticmethod
    def _has_batch(dt: DeltaTable, query_id: str, batch_id: int) -> bool:
        version = dt.transaction_version(query_id)
        return version is not None and version >= batch_id

    def _offset_rows(self, query_id: str, batch_id: int, offsets: Mapping[QueueKey, int], now_ms: int,
                     commit_version: int) -> list[dict[str, Any]]:
        return [
            {"cluster": self.source_cluster, "topic": q.topic, "broker_name": q.broker_name,
             "queue_id": q.queue_id, "next_offset": offset, "batch_id": batch_id, "query_id": query_id,
             "commit_version": commit_version, "updated_at": _ts(now_ms)}
            for q, offset in sorted(offsets.items(), key=lambda item: item[0].to_key())
        ]

    @staticmethod
    def _map_rows(query_id: str, batch_id: int, mappings: Iterable[OffsetMapping],
                  now_ms: int) -> list[dict[str, Any]]:
        return [
            {"source_topic": m.source_topic, "source_broker": m.source_broker,
             "source_queue_id": m.source_queue_id, "source_first_offset": m.source_first_offset,
             "source_last_offset": m.source_last_offset, "target_topic": m.target_topic,
             "target_broker": m.target_broker, "target_queue_id": m.target_queue_id,
             "target_first_offset": m.target_first_offset, "target_last_offset": m.target_last_offset,
             "messages": m.messages, "batch_id": batch_id, "query_id": query_id, "committed_at": _ts(now_ms)}
            for m in mappings
        ]

    @staticmethod
    def _failure_rows(query_id: str, batch_id: int, failures: Iterable[RecordedFailure],
                      now_ms: int) -> list[dict[str, Any]]:
        rows = []
        for recorded in failures:
            m = recorded.message
            rows.append({
                "failure_id": failure_id(query_id, batch_id, m.queue, m.queue_offset),
                "query_id": query_id, "batch_id": batch_id, "topic": m.topic, "broker_name": m.broker_name,
                "queue_id": m.queue_id, "queue_offset": m.queue_offset, "msg_id": m.msg_id,
                "target_topic": m.target_topic, "body": m.body, "properties": sorted(m.properties.items()),
                "tags": m.tags, "keys": m.keys, "born_timestamp": m.born_timestamp,
                "store_timestamp": m.store_timestamp, "error": m.error, "attempts": m.attempts,
                "policy": recorded.policy, "outcome": recorded.outcome.value, "failed_at": _ts(now_ms),
                "replayed": False, "replayed_at": None,
            })
        return rows

    @staticmethod
    def _metrics_row(query_id: str, batch_id: int, metrics: BatchMetrics, now_ms: int) -> dict[str, Any]:
        return {
            "query_id": query_id, "batch_id": batch_id, "messages": metrics.messages, "bytes": metrics.bytes,
            "skipped_loop": metrics.skipped_loop, "failed": metrics.failed,
            "latency_p50_ms": metrics.latency.p50_ms, "latency_p99_ms": metrics.latency.p99_ms,
            "latency_max_ms": metrics.latency.max_ms, "record_age_ms": metrics.record_age_ms,
            "wall_time_ms": metrics.wall_time_ms, "committed_at": _ts(now_ms),
        }

    def mark_replayed(self, failure_ids: Iterable[str], *, replayed_at_ms: int | None = None) -> int:
        """Set ``replayed`` / ``replayed_at`` on the given failures; returns how many rows changed.

        Idempotent: rows already replayed keep their first ``replayed_at`` and are not counted; unknown
        ids are ignored. Call it only after the target durably accepted the re-sent messages.
        """
        ids = sorted(set(failure_ids))
        if not ids:
            return 0
        dt = self.open(FAILURES)
        if dt is None:
            return 0
        when = _ts(self._clock_ms() if replayed_at_ms is None else replayed_at_ms)
        changed = 0
        for start in range(0, len(ids), _MARK_CHUNK):
            quoted = ", ".join("'" + i.replace("'", "''") + "'" for i in ids[start:start + _MARK_CHUNK])
            try:
                result = dt.update(predicate=f"failure_id IN ({quoted}) AND replayed = false",
                                   new_values={"replayed": True, "replayed_at": when})
            except (DeltaError, OSError, pa.ArrowException) as exc:
                raise TableError(f"cannot mark failures replayed in {self.path(FAILURES)}: {exc}") from exc
            changed += int(result.get("num_updated_rows", 0))
        return changed

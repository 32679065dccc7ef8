"""A replication link's Delta tables: source offsets, source->target offset map, failures and batch metrics.

Written on the driver by the writer's ``commit(messages, batchId)`` through ``LinkTables.commit_batch``
(idempotent per (query id, batch id): ``connectors.core.delta``); read by the reader's ``initialOffset``
(``latest_offsets``, when the Spark checkpoint is gone) and its first batch after a restart
(``delivered_offsets``), and by ``jobs.replay_failures`` (``unreplayed_failures`` / ``mark_replayed``);
``jobs.reset_offsets`` writes a new resume point (``append_resume_point``).

Layout, one directory per link (``LinkConfig.tables_location``)::

    <delta_location>/<link>/current_offsets/  the resume point: one row per source queue (two while a
                                              reset point is newer than the queue's last batch), rewritten
                                              by every commit (one small file)
    <delta_location>/<link>/offsets/      history: a row per queue that advanced, per batch; retention
    <delta_location>/<link>/offset_map/   source offset runs -> target offset runs; retention with summaries
    <delta_location>/<link>/failures/     one row per failed message; `replayed` updated in place; retention
                                          of replayed rows (unreplayed ones only if configured)
    <delta_location>/<link>/metrics/      one row per batch; retention
    <delta_location>/<link>/placements/   queue placement decisions (``connectors.replication.placement_table``,
                                          written when decided, not per batch; maintained in this set's
                                          rounds; retention of idle source queues' decisions)

A batch commit is five commits: failures, offset_map, metrics and the offsets history concurrently, then
current_offsets once all four succeeded (``COMMIT_ORDER``), so a resume point never moves past a failure or
a run that is not recorded. A crash in between leaves the resume point where the previous batch put it (the
batch is re-sent: at-least-once) and the re-run of the batch completes it (each table checks its txn).
The resume point is read from ``current_offsets`` alone, so a restart costs the same after a week as after a
minute. A link written before ``current_offsets`` existed is read from the history once, and its first
commit writes ``current_offsets`` from it.

Retention (``connectors.replication.retention``, settings ``connectors.core.history_settings``) and
maintenance (``connectors.core.maintenance``) run in the writer's driver between batches. The table format
version: ``connectors.core.delta``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable
from deltalake.exceptions import DeltaError

from broker_store.client import MessageQueue
from broker_store.clock import SYSTEM_CLOCK, ThreadClock
from connectors.core.config import LinkConfig
from connectors.core.delta import (
    CommitResult,
    DeltaTableSet,
    Rewrite,
    RowBuilder,
    epoch_ms,
    shared_table_set,
    timestamp,
)
from connectors.core.errors import TableError
from connectors.core.history_settings import HistorySettings
from connectors.core.maintenance import Retention, TableMaintenance, delete_older_than
from connectors.core.offsets import queue_key
from connectors.replication.placement_table import PLACEMENTS, PlacementTable
from connectors.replication.records import (
    BatchMetrics,
    FailedMessage,
    FailureOutcome,
    OffsetMapping,
    RecordedFailure,
)
from connectors.replication.retention import (
    SUMMARY_QUERY_ID,
    MapFloors,
    delete_failures,
    delete_placements,
    fold_offset_map,
)

OFFSETS = "offsets"
CURRENT_OFFSETS = "current_offsets"
OFFSET_MAP = "offset_map"
FAILURES = "failures"
METRICS = "metrics"
COMMIT_ORDER = (FAILURES, OFFSET_MAP, METRICS, OFFSETS, CURRENT_OFFSETS)
"""Order of the per-table commits of one batch; the resume point last (see the module docstring)."""

RESET_QUERY_PREFIX = "reset-"
"""``query_id`` of the offsets rows ``jobs.reset_offsets`` writes (Spark query ids are bare uuids)."""

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
    ("duplicates_avoided", pa.int64()),  # added later: null in rows written before it (connectors.core.delta)
])
SCHEMAS: Mapping[str, pa.Schema] = {
    OFFSETS: OFFSETS_SCHEMA,
    CURRENT_OFFSETS: OFFSETS_SCHEMA,  # commit_version there: a sequence of that table, newest row per queue highest
    OFFSET_MAP: OFFSET_MAP_SCHEMA,
    FAILURES: FAILURES_SCHEMA,
    METRICS: METRICS_SCHEMA,
}


_OFFSETS_ORDER = ("commit_version", "batch_id", "updated_at")
_OFFSETS_COLUMNS = ["cluster", "topic", "broker_name", "queue_id", "next_offset", *_OFFSETS_ORDER]
_QUEUE_COLUMNS = ("cluster", "topic", "broker_name", "queue_id")


def is_map_summary(query_id: str | None) -> bool:
    """True for an ``offset_map`` row that summarises runs retention folded (``connectors.replication.retention``):
    where each source offset inside it landed is no longer known; its ``target_first_offset`` is the lowest
    target offset of its messages (a translation into it is conservative)."""
    return query_id == SUMMARY_QUERY_ID


def is_reset(query_id: str) -> bool:
    """True for the rows of a ``jobs.reset_offsets`` resume point (not a batch of a query)."""
    return query_id.startswith(RESET_QUERY_PREFIX)


def next_current_rows(current: Iterable[Mapping[str, Any]], new: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The ``current_offsets`` rows after a commit of ``new`` offsets rows (one batch's, or one reset's) onto
    ``current``: per (cluster, queue) the newest batch row, and the newest reset row while it is newer than
    that batch row (a batch row replaces the queue's reset row; a reset row keeps the batch row, which
    ``delivered_offsets`` reads). Pure; ``new`` rows carry a higher ``commit_version`` than every current row."""
    batch: dict[tuple[Any, ...], dict[str, Any]] = {}
    reset: dict[tuple[Any, ...], dict[str, Any]] = {}
    for row in [*current, *new]:
        key = tuple(row[c] for c in _QUEUE_COLUMNS)
        if is_reset(row["query_id"]):
            reset[key] = dict(row)
        else:
            batch[key] = dict(row)
            reset.pop(key, None)
    rows = [*batch.values(), *reset.values()]
    rows.sort(key=lambda r: (*(r[c] for c in _QUEUE_COLUMNS), r["commit_version"]))
    return rows


def failure_id(query_id: str, batch_id: int, queue: MessageQueue, queue_offset: int) -> str:
    """Deterministic id of a failure row: a re-run of the batch yields the same id."""
    name = "\n".join((query_id, str(batch_id), queue.topic, queue.broker_name, str(queue.queue_id),
                      str(queue_offset)))
    return uuid.uuid5(_FAILURE_ID_NAMESPACE, name).hex


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


class LinkTables(DeltaTableSet):
    """The four Delta tables of one link. Driver only; not thread-safe; one writer query per link."""

    def __init__(self, location: str | Path, *, source_cluster: str,
                 clock: ThreadClock = SYSTEM_CLOCK,
                 storage_options: Mapping[str, str] | None = None, history: HistorySettings | None = None,
                 map_floors: MapFloors | None = None, background_maintenance: bool = True) -> None:
        """``location``: the link's directory (``<delta_location>/<link>``); tables are created lazily.
        ``history``: the link's retention and maintenance (``connectors.core.maintenance``), run after batch
        commits, on a background thread unless ``background_maintenance`` is false; None: no maintenance
        (readers, tools). ``map_floors``: the lowest source offset per queue a checkpointed group is at
        (``connectors.replication.retention``); None: no group is checkpointed.

        ``clock`` (its wall time) stamps ``updated_at`` / ``failed_at`` / ``replayed_at`` and times
        the retention.
        """
        super().__init__(location, SCHEMAS, COMMIT_ORDER, clock=clock, storage_options=storage_options)
        self.source_cluster = source_cluster
        self._current: tuple[int, list[dict[str, Any]]] | None = None
        """(current_offsets version, its rows) as this set wrote them: the next commit's base without a read."""
        if history is not None:
            self.maintain(TableMaintenance(self, history, retention=self._retention(history, map_floors),
                                           rewritten=frozenset({CURRENT_OFFSETS}), background=background_maintenance,
                                           companions=(self._placements_maintenance(history),)))

    def _placements_maintenance(self, history: HistorySettings) -> TableMaintenance:
        """The maintenance of the link's ``placements`` table (``connectors.replication.placement_table``), run
        in this set's rounds: the process's shared ``PlacementTable`` (the writer's ``commit`` appends through
        it), so its appends and the round's operations take turns on one ``commit_lock``."""
        location = str(self.location)
        placements = shared_table_set((location, self.source_cluster), PlacementTable,
                                      lambda: PlacementTable(location, source_cluster=self.source_cluster,
                                                             clock=self.clock))
        retention = ({} if history.placements_retention is None else
                     {PLACEMENTS: delete_placements(history.placements_retention, self._last_advanced)})
        maintenance = TableMaintenance(placements, history, retention=retention, background=False)
        placements.maintain(maintenance)
        return maintenance

    def _last_advanced(self) -> dict[tuple[str, str, str, int], int] | None:
        """Per source queue (cluster, topic, broker, queue id), when its resume point last advanced (ms); None
        while ``current_offsets`` does not exist (then idleness cannot be told)."""
        dt = self.open(CURRENT_OFFSETS)
        if dt is None:
            return None
        rows = self.rows_of(CURRENT_OFFSETS, dt, columns=[*_QUEUE_COLUMNS, "updated_at"])
        return {(r["cluster"], r["topic"], r["broker_name"], r["queue_id"]): int(r["updated_at"].timestamp() * 1000)
                for r in rows.to_pylist()}

    def _retention(self, history: HistorySettings, map_floors: MapFloors | None) -> dict[str, Retention]:
        """The link's row retention per table (``connectors.replication.retention``). The history is trimmed
        only once ``current_offsets`` exists (before, the resume point is read from the history)."""
        history_rule = delete_older_than("updated_at", history.offsets_retention)

        def offsets(dt: DeltaTable, now_ms: int) -> int:
            if not DeltaTable.is_deltatable(self.path(CURRENT_OFFSETS), storage_options=self.storage_options):
                return 0
            return history_rule(dt, now_ms)

        return {
            OFFSETS: offsets,
            METRICS: delete_older_than("committed_at", history.metrics_retention),
            FAILURES: delete_failures(history.replayed_failures_retention, history.failures_retention),
            OFFSET_MAP: fold_offset_map(history.offset_map_retention, map_floors or (lambda: {})),
        }

    @classmethod
    def for_link(cls, link: LinkConfig, **kwargs: Any) -> LinkTables:
        return cls(link.tables_location, source_cluster=link.source, **kwargs)

    # -- reading ---------------------------------------------------------------------------------

    def committed_batch(self, query_id: str, table: str = OFFSETS) -> int | None:
        """Highest batch id of ``query_id`` committed to ``table`` (its Delta txn version), or None."""
        return super().committed_batch(query_id, table)

    def latest_offsets(self) -> dict[MessageQueue, int]:
        """Resume point: next offset per source queue, from each queue's newest row of ``current_offsets``
        (a batch's or a reset's; one or two rows per queue, so the read does not grow with history).

        Newest = highest ``commit_version`` (then ``batch_id``, then ``updated_at``). Rows of another source
        cluster (the link was re-pointed) are ignored. A link whose tables predate ``current_offsets`` is
        read from its ``offsets`` history instead (once: its next commit writes ``current_offsets``).
        """
        return {q: offset for q, (_, offset) in self._newest_rows(self._resume_rows()).items()}

    def delivered_offsets(self) -> dict[MessageQueue, int]:
        """Next offset per source queue as the queries' batch commits left it (the newest such row), not
        counting ``jobs.reset_offsets`` resume points: what is known to be on the target. The reader leaves
        it out of a batch Spark re-runs after a restart (``planning.skip_delivered``). Read from
        ``current_offsets`` as ``latest_offsets``."""
        rows = self._resume_rows()
        rows = rows.filter(pc.invert(pc.starts_with(rows["query_id"], RESET_QUERY_PREFIX)))
        return {q: offset for q, (_, offset) in self._newest_rows(rows).items()}

    def _resume_rows(self) -> pa.Table:
        """The rows the resume point is read from: ``current_offsets``, or the history's newest rows when the
        link has no ``current_offsets`` yet."""
        dt = self.open(CURRENT_OFFSETS)
        if dt is not None:
            return self.rows_of(CURRENT_OFFSETS, dt, [*_OFFSETS_COLUMNS, "query_id"])
        return pa.Table.from_pylist(self._history_current_rows(), schema=OFFSETS_SCHEMA)

    def _history_current_rows(self) -> list[dict[str, Any]]:
        """What ``current_offsets`` holds for a link that has only its ``offsets`` history (tables written
        before it existed): every queue's newest batch row, and its newest reset row if newer. Reads the
        history whole: once per link."""
        dt = self.open(OFFSETS)
        if dt is None:
            return []
        rows = self.rows_of(OFFSETS, dt)
        reset = pc.starts_with(rows["query_id"], RESET_QUERY_PREFIX)
        newest = [self._newest_of(rows.filter(pc.invert(reset))), self._newest_of(rows.filter(reset))]
        ordered = pa.concat_tables(newest).sort_by([(c, "ascending") for c in _OFFSETS_ORDER])
        return next_current_rows((), ordered.to_pylist())

    @staticmethod
    def _newest_of(rows: pa.Table) -> pa.Table:
        """Each (cluster, queue)'s newest row of ``rows`` (``_OFFSETS_ORDER``), every column."""
        if rows.num_rows == 0:
            return rows
        ordered = rows.sort_by([(c, "ascending") for c in _OFFSETS_ORDER])
        others = [c for c in rows.column_names if c not in _QUEUE_COLUMNS]
        latest = ordered.group_by(list(_QUEUE_COLUMNS), use_threads=False).aggregate([(c, "last") for c in others])
        columns = {c: latest[c if c in _QUEUE_COLUMNS else f"{c}_last"] for c in rows.column_names}
        return pa.table(columns).cast(rows.schema)

    def _create_current(self) -> None:
        """Create ``current_offsets`` empty before a new link's first history row: a link without it is then
        one written before it existed, whose history (offsets committed last) is a valid resume point. A
        first commit that stopped after the history must not be read from the history."""
        if self.open(CURRENT_OFFSETS) is not None or self.open(OFFSETS) is not None:
            return
        with self.commit_lock:
            self.create(CURRENT_OFFSETS)

    def _current_rows(self, dt: DeltaTable | None) -> list[dict[str, Any]]:
        """``current_offsets`` as of ``dt`` (the table before a commit; None: not written yet)."""
        if dt is None:
            return self._history_current_rows()
        if self._current is not None and self._current[0] == dt.version():
            return self._current[1]
        rows: list[dict[str, Any]] = self.rows_of(CURRENT_OFFSETS, dt).to_pylist()
        return rows

    def _next_current(self, dt: DeltaTable | None, new: list[dict[str, Any]]) -> Rewrite:
        """The builder of ``current_offsets``: ``new`` offsets rows (their ``commit_version`` replaced by the
        table's next sequence number) merged into the current rows."""
        base = self._current_rows(dt)
        sequence = 1 + max((int(r["commit_version"]) for r in base), default=-1)
        rows = next_current_rows(base, [{**r, "commit_version": sequence} for r in new])
        self._current = (0 if dt is None else dt.version() + 1, rows)
        return Rewrite(rows)

    def _newest_rows(self, rows: pa.Table) -> dict[MessageQueue, tuple[tuple[Any, ...], int]]:
        """Queue -> (its newest row's order key, next offset) among ``rows`` of this source cluster."""
        rows = rows.filter(pc.equal(rows["cluster"], self.source_cluster))
        if rows.num_rows == 0:
            return {}
        ordered = rows.sort_by([(c, "ascending") for c in _OFFSETS_ORDER])
        latest = ordered.group_by(["topic", "broker_name", "queue_id"], use_threads=False).aggregate(
            [(c, "last") for c in ("next_offset", *_OFFSETS_ORDER)])
        return {
            MessageQueue(row["topic"], row["broker_name"], row["queue_id"]):
                (tuple(row[f"{c}_last"] for c in _OFFSETS_ORDER), row["next_offset_last"])
            for row in latest.to_pylist()
        }

    def totals(self, query_id: str | None = None, since_ms: int | None = None) -> dict[str, int]:
        """Sums of the metrics table (``batches``, ``messages``, ``bytes``, ``skipped_loop``, ``failed``) over
        one query's batches (a query id, as ``query_id_from_checkpoint`` reads it) or all of them, and only
        those committed at or after ``since_ms`` if given (one run of a query): what a job's final summary
        prints (``failed`` = dismissed messages, in the failures table)."""
        rows = self.read(METRICS)
        if query_id is not None:
            rows = rows.filter(pc.equal(rows["query_id"], query_id))
        if since_ms is not None:
            rows = rows.filter(pc.greater_equal(rows["committed_at"], pa.scalar(timestamp(since_ms), _TS)))
        sums = {name: int(pc.sum(rows[name]).as_py() or 0) for name in ("messages", "bytes", "skipped_loop", "failed")}
        return {"batches": rows.num_rows, **sums}

    def unreplayed_failures(self) -> list[StoredFailure]:
        """Failures not yet replayed, in source order (topic, broker, queue, offset) then failure id."""
        rows = self.read(FAILURES, filters=[("replayed", "=", False)])
        order = ("topic", "broker_name", "queue_id", "queue_offset", "failure_id")
        rows = rows.sort_by([(c, "ascending") for c in order])
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
            failed_at_ms=epoch_ms(row["failed_at"]) or 0, replayed=bool(row["replayed"]),
            replayed_at_ms=epoch_ms(row["replayed_at"]),
        )

    # -- writing ---------------------------------------------------------------------------------

    def commit_batch(self, query_id: str, batch_id: int, offsets_rows: Mapping[MessageQueue, int],
                     map_rows: Sequence[OffsetMapping], failure_rows: Sequence[RecordedFailure],
                     metrics_row: BatchMetrics) -> CommitResult:
        """Record one micro-batch, at most once per (query id, batch id), whatever the number of calls.

        ``offsets_rows``: next source offset of every queue the batch advanced. ``failure_rows`` must all
        be ``DISMISSED`` (a failed batch is never committed). One append per table with rows.
        """
        blocked = [r for r in failure_rows if r.outcome is not FailureOutcome.DISMISSED]
        if blocked:
            raise ValueError(f"{len(blocked)} failure row(s) are {blocked[0].outcome.value}; a failed batch "
                             f"must not be committed")
        now_ms = self.now_ms()
        self._create_current()
        builders: dict[str, RowBuilder] = {
            FAILURES: lambda _dt: self._failure_rows(query_id, batch_id, failure_rows, now_ms),
            OFFSET_MAP: lambda _dt: self._map_rows(query_id, batch_id, map_rows, now_ms),
            METRICS: lambda _dt: [self._metrics_row(query_id, batch_id, metrics_row, now_ms)],
            OFFSETS: lambda dt: self._offset_rows(query_id, batch_id, offsets_rows, now_ms,
                                                  0 if dt is None else dt.version() + 1),
            CURRENT_OFFSETS: lambda dt: self._next_current(
                dt, self._offset_rows(query_id, batch_id, offsets_rows, now_ms, 0)),
        }
        return self.commit_tables(query_id, batch_id, builders, now_ms)

    def append_resume_point(self, offsets: Mapping[MessageQueue, int]) -> int:
        """Write ``offsets`` as the newest rows of their queues (``jobs.reset_offsets``): the link resumes
        there when it has no Spark checkpoint. Appended to the history, then to ``current_offsets`` (the
        batch commit's order); rows carry ``query_id`` ``reset-<uuid>`` and batch id 0. Returns the
        ``offsets`` (history) version written."""
        query_id = f"{RESET_QUERY_PREFIX}{uuid.uuid4()}"
        now_ms = self.now_ms()
        self._create_current()
        with self.commit_lock:
            self._append_once(OFFSETS, query_id, 0, lambda dt: self._offset_rows(
                query_id, 0, offsets, now_ms, 0 if dt is None else dt.version() + 1), now_ms)
            self._append_once(CURRENT_OFFSETS, query_id, 0, lambda dt: self._next_current(
                dt, self._offset_rows(query_id, 0, offsets, now_ms, 0)), now_ms)
        dt = self.open(OFFSETS)
        return -1 if dt is None else dt.version()

    def _offset_rows(self, query_id: str, batch_id: int, offsets: Mapping[MessageQueue, int], now_ms: int,
                     commit_version: int) -> list[dict[str, Any]]:
        return [
            {"cluster": self.source_cluster, "topic": q.topic, "broker_name": q.broker_name,
             "queue_id": q.queue_id, "next_offset": offset, "batch_id": batch_id, "query_id": query_id,
             "commit_version": commit_version, "updated_at": timestamp(now_ms)}
            for q, offset in sorted(offsets.items(), key=lambda item: queue_key(item[0]))
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
             "messages": m.messages, "batch_id": batch_id, "query_id": query_id, "committed_at": timestamp(now_ms)}
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
                "policy": recorded.policy, "outcome": recorded.outcome.value, "failed_at": timestamp(now_ms),
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
            "wall_time_ms": metrics.wall_time_ms, "committed_at": timestamp(now_ms),
            "duplicates_avoided": metrics.duplicates_avoided,
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
        with self.commit_lock:
            return self._mark(dt, ids, replayed_at_ms)

    def _mark(self, dt: DeltaTable, ids: list[str], replayed_at_ms: int | None) -> int:
        when = timestamp(self.now_ms() if replayed_at_ms is None else replayed_at_ms)
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


class LatestOffsets:
    """``LinkTables.latest_offsets`` for a reader that asks every round (the checkpoint writer, which needs the
    link's committed offsets every checkpoint): ``current_offsets`` holds one or two rows per queue, so each
    ``read`` reads it whole (driver; not thread-safe)."""

    def __init__(self, tables: LinkTables) -> None:
        self._tables = tables

    def read(self) -> dict[MessageQueue, int]:
        return self._tables.latest_offsets()


"""Maintenance of a set of Delta tables while its writer runs: row retention, compaction, Delta checkpoints,
log clean-up and vacuum, in rounds, one table operation at a time.

Used by ``connectors.core.delta.DeltaTableSet`` (``maintenance=``): the set calls ``after_commit`` after each
batch commit, on the Spark driver; when a round is due (``HistorySettings.maintenance_interval`` by the set's
injected clock) it runs on a background thread (``background=True``, the running job) or inline (tests, the
benchmark). The writer's Python worker is reused across batches, so the thread lives as long as the query.

Why rounds of small operations. A Delta table appended once per batch grows a file and a log entry per
batch; compacting everything at once stalls the batch that runs it (``benchmarks/MEASUREMENTS.md``) and
rewrites ever larger files. A round instead, per table:

1. applies the table's retention (``Retention``: a delete or a fold of old rows; only files holding old rows
   are rewritten);
2. compacts the files smaller than ``target_file_size`` into files of about that size (delta-rs
   ``optimize.compact``, zstd; a data-neutral commit that keeps every txn), so a round rewrites at most about
   that much per table; tables rewritten whole by each commit (``rewritten``) are not compacted;
3. writes a Delta checkpoint and deletes log entries older than ``file_retention`` (``cleanup_metadata``,
   ``delta.logRetentionDuration``): a reader replays at most one round of commits;
4. vacuums the data files the newest version no longer needs, except those of the versions earlier rounds saw
   within ``file_retention`` (``keep_versions``), so a reader that opened one of them finds its files.

Each operation holds the set's ``commit_lock``, which a batch commit holds for its whole commit: delta-rs
fails an append whose txn read state a concurrent delete or vacuum changed ("a concurrent transaction
deleted data this operation read"), so a batch and a maintenance operation never commit at once; a batch
waits at most one operation (bounded by ``target_file_size`` of rewriting). Best effort: an operation that
fails is logged and retried next round; the data and the txns are never affected.

Table properties every maintained table carries (``table_properties``): ``delta.logRetentionDuration`` and
``delta.deletedFileRetentionDuration`` = ``file_retention`` (checkpoints then carry no tombstone older than
that), ``delta.enableExpiredLogCleanup``. Batch commits skip delta-rs's post-commit hooks (``NO_HOOKS``):
the round writes the checkpoints, off the batch's path.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, DeltaTable, PostCommitHookProperties, WriterProperties
from deltalake.exceptions import DeltaError

from connectors.core.history_settings import HistorySettings

if TYPE_CHECKING:
    from connectors.core.delta import DeltaTableSet

log = logging.getLogger(__name__)

NO_HOOKS = PostCommitHookProperties(create_checkpoint=False, cleanup_expired_logs=False)
"""Post-commit hooks of every commit of a maintained table: none (the round checkpoints and cleans)."""
COMPACTED_FILES = WriterProperties(compression="ZSTD")
"""Parquet properties of the files compaction and retention write."""
RETENTION_MARK = "rocketmq_replicator.retention"
"""``commitInfo`` key of a retention commit (``RETENTION_COMMIT``): readers of appended rows
(``DeltaTableSet.appended_since``) skip such commits, whose removed rows they read before and whose added
rows (summaries of those) tell them nothing new."""
RETENTION_COMMIT = CommitProperties(custom_metadata={RETENTION_MARK: "true"})
"""Commit properties of every retention commit (``Retention`` rules pass them)."""

Retention = Callable[[DeltaTable, int], int]
"""A table's retention: applied to the table as opened for the round at ``now_ms``; returns the rows it
removed (0: nothing to do). Commits with ``NO_HOOKS`` and ``RETENTION_COMMIT``; raises ``DeltaError`` /
``OSError`` on failure."""


def predicate_time(ms: int) -> str:
    """A timestamp literal for a Delta predicate (UTC, microseconds)."""
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("'%Y-%m-%dT%H:%M:%S.%fZ'")


def has_rows_before(dt: DeltaTable, column: str, cutoff_ms: int) -> bool:
    """True when a data file of ``dt`` may hold a row with ``column`` before ``cutoff_ms`` (its statistics;
    a file without them counts as may): a round with nothing to remove reads no data."""
    actions = pa.table(dt.get_add_actions(flatten=True))
    name = f"min.{column}"
    if actions.num_rows == 0:
        return False
    if name not in actions.column_names:
        return True
    cutoff = pa.scalar(datetime.fromtimestamp(cutoff_ms / 1000, tz=UTC), actions[name].type)
    return bool(pc.any(pc.fill_null(pc.less(actions[name], cutoff), True)).as_py())


def delete_older_than(column: str, retention_s: float) -> Retention:
    """Delete the rows whose ``column`` (a timestamp) is older than ``retention_s`` at the round's time."""

    def apply(dt: DeltaTable, now_ms: int) -> int:
        cutoff = now_ms - round(retention_s * 1000)
        if not has_rows_before(dt, column, cutoff):
            return 0
        stats = dt.delete(f"{column} < {predicate_time(cutoff)}", writer_properties=COMPACTED_FILES,
                          commit_properties=RETENTION_COMMIT, post_commithook_properties=NO_HOOKS)
        return int(stats.get("num_deleted_rows", 0))

    return apply


def table_properties(settings: HistorySettings) -> dict[str, str]:
    """The Delta table properties of a maintained table (set on creation and by each round)."""
    seconds = max(1, round(settings.file_retention))
    return {
        "delta.logRetentionDuration": f"interval {seconds} seconds",
        "delta.deletedFileRetentionDuration": f"interval {seconds} seconds",
        "delta.enableExpiredLogCleanup": "true",
    }


@dataclass
class TableRound:
    """What one round did to one table."""

    table: str
    rows_removed: int = 0
    files_compacted: int = 0
    """Small files merged away (``numFilesRemoved`` - ``numFilesAdded``)."""
    files_vacuumed: int = 0
    errors: list[str] = field(default_factory=list)


class TableMaintenance:
    """The rounds of one ``DeltaTableSet`` (see the module docstring). Driver only; ``after_commit`` is called
    by the set's writer thread, rounds run on at most one background thread at a time."""

    def __init__(self, tables: DeltaTableSet, settings: HistorySettings, *,
                 retention: Mapping[str, Retention] | None = None, rewritten: frozenset[str] = frozenset(),
                 background: bool = True, companions: tuple[TableMaintenance, ...] = ()) -> None:
        """``companions``: the maintenance of other table sets whose rounds run in this one's, after its
        tables (a set without batch commits of its own, such as a link's placements, is never due by itself)."""
        self.tables = tables
        self.companions = companions
        self.settings = settings
        self.retention = dict(retention or {})
        self.rewritten = rewritten
        self.background = background
        self._last_round_ms: int | None = None
        self._seen: dict[str, list[tuple[int, int]]] = {}
        """Per table, (round time, version) of the rounds within ``file_retention``: vacuum keeps their files."""
        self._pool: ThreadPoolExecutor | None = None
        self._running: Future[list[TableRound]] | None = None
        self._lock = threading.Lock()

    def after_commit(self, now_ms: int) -> None:
        """Start a round if one is due (``maintenance_interval`` since the last one started) and none runs.
        The first call only starts the interval: a query's first batch is not slowed by a round."""
        if self._last_round_ms is None:
            self._last_round_ms = now_ms
            return
        if now_ms - self._last_round_ms < self.settings.maintenance_interval * 1000:
            return
        with self._lock:
            if self._running is not None and not self._running.done():
                return
            self._last_round_ms = now_ms
            if not self.background:
                self.run_round(now_ms)
                return
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="delta-maintenance")
            self._running = self._pool.submit(self.run_round, now_ms)

    def wait(self) -> None:
        """Block until the running round (if any) ended (tests, shutdown)."""
        running = self._running
        if running is not None:
            running.result()

    def run_round(self, now_ms: int) -> list[TableRound]:
        """One round over every table of the set (see the module docstring); never raises for a table."""
        rounds = []
        for table in self.tables.commit_order:
            done = TableRound(table)
            try:
                self._maintain(table, now_ms, done)
            except (DeltaError, OSError) as exc:  # one table's failure must not stop the others
                done.errors.append(str(exc))
            if done.errors:
                log.warning("maintenance of Delta table %s: %s (retried next round)", self.tables.path(table),
                            "; ".join(done.errors))
            elif done.rows_removed or done.files_compacted or done.files_vacuumed:
                log.info("maintenance of Delta table %s: %d old row(s) removed, %d small file(s) compacted, "
                         "%d file(s) vacuumed", self.tables.path(table), done.rows_removed, done.files_compacted,
                         done.files_vacuumed)
            rounds.append(done)
        for companion in self.companions:
            rounds += companion.run_round(now_ms)
        return rounds

    def _maintain(self, table: str, now_ms: int, done: TableRound) -> None:
        path = self.tables.path(table)
        options = self.tables.storage_options
        if not DeltaTable.is_deltatable(path, storage_options=options):
            return
        lock = self.tables.commit_lock
        dt = DeltaTable(path, storage_options=options)  # the round's own handle: the writer's is not shared
        wanted = table_properties(self.settings)
        if any(dt.metadata().configuration.get(k) != v for k, v in wanted.items()):
            with lock:
                dt.update_incremental()
                dt.alter.set_table_properties(wanted, post_commithook_properties=NO_HOOKS)
        rule = self.retention.get(table)
        if rule is not None:
            with lock:
                dt.update_incremental()
                done.rows_removed = rule(dt, now_ms)
        if table not in self.rewritten:
            with lock:
                dt.update_incremental()
                stats = dt.optimize.compact(target_size=self.settings.target_file_size,
                                            writer_properties=COMPACTED_FILES, post_commithook_properties=NO_HOOKS)
            done.files_compacted = int(stats.get("numFilesRemoved", 0)) - int(stats.get("numFilesAdded", 0))
        with lock:
            dt.update_incremental()
            dt.create_checkpoint()
            dt.cleanup_metadata()
            version = dt.version()
            seen = [(at, v) for at, v in self._seen.get(table, [])
                    if now_ms - at < self.settings.file_retention_ms and v < version]
            self._seen[table] = [*seen, (now_ms, version)]
            removed = dt.vacuum(retention_hours=0, dry_run=False, enforce_retention_duration=False,
                                keep_versions=[v for _, v in seen] or None, post_commithook_properties=NO_HOOKS)
        done.files_vacuumed = len(removed)

    def close(self) -> None:
        """Stop the thread after the running round (if any): a round is never cut in the middle of a Delta
        operation by this call. (The thread is not a daemon, so the interpreter's exit waits for it too.)"""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

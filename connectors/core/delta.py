"""Idempotent per-(query id, batch id) commits to a set of Delta tables: the driver-side commit every
connector's writer makes once per micro-batch.

Used by the connectors' table sets (``connectors.replication.tables.LinkTables`` today) on the Spark
driver, in the Python worker that runs a writer's ``commit(messages, batchId)``. Uses delta-rs
(``deltalake``), not Spark: the tables are plain Delta (protocol reader 1 / writer 2, no table features,
no partition columns, no deletion vectors), readable by any Delta reader.

Idempotency per (query id, batch id). Every batch commit of a table carries a Delta ``txn`` action
``{"appId": <Spark query id>, "version": <batch id>}`` (``CommitProperties(app_transactions=[...])``);
before writing, ``commit_tables`` reads ``DeltaTable.transaction_version(query id)`` and skips the table
when it is already >= the batch id, as Spark's own Delta sink does. delta-rs does not enforce monotonic
versions itself, but its conflict checker fails a commit when a concurrent commit carried a txn for the
same app id ("Concurrent transaction failed"); the table is then re-read and the batch treated as done if
the other writer committed it. Spark keeps the query id across restarts from the same checkpoint
(``connectors.core.spark_checkpoint.query_id_from_checkpoint``), so a re-run batch writes nothing twice.

A set's tables are separate Delta tables, so a batch commit is one commit per table: every table but the
last of ``commit_order`` concurrently, then the last once they all succeeded. A crash in between leaves
some of the first ones; the re-run of the batch completes them (each table checks its own txn). The last
table is the one a resume point is read from, so it never moves past rows the others do not hold.
A builder may return a ``Rewrite`` instead of rows: the table's rows are then replaced by those (one small
file per commit; for a table that holds one row per key, such as the current resume point).

Maintenance. Each batch appends one small file and one log entry per table. A set given ``maintenance``
(``connectors.core.maintenance.TableMaintenance``) hands it every batch commit (``after_commit``): rounds of
retention, compaction, checkpoints, log clean-up and vacuum run off the batch's path, and the set's
commits skip delta-rs's post-commit hooks. Commits and maintenance operations take turns on
``commit_lock``. A set without maintenance (the placements table: a few rows, written when decided) keeps
delta-rs's defaults (a checkpoint every 100 commits).

Incremental reads. ``appended_since(table, version)`` returns only the rows appended after a version a
reader saw before, from the commit files ``_delta_log/<version, 20 digits>.json`` (one JSON action per
line): ``add`` actions with ``dataChange`` true are new rows; compaction's ``add`` / ``remove`` actions
carry ``dataChange`` false and are skipped (the same rows, rewritten), and so are retention commits (marked
``RETENTION_MARK`` in their ``commitInfo``: old rows removed, or folded into summaries, which a reader that
read them before does not need again; the reader then holds more than a full read would). Anything else
that changes the data (a ``remove`` with ``dataChange`` true: a delete, update or overwrite; a new
``metaData``), a commit file that is gone (log clean-up) or a data file that is gone (vacuumed) answers
None: the reader reads the table whole instead.

Table format version: ``TABLE_FORMAT_VERSION``, written into each table's description on creation
(delta-rs refuses custom ``configuration`` keys).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, TypeVar
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import CommitFailedError, DeltaError
from deltalake.fs import DeltaStorageHandler

from broker_store.clock import SYSTEM_CLOCK, ThreadClock, wall_ms
from connectors.core.errors import TableError
from connectors.core.maintenance import NO_HOOKS, RETENTION_MARK, TableMaintenance, table_properties

log = logging.getLogger(__name__)

TABLE_FORMAT_VERSION = 1
"""A column added to a table's schema later (nullable, null in the rows written before) keeps the version:
appends merge it into the table's schema (``_write``), readers take its absence as nulls."""


def _conform(part: pa.Table, schema: pa.Schema) -> pa.Table:
    """``part`` cast to ``schema``, a column it lacks (written before the column was added) as nulls."""
    for f in schema:
        if f.name not in part.column_names:
            part = part.append_column(f, pa.nulls(part.num_rows, f.type))
    return part.select(schema.names).cast(schema)

@dataclass(frozen=True)
class Rewrite:
    """A builder's answer that replaces the table's rows with ``rows`` (an overwrite commit) instead of
    appending them."""

    rows: list[dict[str, Any]]


RowBuilder = Callable[[DeltaTable | None], "list[dict[str, Any]] | Rewrite"]
"""Builds one table's rows of a batch from the table as opened before the commit (None: never written):
rows to append, or a ``Rewrite``."""


def timestamp(ms: int) -> datetime:
    """A ``timestamp[us, UTC]`` column value from ms since the epoch."""
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def epoch_ms(value: datetime | None) -> int | None:
    """The inverse of ``timestamp``."""
    return None if value is None else int(value.timestamp() * 1000)


@dataclass(frozen=True)
class CommitResult:
    """What ``commit_tables`` did, per table: True = rows appended, False = skipped."""

    written: Mapping[str, bool]
    already_committed: frozenset[str]
    """Tables skipped because their txn for the query id was already >= the batch id."""

    @property
    def duplicate(self) -> bool:
        """True when every table with rows had this batch already (a replayed commit)."""
        return not any(self.written.values()) and bool(self.already_committed)


@dataclass(frozen=True)
class Appended:
    """Rows appended to a table after some version (``DeltaTableSet.appended_since``)."""

    version: int
    """The table version the rows run up to (the next call's ``version``)."""
    rows: pa.Table
    """In commit order (files of one commit in the order the commit lists them)."""


class DeltaTableSet:
    """Named Delta tables under one directory, committed together per batch. Driver only; not
    thread-safe; one writer query per set. Subclasses add the domain's rows and reads."""

    def __init__(self, location: str | Path, schemas: Mapping[str, pa.Schema], commit_order: Sequence[str], *,
                 clock: ThreadClock = SYSTEM_CLOCK, storage_options: Mapping[str, str] | None = None,
                 description: str = "rocketmq-replicator") -> None:
        """``location``: the set's directory; tables are created lazily. ``commit_order``: every table,
        the one committed last at the end. ``clock`` (its wall time) stamps the txns and the rows
        and times the maintenance rounds. Maintenance: ``maintain`` (subclasses call it)."""
        if sorted(commit_order) != sorted(schemas):
            raise ValueError(f"commit_order {list(commit_order)} must list every table of {sorted(schemas)}")
        self.location = str(location)
        self.schemas = dict(schemas)
        self.commit_order = tuple(commit_order)
        self.description = description
        self.maintenance: TableMaintenance | None = None
        self.commit_lock = threading.RLock()
        """Held by a batch commit for its whole commit and by each maintenance operation (see Maintenance)."""
        self.clock = clock
        self._storage_options = dict(storage_options) if storage_options else None
        self._opened: dict[str, DeltaTable] = {}
        """Tables opened before, brought up to date incrementally on the next ``open`` (re-reading the
        whole log grows with its versions, once per batch and table: a streaming query's fixed cost per
        trigger; figures in ``benchmarks/MEASUREMENTS.md``)."""

    @property
    def storage_options(self) -> dict[str, str] | None:
        return self._storage_options

    def maintain(self, maintenance: TableMaintenance) -> None:
        """Run ``maintenance`` after every batch commit from now on (see Maintenance above)."""
        self.maintenance = maintenance

    def path(self, table: str) -> str:
        if table not in self.schemas:
            raise ValueError(f"unknown table {table!r}; tables: {sorted(self.schemas)}")
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

    def read(self, table: str, columns: Sequence[str] | None = None, filters: Any = None) -> pa.Table:
        """The table at its newest version: ``columns`` only if given, the rows ``filters`` keeps
        (deltalake's DNF filters) if given; empty, with the schema, if never written."""
        return self.rows_of(table, self.open(table), columns, filters)

    def rows_of(self, table: str, dt: DeltaTable | None, columns: Sequence[str] | None = None,
                filters: Any = None) -> pa.Table:
        """``read`` of a version already opened (``dt`` from ``open``, or a commit builder's): several reads
        of one version agree. ``dt`` None: the table was never written, the rows are empty."""
        if dt is None:
            empty = self.schemas[table].empty_table()
            return empty if columns is None else empty.select(list(columns))
        try:
            return dt.to_pyarrow_table(columns=None if columns is None else list(columns), filters=filters)
        except (DeltaError, OSError, pa.ArrowException) as exc:
            raise TableError(f"cannot read Delta table {self.path(table)}: {exc}") from exc

    def appended_since(self, table: str, version: int, columns: Sequence[str] | None = None) -> Appended | None:
        """Rows appended to ``table`` after ``version`` (a version read before), up to its newest version;
        None when that cannot be told from the commit files (see Incremental reads above; read the table
        whole then) or the table was never written."""
        dt = self.open(table)
        if dt is None:
            return None
        newest = dt.version()
        if newest < version:
            return None  # re-created
        path = self.path(table)
        try:
            storage = DeltaStorageHandler(path, self._storage_options)
            files: list[str] = []
            for v in range(version + 1, newest + 1):
                with storage.open_input_file(f"_delta_log/{v:020d}.json") as fh:
                    commit = fh.read().decode()
                added = _appended_files(commit)
                if added is None:
                    return None
                files += added
            parts = []
            for name in files:
                with storage.open_input_file(name) as fh:
                    data = fh.read()
                # one thread: Arrow's scanner threads left behind abort the process at exit (apache/arrow#34314)
                parts.append(pq.read_table(pa.BufferReader(data), columns=list(columns) if columns else None,
                                           use_threads=False))
        except FileNotFoundError:
            return None  # commit file cleaned up or data file vacuumed
        except (DeltaError, OSError, ValueError, pa.ArrowException) as exc:
            raise TableError(f"cannot read the commits of Delta table {path} after version {version}: "
                             f"{exc}") from exc
        schema = self.schemas[table]
        if columns:
            schema = pa.schema([schema.field(c) for c in columns])
        rows = pa.concat_tables([_conform(p, schema) for p in parts]) if parts else schema.empty_table()
        return Appended(newest, rows)

    def committed_batch(self, query_id: str, table: str) -> int | None:
        """Highest batch id of ``query_id`` committed to ``table`` (its Delta txn version), or None."""
        dt = self.open(table)
        return None if dt is None else dt.transaction_version(query_id)

    # -- writing ---------------------------------------------------------------------------------

    def now_ms(self) -> int:
        """The clock's wall time, ms since the epoch."""
        return wall_ms(self.clock)

    def commit_tables(self, query_id: str, batch_id: int, builders: Mapping[str, RowBuilder],
                      now_ms: int) -> CommitResult:
        """Append each table's rows of one batch, at most once per (query id, batch id) whatever the number
        of calls, in ``commit_order`` (see the module docstring). ``builders`` has one entry per table."""
        if not query_id:
            raise ValueError("query_id must be a non-empty string")
        if batch_id < 0:
            raise ValueError(f"batch_id must be >= 0, got {batch_id}")
        # The tables before the last are independent: committed concurrently (delta-rs writes without
        # holding the GIL); the last only once they all succeeded.
        *first, last = self.commit_order
        outcomes: dict[str, bool | None] = {}
        with self.commit_lock:
            if first:
                with ThreadPoolExecutor(max_workers=len(first), thread_name_prefix="delta-commit") as pool:
                    futures = {table: pool.submit(self._append_once, table, query_id, batch_id, builders[table],
                                                  now_ms) for table in first}
                outcomes = {table: future.result() for table, future in futures.items()}  # raises the first error
            outcomes[last] = self._append_once(last, query_id, batch_id, builders[last], now_ms)
        written = {table: outcome is True for table, outcome in outcomes.items()}
        already = {table for table, outcome in outcomes.items() if outcome is None}
        if self.maintenance is not None:
            self.maintenance.after_commit(now_ms)
        return CommitResult(written, frozenset(already))

    def _append_once(self, table: str, query_id: str, batch_id: int, build: RowBuilder, now_ms: int) -> bool | None:
        """Append ``build``'s rows with txn (query_id, batch_id). True = written, False = no rows,
        None = the txn was already there (this batch was committed before)."""
        dt = self.open(table)
        if dt is not None and self._has_batch(dt, query_id, batch_id):
            return None
        rows = build(dt)
        if not (rows.rows if isinstance(rows, Rewrite) else rows):
            return False  # an empty Rewrite too: a table is never emptied by a batch
        path = self.path(table)
        commit = CommitProperties(
            app_transactions=[Transaction(query_id, batch_id, now_ms)],
            custom_metadata={"rocketmq_replicator.batch_id": batch_id,
                             "rocketmq_replicator.query_id": query_id},
        )
        try:
            self._write(table, dt, rows, commit)
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

    def _write(self, table: str, dt: DeltaTable | None, rows: list[dict[str, Any]] | Rewrite | pa.Table,
               commit: CommitProperties | None) -> None:
        mode: Literal["append", "overwrite"] = "overwrite" if isinstance(rows, Rewrite) else "append"
        if isinstance(rows, pa.Table):
            data = rows.select(self.schemas[table].names).cast(self.schemas[table])
        else:
            data = pa.Table.from_pylist(rows.rows if isinstance(rows, Rewrite) else rows, schema=self.schemas[table])
        maintained = self.maintenance is not None
        hooks = NO_HOOKS if maintained else None
        if dt is None:  # name, description and properties are set by the commit that creates the table
            configuration = table_properties(self.maintenance.settings) if self.maintenance is not None else None
            write_deltalake(self.path(table), data, mode=mode, commit_properties=commit,
                            storage_options=self._storage_options, name=f"{Path(self.location).name}.{table}",
                            description=f"{self.description} {table} table, format {TABLE_FORMAT_VERSION}",
                            configuration=configuration, post_commithook_properties=hooks)
        else:
            # "merge" adds a column the declared schema gained since the table was created (null in older rows);
            # an append whose schema is the table's writes no metaData action (incremental readers go on).
            write_deltalake(dt, data, mode=mode, commit_properties=commit, post_commithook_properties=hooks,
                            schema_mode="merge" if mode == "append" else None)

    def create(self, table: str) -> None:
        """Create ``table`` empty (version 0) unless it exists; its name, description and properties as the
        first append would set them."""
        if self.open(table) is not None:
            return
        configuration = table_properties(self.maintenance.settings) if self.maintenance is not None else None
        try:
            DeltaTable.create(self.path(table), self.schemas[table], mode="ignore",
                              name=f"{Path(self.location).name}.{table}",
                              description=f"{self.description} {table} table, format {TABLE_FORMAT_VERSION}",
                              configuration=configuration, storage_options=self._storage_options,
                              post_commithook_properties=NO_HOOKS if self.maintenance is not None else None)
        except (DeltaError, OSError) as exc:
            raise TableError(f"cannot create Delta table {self.path(table)}: {exc}") from exc

    def append(self, table: str, rows: list[dict[str, Any]] | pa.Table) -> None:
        """Append rows outside any batch (no txn): for tables whose rows are idempotent by content, such as
        the replication link's placement decisions (the first row per key stands), and for bulk loads (an
        Arrow table with the table's columns: ``benchmarks/history.py``)."""
        if (rows.num_rows if isinstance(rows, pa.Table) else len(rows)) == 0:
            return
        try:
            with self.commit_lock:
                self._write(table, self.open(table), rows, None)
        except (DeltaError, OSError, pa.ArrowException) as exc:
            raise TableError(f"cannot append rows to {self.path(table)}: {exc}") from exc

    @staticmethod
    def _has_batch(dt: DeltaTable, query_id: str, batch_id: int) -> bool:
        version = dt.transaction_version(query_id)
        return version is not None and version >= batch_id


def _appended_files(commit: str) -> list[str] | None:
    """The data files one commit file appends (relative paths), or None when it changes data otherwise."""
    files = []
    actions = [json.loads(line) for line in commit.splitlines() if line.strip()]
    if any(str(a.get("commitInfo", {}).get(RETENTION_MARK, "")).lower() == "true" for a in actions):
        return []  # retention: nothing appended (see Incremental reads)
    for action in actions:
        if "metaData" in action:
            return None
        remove = action.get("remove")
        if remove is not None and remove.get("dataChange", True):
            return None
        add = action.get("add")
        if add is not None and add.get("dataChange", True):
            if add.get("deletionVector") or add.get("partitionValues") or "://" in add["path"]:
                return None  # not a layout these tables use: let the full read handle it
            files.append(unquote(add["path"]))
    return files


S = TypeVar("S", bound=DeltaTableSet)

_shared_lock = threading.RLock()
"""Re-entrant: a set's ``create`` may itself ask for a set it uses (``LinkTables`` shares the link's
``PlacementTable`` with the writer's commit)."""
_shared: dict[tuple[Any, ...], DeltaTableSet] = {}


def shared_table_set(key: tuple[Any, ...], kind: type[S], create: Callable[[], S]) -> S:
    """The process's table set for ``key`` (driver), created by ``create`` on first use. Spark reuses the
    Python worker that runs a writer's ``commit`` across batches, so the open Delta tables are kept and
    only caught up each batch."""
    with _shared_lock:
        found = _shared.get((kind, *key))
        if found is None:
            found = _shared[(kind, *key)] = create()
        if not isinstance(found, kind):
            raise TypeError(f"table set cached under {key} is a {type(found).__name__}, not {kind.__name__}")
        return found

"""What the replication link has done so far, as the checkpoint translation needs it: the offset-map runs
(source offsets -> target offsets) and the committed next source offset per queue.

Read on the Spark driver by ``connectors.checkpoint.committer`` once per checkpoint, from the link's Delta
tables that the replication writer commits (``connectors.replication.tables`` owns their format: this module
only reads ``offset_map`` and ``offsets`` through ``LinkTables``). The checkpoint package depends on the
replication package's tables and nothing else of it; data flows one way (replication -> checkpoint).

Order matters: ``OffsetTranslator.add`` takes runs oldest first (a re-replicated range: the newest run wins).
A full read orders rows by ``committed_at`` (the driver's clock at the batch commit), then batch id, then
source offset: the order the writer committed them. Retention folds old runs no group needs into summary
rows (``connectors.replication.retention``); they become summary runs (``translation.Run.summary``), so a
group found below the runs kept is translated conservatively, never past a message.

``LinkProgressReader`` keeps the translator between checkpoints and reads only the offset-map commits made
since the last one (``DeltaTableSet.appended_since``; the committed offsets are the link's small
``current_offsets`` table, read whole each round through ``LatestOffsets``): a round
costs what the link replicated since, not the whole map (``benchmarks/checkpoint_progress.py``; figures in
``benchmarks/MEASUREMENTS.md``). It reads the table
whole at the first round and whenever the commits since cannot be told apart (compaction is fine; a
delete, an overwrite, a cleaned-up log, a vacuumed file are not), and when new rows carry an older
``committed_at`` than rows already read (a driver clock behind the previous one), so it always holds what
a full read would build, or more: the offset map's retention commits are skipped (``connectors.core.delta``),
so the exact runs read before a fold stay exact in the translator, where a full read finds their summary.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

import pyarrow as pa
import pyarrow.compute as pc
from deltalake.exceptions import DeltaError

from broker_store.client import MessageQueue
from connectors.checkpoint.translation import OffsetTranslator, Run
from connectors.core.errors import TableError
from connectors.replication.tables import OFFSET_MAP, LatestOffsets, LinkTables, is_map_summary

log = logging.getLogger(__name__)

_MAP_COLUMNS = ["source_topic", "source_broker", "source_queue_id", "source_first_offset", "source_last_offset",
                "target_topic", "target_broker", "target_queue_id", "target_first_offset", "target_last_offset",
                "messages", "batch_id", "query_id", "committed_at"]
_ORDER = [("committed_at", "ascending"), ("batch_id", "ascending"), ("source_first_offset", "ascending")]


@dataclass(frozen=True)
class LinkProgress:
    """The link's replication progress at one moment."""

    translator: OffsetTranslator
    replicated_next: dict[MessageQueue, int]
    """Committed next source offset per source queue (``LinkTables.latest_offsets``)."""
    runs: int
    """Offset-map rows read to bring the translator up to date (all of them on a full read)."""
    full_read: bool = True
    """The offset map was read whole (first round, or the commits since the last one could not be used)."""


def _add_rows(translator: OffsetTranslator, rows: pa.Table) -> None:
    """Add offset-map rows (sorted in ``_ORDER``) to ``translator``."""
    for r in rows.to_pylist():
        if r["messages"] <= 0 or r["source_last_offset"] < r["source_first_offset"]:
            continue  # nothing delivered: no run
        translator.add(MessageQueue(r["source_topic"], r["source_broker"], r["source_queue_id"]),
                       Run(r["source_first_offset"], r["source_last_offset"],
                           MessageQueue(r["target_topic"], r["target_broker"], r["target_queue_id"]),
                           r["target_first_offset"], r["target_last_offset"], r["messages"],
                           summary=is_map_summary(r["query_id"])))


def _newest(rows: pa.Table) -> datetime | None:
    if rows.num_rows == 0:
        return None
    value = pc.max(rows["committed_at"]).as_py()
    return value if isinstance(value, datetime) else None


class LinkProgressReader:
    """The link's progress, brought up to date incrementally each call (driver; one per checkpoint writer;
    not thread-safe). Holds the translator (a few runs per source queue, see ``translation``), the table
    version it reflects and the newest ``committed_at`` read."""

    def __init__(self, tables: LinkTables) -> None:
        self._tables = tables
        self._offsets = LatestOffsets(tables)
        self._translator = OffsetTranslator()
        self._version: int | None = None
        self._newest: datetime | None = None

    def read(self) -> LinkProgress:
        """Offsets are read *first*: the offset map committed before them (``COMMIT_ORDER``) then covers at
        least what they claim, so "replication has passed S" is never believed before the run that shows
        where S landed is read."""
        replicated = self._offsets.read()
        if self._version is not None:
            appended = self._tables.appended_since(OFFSET_MAP, self._version, _MAP_COLUMNS)
            if appended is not None:
                rows = appended.rows.sort_by(_ORDER)
                first = None if rows.num_rows == 0 else rows["committed_at"][0].as_py()
                if self._newest is None or first is None or first >= self._newest:
                    _add_rows(self._translator, rows)
                    self._version = appended.version
                    self._newest = _newest(rows) or self._newest
                    return LinkProgress(self._translator, replicated, rows.num_rows, full_read=False)
                log.info("offset map %s: rows committed at %s, before rows read already (%s): reading it whole",
                         self._tables.path(OFFSET_MAP), first, self._newest)
        translator, version, rows = _full_read(self._tables)
        self._translator, self._version, self._newest = translator, version, _newest(rows)
        return LinkProgress(translator, replicated, rows.num_rows)


def _full_read(tables: LinkTables) -> tuple[OffsetTranslator, int | None, pa.Table]:
    """The whole offset map: its translator, the table version read (None: no table yet) and the rows."""
    translator = OffsetTranslator()
    dt = tables.open(OFFSET_MAP)
    if dt is None:
        return translator, None, pa.table({"committed_at": pa.array([], pa.timestamp("us", tz="UTC"))})
    try:
        version = dt.version()
        rows = dt.to_pyarrow_table(columns=_MAP_COLUMNS)
    except (DeltaError, OSError, pa.ArrowException) as exc:
        raise TableError(f"cannot read Delta table {tables.path(OFFSET_MAP)}: {exc}") from exc
    rows = rows.sort_by(_ORDER)
    _add_rows(translator, rows)
    return translator, version, rows


def read_link_progress(tables: LinkTables) -> LinkProgress:
    """The link's offset map read whole and its committed offsets (offsets first, as ``LinkProgressReader``):
    for one-off readers (tests, tools). A checkpoint writer keeps a ``LinkProgressReader``."""
    replicated = tables.latest_offsets()
    translator, _, rows = _full_read(tables)
    return LinkProgress(translator, replicated, rows.num_rows)

"""The checkpoint connector's Delta table: one row per group and source queue per checkpoint, with what
became of it, plus one row per reported condition.

Written on the driver by ``connectors.checkpoint.committer`` (``CheckpointTables.commit_checkpoint``,
idempotent per (query id, batch id): ``connectors.core.delta``); read by tests, ``checkpoint_age_ms`` (the
recovery-point metric) and users (deltalake / delta-spark).

Layout, beside the replication link's tables::

    <delta_location>/<link>/checkpoints/    append-only

Row (``CHECKPOINTS_SCHEMA``): ``outcome`` is a ``CheckpointOutcome`` value. Source columns are empty /
-1 for a condition about a group or broker as a whole; target columns are null when there is no target
queue (unmapped, unknown group). A row whose target queue is fed by several source queues (the offset map
says so: ``translation.OffsetTranslator.feeders``) has ``exact`` false and a ``detail`` starting with
``SHARED_DETAIL``: a consumer failing over there misses nothing but may re-read messages of the other
source queues (``translation``'s module docstring says why no translation can be exact for it).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from broker_store.clock import SYSTEM_CLOCK, ThreadClock
from connectors.core.delta import CommitResult, DeltaTableSet, RowBuilder, epoch_ms, timestamp
from connectors.core.group_positions import CHECKPOINTS as CHECKPOINTS
from connectors.core.group_positions import POSITION_COLUMNS
from connectors.core.history_settings import HistorySettings
from connectors.core.maintenance import TableMaintenance, delete_older_than

# The table's name and the columns of a group's position (POSITION_COLUMNS) are a contract with the replication
# writer's offset-map retention, kept in connectors.core.group_positions; the schema below holds those columns.
_TS = pa.timestamp("us", tz="UTC")

CHECKPOINTS_SCHEMA = pa.schema([
    ("group", pa.string()),
    ("source_topic", pa.string()),
    ("source_broker", pa.string()),
    ("source_queue_id", pa.int32()),
    ("source_offset", pa.int64()),      # the group's next source offset (-1: none)
    ("target_topic", pa.string()),
    ("target_broker", pa.string()),
    ("target_queue_id", pa.int32()),
    ("target_offset", pa.int64()),      # this source queue's translation (null unless translated)
    ("committed_offset", pa.int64()),   # what the target queue was set to (null: not set this time)
    ("outcome", pa.string()),           # CheckpointOutcome value
    ("exact", pa.bool_()),              # false: inside a run with gaps, or a shared target queue: conservative
    ("detail", pa.string()),
    ("snapshot_at", _TS),               # when the source offsets were read: the recovery point
    ("committed_at", _TS),
    ("batch_id", pa.int64()),
    ("query_id", pa.string()),
])
if not set(POSITION_COLUMNS) <= set(CHECKPOINTS_SCHEMA.names):  # pragma: no cover - a contract check at import
    raise ImportError(f"CHECKPOINTS_SCHEMA lacks the position columns {POSITION_COLUMNS}")


class CheckpointOutcome(enum.Enum):
    COMMITTED = "committed"
    """Translated; the target queue was moved forward to ``committed_offset``."""
    CURRENT = "current"
    """Translated; the target group was already at or past it (never moved backwards)."""
    PENDING = "pending"
    """Replication has not passed the source offset yet (or a queue feeding the same target queue has
    not): the target queue was left alone this time."""
    PARTIAL = "partial"
    """The group reads ahead of the link on this source queue (replication has not passed its offset):
    ``target_offset`` is the end of the replicated data of the queue on the target, every message of it the
    group consumed that crossed (``translation.Translation.partial``). The target queue was left alone this
    time (it waits for the exact translation, as for ``pending``); a failover starts the group there (the
    checkpoint counts for ``newest_complete_snapshot_ms(..., partial=True)``)."""
    UNMAPPED = "unmapped"
    """Nothing of this source queue has been replicated: left alone."""
    GROUP_ONLINE = "group_online"
    """The group has online consumers on the target: its offsets there are theirs."""
    TARGET_ERROR = "target_error"
    """The target refused or did not answer (e.g. the topic vanished there); retried next checkpoint."""
    UNKNOWN_GROUP = "unknown_group"
    SOURCE_UNREACHABLE = "source_unreachable"
    MAPPING_FAILED = "mapping_failed"


SHARED_DETAIL = "shared: may re-read"
"""How a row's ``detail`` starts when several source queues feed its target queue (the lag view counts
those queues: ``jobs.metrics``, ``jobs.lag``)."""

TRANSLATED_OUTCOMES = frozenset({CheckpointOutcome.COMMITTED.value, CheckpointOutcome.CURRENT.value})


@dataclass(frozen=True)
class CheckpointRow:
    """One row of ``CHECKPOINTS_SCHEMA`` before the batch's stamps (batch id, query id, commit time)."""

    group: str
    outcome: CheckpointOutcome
    snapshot_ms: int
    source_topic: str = ""
    source_broker: str = ""
    source_queue_id: int = -1
    source_offset: int = -1
    target_topic: str | None = None
    target_broker: str | None = None
    target_queue_id: int | None = None
    target_offset: int | None = None
    committed_offset: int | None = None
    exact: bool = True
    detail: str = ""


class CheckpointTables(DeltaTableSet):
    """The ``checkpoints`` table of one link. Driver only; one writer query per link."""

    def __init__(self, location: str | Path, *, clock: ThreadClock = SYSTEM_CLOCK,
                 storage_options: Mapping[str, str] | None = None, history: HistorySettings | None = None,
                 background_maintenance: bool = True) -> None:
        """``location``: the link's directory (``LinkConfig.tables_location``). ``history``: the link's
        retention (``checkpoints_retention``) and maintenance (``connectors.core.maintenance``); None: none
        (readers)."""
        super().__init__(location, {CHECKPOINTS: CHECKPOINTS_SCHEMA}, (CHECKPOINTS,), clock=clock,
                         storage_options=storage_options)
        if history is not None:
            self.maintain(TableMaintenance(self, history, background=background_maintenance, retention={
                CHECKPOINTS: delete_older_than("committed_at", history.checkpoints_retention)}))

    def commit_checkpoint(self, query_id: str, batch_id: int, rows: Sequence[CheckpointRow]) -> CommitResult:
        """Append one checkpoint's rows, at most once per (query id, batch id)."""
        now_ms = self.now_ms()
        build: RowBuilder = lambda _dt: [self._row(r, query_id, batch_id, now_ms) for r in rows]  # noqa: E731
        return self.commit_tables(query_id, batch_id, {CHECKPOINTS: build}, now_ms)

    @staticmethod
    def _row(r: CheckpointRow, query_id: str, batch_id: int, now_ms: int) -> dict[str, Any]:
        return {
            "group": r.group, "source_topic": r.source_topic, "source_broker": r.source_broker,
            "source_queue_id": r.source_queue_id, "source_offset": r.source_offset, "target_topic": r.target_topic,
            "target_broker": r.target_broker, "target_queue_id": r.target_queue_id,
            "target_offset": r.target_offset, "committed_offset": r.committed_offset, "outcome": r.outcome.value,
            "exact": r.exact, "detail": r.detail, "snapshot_at": timestamp(r.snapshot_ms),
            "committed_at": timestamp(now_ms), "batch_id": batch_id, "query_id": query_id,
        }

    def newest_translated_ms(self, group: str | None = None) -> int | None:
        """Snapshot time of the newest checkpoint that translated a group completely (of ``group``, or of
        any group): at least one source queue translated and none pending. The recovery point: a consumer
        failing over to the target now resumes from the source group's position at that time (or later).
        None before the first one."""
        rows = self.read(CHECKPOINTS, columns=["group", "outcome", "snapshot_at"])
        if group is not None:
            rows = rows.filter(pc.equal(rows["group"], group))
        return newest_complete_snapshot_ms(rows)


def newest_complete_snapshot_ms(rows: pa.Table, *, partial: bool = False) -> int | None:
    """Snapshot time of the newest complete checkpoint among ``rows`` (columns ``group``, ``outcome``,
    ``snapshot_at``; any subset of whole checkpoints, as one batch commit writes each whole): at least one
    source queue translated and none pending (nor partial). None when there is none. Shared by
    ``newest_translated_ms`` and the metrics endpoint's incremental read (``jobs.metrics.ConnectorStateFeed``).

    ``partial``: count the checkpoints of a group reading ahead of the link too (at least one source queue
    translated or ``partial``; ``pending`` rows allowed): what a failover starts from (``jobs.dr.failover``,
    which translates the checkpoint's source offsets again, each lowered to the replicated end). A group that
    consumes close to the head of its queues while the link lags a trigger behind has no complete
    checkpoint for as long as it keeps up; its newest partial one is at most a checkpoint interval old."""
    # Plain Python, not Table.group_by: Acero's exec plan, run from the metrics endpoint's feed thread, was
    # followed by aborts at the job's exit ("terminate called without an active exception"); the rows are
    # few (a checkpoint per group per trigger, read incrementally).
    usable = TRANSLATED_OUTCOMES | {CheckpointOutcome.PARTIAL.value} if partial else TRANSLATED_OUTCOMES
    incomplete = () if partial else (CheckpointOutcome.PENDING.value, CheckpointOutcome.PARTIAL.value)
    translated: dict[tuple[str, Any], bool] = {}
    pending: set[tuple[str, Any]] = set()
    for group, outcome, snapshot in zip(rows["group"].to_pylist(), rows["outcome"].to_pylist(),
                                        rows["snapshot_at"].to_pylist(), strict=True):
        key = (group, snapshot)
        translated[key] = translated.get(key, False) or outcome in usable
        if outcome in incomplete:
            pending.add(key)
    complete = [snapshot for key, snapshot in ((k, k[1]) for k, ok in translated.items() if ok) if key not in pending]
    return epoch_ms(max(complete, default=None))


def checkpoint_age_ms(tables: CheckpointTables, now_ms: int, group: str | None = None) -> int | None:
    """The checkpoint-age metric: ``now_ms`` minus the newest translated checkpoint's snapshot time (None
    before the first). A Prometheus gauge ``replicator_checkpoint_age_seconds{link}`` exports it / 1000."""
    newest = tables.newest_translated_ms(group)
    return None if newest is None else max(0, now_ms - newest)


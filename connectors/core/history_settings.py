"""A link's settings of its Delta tables' history: how long each table keeps its rows and how the running job
maintains the tables (compaction, checkpoints, log clean-up, vacuum).

``LinkConfig`` (``connectors.core.config``) holds one as ``history``; the replication writer's table set
(``connectors.replication.tables.LinkTables``) applies it through ``connectors.core.maintenance``. Imports no
connector package.

YAML (every key optional)::

    links:
      - name: source-to-target
        ...
        history:
          offsets_retention: 7 days        # rows of the offsets history table
          offset_map_retention: 1 day      # rows of offset_map (never a run a checkpointed group still needs)
          metrics_retention: 7 days        # rows of metrics (one per batch)
          checkpoints_retention: 1 day     # rows of the checkpoint connector's checkpoints table
          replayed_failures_retention: 7 days   # failures replayed longer ago than this
          failures_retention: null         # failures never replayed (null: kept until replayed)
          placements_retention: 30 days    # decisions of source queues idle this long (null: kept)
          maintenance_interval: 1 minute   # one maintenance round (retention, compaction, checkpoint, vacuum)
          file_retention: 10 minutes       # removed data files and Delta log files are kept this long
          target_file_size: 8388608        # bytes: compaction merges small files up to this size
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from connectors.core.settings_base import SettingsModel, parse_duration

DAY = 86_400.0
DEFAULT_OFFSETS_RETENTION = 7 * DAY
DEFAULT_OFFSET_MAP_RETENTION = 1 * DAY
DEFAULT_METRICS_RETENTION = 7 * DAY
DEFAULT_CHECKPOINTS_RETENTION = 1 * DAY
DEFAULT_REPLAYED_FAILURES_RETENTION = 7 * DAY
DEFAULT_PLACEMENTS_RETENTION = 30 * DAY
DEFAULT_MAINTENANCE_INTERVAL = 60.0
DEFAULT_FILE_RETENTION = 600.0
DEFAULT_TARGET_FILE_SIZE = 8 * 1024 * 1024
MIN_TARGET_FILE_SIZE = 64 * 1024


class HistorySettings(SettingsModel):
    """How long a link's Delta tables keep their rows, and their maintenance (durations in seconds; the YAML
    takes a number or ``"7 days"`` / ``"10 minutes"``). The ``current_offsets`` table (the resume point) has
    no retention: it holds one row per queue."""

    offsets_retention: float = DEFAULT_OFFSETS_RETENTION
    """Rows of the ``offsets`` history table (one per queue that advanced, per batch) older than this are
    deleted. The resume point is not read from it (``current_offsets`` holds it), so any value is safe."""
    offset_map_retention: float = DEFAULT_OFFSET_MAP_RETENTION
    """Rows of ``offset_map`` older than this are folded into one summary row per source queue and target
    queue, except the runs the checkpoint translation needs exactly: each source queue's highest run and
    every run at or above the lowest position of a group in the link's newest checkpoint
    (``LinkTables.trim_offset_map``). A group that shows up below what is kept is translated into the
    summary: conservatively (its consumer re-reads), never past a message."""
    metrics_retention: float = DEFAULT_METRICS_RETENTION
    """Rows of ``metrics`` (one per batch) older than this are deleted."""
    checkpoints_retention: float = DEFAULT_CHECKPOINTS_RETENTION
    """Rows of the checkpoint connector's ``checkpoints`` table (one per group and source queue per
    checkpoint) older than this are deleted; the offset map's retention reads only its last minutes."""
    replayed_failures_retention: float = DEFAULT_REPLAYED_FAILURES_RETENTION
    """Rows of ``failures`` whose message was replayed (``jobs.replay_failures``) longer ago than this are
    deleted: the record of a failure that was dealt with."""
    failures_retention: float | None = None
    """Rows of ``failures`` never replayed and older than this (``failed_at``) are deleted, each round's count
    logged as a WARNING (those messages can no longer be replayed). None (the default): a failure stays until
    it is replayed, so no failed message is ever dropped without a person deciding it."""
    placements_retention: float | None = DEFAULT_PLACEMENTS_RETENTION
    """Queue placement decisions (``placements``) of a source queue that has not advanced for this long
    (``current_offsets.updated_at``; a queue that never advanced: since the decision) are deleted: the
    decisions of topics that are gone (a link whose regex includes a topic per day gains a decision per
    queue each day). If such a queue replicates again it is decided anew by the same rule (the same target
    queue while the topics' queue counts match and queues are preserved); nothing of it is in flight after
    that long, so no order is broken. None: every decision is kept while the link lives."""
    maintenance_interval: float = DEFAULT_MAINTENANCE_INTERVAL
    """Seconds between two maintenance rounds of the running writer (a background thread of the driver;
    ``connectors.core.maintenance``): retention, compaction of the small per-batch files, a Delta
    checkpoint, log clean-up and vacuum, one table operation at a time between batch commits."""
    file_retention: float = DEFAULT_FILE_RETENTION
    """How long files the newest table version no longer needs are kept: data files removed by compaction
    or retention (vacuum) and ``_delta_log`` entries (``delta.logRetentionDuration``,
    ``delta.deletedFileRetentionDuration``). A reader that opened a
    table version older than this may find its files gone and must re-open the table; time travel reaches
    back this far."""
    target_file_size: int = Field(default=DEFAULT_TARGET_FILE_SIZE, ge=MIN_TARGET_FILE_SIZE)
    """Bytes: compaction merges files smaller than this into files of about this size, so a round rewrites
    at most about this much per table (a compaction never stalls a batch for long)."""

    @field_validator("offsets_retention", "offset_map_retention", "metrics_retention", "checkpoints_retention",
                     "replayed_failures_retention", "maintenance_interval", "file_retention", mode="before")
    @classmethod
    def _check_duration(cls, value: Any) -> float:
        return parse_duration(value)

    @field_validator("failures_retention", "placements_retention", mode="before")
    @classmethod
    def _check_optional_duration(cls, value: Any) -> float | None:
        return None if value is None else parse_duration(value)

    @property
    def file_retention_ms(self) -> int:
        return round(self.file_retention * 1000)

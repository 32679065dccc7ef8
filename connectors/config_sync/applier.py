"""Apply a source configuration snapshot to the target and record every change: the config connector's
writer side, and its Delta table.

Called on the Spark driver by ``connectors.config_sync.data_source.ConfigStreamWriter.commit`` once per
micro-batch (and by tests): read the target (``state.read_cluster_state``), plan (``plan.plan_changes``),
apply each PLANNED change with the target's Admin (APPLIED, or FAILED with the reason: planned again next
round), then append every change, whatever its status, to the Delta table (idempotent per (query id, batch
id), ``connectors.core.delta``)::

    <delta_location>/<link>/config_changes/    append-only, one row per change per round

``pending_config_changes`` (the "config changes pending" metric) counts the newest round's changes that are
not applied: refused, failed or disabled.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from deltalake.exceptions import DeltaError

from broker_store.client import Admin
from broker_store.protocol.errors import RocketMQError
from connectors.config_sync.plan import ChangeKind, ChangeStatus, ConfigChange, plan_changes
from connectors.config_sync.state import ClusterState, read_cluster_state
from connectors.core.delta import CommitResult, DeltaTableSet, RowBuilder, timestamp
from connectors.core.errors import TableError
from connectors.core.sync_settings import ConfigSyncSettings
from connectors.core.topic_mapping import TopicMapper

log = logging.getLogger(__name__)

CONFIG_CHANGES = "config_changes"
CONFIG_CHANGES_SCHEMA = pa.schema([
    ("kind", pa.string()),              # ChangeKind value
    ("subject", pa.string()),           # target topic or group
    ("sources", pa.list_(pa.string())),
    ("status", pa.string()),            # ChangeStatus value (never "planned" in the table)
    ("read_queue_nums", pa.int32()),
    ("write_queue_nums", pa.int32()),
    ("perm", pa.int32()),
    ("attributes", pa.map_(pa.string(), pa.string())),
    ("group_config", pa.string()),      # SubscriptionGroupConfig JSON
    ("detail", pa.string()),
    ("snapshot_at", pa.timestamp("us", tz="UTC")),
    ("committed_at", pa.timestamp("us", tz="UTC")),
    ("batch_id", pa.int64()),
    ("query_id", pa.string()),
])
NOT_APPLIED = frozenset({ChangeStatus.REFUSED.value, ChangeStatus.FAILED.value, ChangeStatus.DISABLED.value})


class ConfigTables(DeltaTableSet):
    """The ``config_changes`` table of one link. Driver only; one writer query per link."""

    def __init__(self, location: str | Path, *, clock_ms: Callable[[], int] | None = None) -> None:
        super().__init__(location, {CONFIG_CHANGES: CONFIG_CHANGES_SCHEMA}, (CONFIG_CHANGES,), clock_ms=clock_ms)

    def commit_changes(self, query_id: str, batch_id: int, snapshot_ms: int,
                       changes: Sequence[ConfigChange]) -> CommitResult:
        now_ms = self.now_ms()
        build: RowBuilder = lambda _dt: [_row(c, snapshot_ms, now_ms, query_id, batch_id) for c in changes]  # noqa: E731
        return self.commit_tables(query_id, batch_id, {CONFIG_CHANGES: build}, now_ms)

    def pending_config_changes(self) -> int:
        """Changes of the newest recorded round that are not applied (the "config changes pending" gauge)."""
        dt = self.open(CONFIG_CHANGES)
        if dt is None:
            return 0
        try:
            rows = dt.to_pyarrow_table(columns=["status", "committed_at"])
        except (DeltaError, OSError, pa.ArrowException) as exc:
            raise TableError(f"cannot read Delta table {self.path(CONFIG_CHANGES)}: {exc}") from exc
        return pending_in_newest_round(rows)


def pending_in_newest_round(rows: pa.Table) -> int:
    """Changes not applied among ``rows`` (columns ``status``, ``committed_at``) of the newest round (the
    highest ``committed_at``: one round is one commit). 0 for no rows. Shared by
    ``ConfigTables.pending_config_changes`` and the metrics endpoint's incremental read."""
    if rows.num_rows == 0:
        return 0
    newest = rows.filter(pc.equal(rows["committed_at"], pc.max(rows["committed_at"])))
    return int(pc.sum(pc.is_in(newest["status"], pa.array(sorted(NOT_APPLIED)))).as_py() or 0)


def _row(c: ConfigChange, snapshot_ms: int, now_ms: int, query_id: str, batch_id: int) -> dict[str, Any]:
    return {"kind": c.kind.value, "subject": c.subject, "sources": list(c.sources), "status": c.status.value,
            "read_queue_nums": c.read_queue_nums, "write_queue_nums": c.write_queue_nums, "perm": c.perm,
            "attributes": sorted(c.attributes.items()),
            "group_config": None if c.group_config is None else json.dumps(c.group_config, sort_keys=True),
            "detail": c.detail, "snapshot_at": timestamp(snapshot_ms), "committed_at": timestamp(now_ms),
            "batch_id": batch_id, "query_id": query_id}


class ConfigApplier:
    """Plans and applies source snapshots on one link's target. Driver only; not thread-safe."""

    def __init__(self, *, target_admin: Admin, mapper: TopicMapper, settings: ConfigSyncSettings,
                 read_target: Callable[[], ClusterState] | None = None) -> None:
        self._admin = target_admin
        self._mapper = mapper
        self._settings = settings
        self._read_target = read_target or (lambda: read_cluster_state(
            target_admin, None, subscription_groups=settings.subscription_groups))

    def apply(self, source: ClusterState, previous_source_topics: Iterable[str] = ()) -> list[ConfigChange]:
        """Every change of this round with its final status (see the module docstring)."""
        try:
            target = self._read_target()
        except RocketMQError as exc:
            return [ConfigChange(ChangeKind.READ_TARGET, "", ChangeStatus.FAILED, detail=str(exc))]
        changes = plan_changes(source, target, self._mapper, self._settings, previous_source_topics)
        if source.unreachable or target.unreachable:
            # a broker group that did not answer might hold topics: creating or deleting on a partial view
            # could shrink nothing but could delete wrongly; deletions wait for a whole view
            changes = [c.with_status(ChangeStatus.FAILED, f"unreachable: {dict(source.unreachable)} "
                                                          f"{dict(target.unreachable)}")
                       if c.kind is ChangeKind.DELETE_TOPIC and c.status is ChangeStatus.PLANNED else c
                       for c in changes]
        return [self._apply_one(c) if c.status is ChangeStatus.PLANNED else c for c in changes]

    def _apply_one(self, c: ConfigChange) -> ConfigChange:
        try:
            if c.kind in (ChangeKind.CREATE_TOPIC, ChangeKind.UPDATE_TOPIC):
                assert c.read_queue_nums is not None and c.write_queue_nums is not None and c.perm is not None
                self._admin.create_topic(c.subject, max(c.read_queue_nums, c.write_queue_nums), c.perm,
                                         read_queue_nums=c.read_queue_nums, write_queue_nums=c.write_queue_nums,
                                         order=c.order, attributes=c.attributes or None)
            elif c.kind is ChangeKind.DELETE_TOPIC:
                self._admin.delete_topic(c.subject)
            elif c.kind in (ChangeKind.CREATE_GROUP, ChangeKind.UPDATE_GROUP):
                assert c.group_config is not None
                self._admin.create_subscription_group(c.group_config)
            else:
                raise AssertionError(f"no way to apply {c.kind}")
        except RocketMQError as exc:
            log.warning("config change %s %s failed on the target: %s", c.kind.value, c.subject, exc)
            return c.with_status(ChangeStatus.FAILED, str(exc))
        return c.with_status(ChangeStatus.APPLIED, c.detail)


def summary(changes: Sequence[ConfigChange]) -> str:
    counts: Mapping[str, int] = {s.value: sum(1 for c in changes if c.status is s) for s in ChangeStatus}
    return ", ".join(f"{n} {s}" for s, n in counts.items() if n) or "no change"

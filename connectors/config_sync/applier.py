"""Apply a source configuration snapshot to the target and record the round: the config connector's writer
side, and its Delta table.

Called on the Spark driver by ``connectors.config_sync.data_source.ConfigStreamWriter.commit`` once per
micro-batch (and by tests): read the target (``state.read_cluster_state``), plan (``plan.plan_changes``),
apply each PLANNED change with the target's Admin (``apply_change``: APPLIED, or FAILED with the reason:
planned again next round), then append the round's rows to the Delta table (idempotent per (query id, batch
id), ``connectors.core.delta``)::

    <delta_location>/<link>/config_changes/    append-only; which changes of a round become rows, and which
                                               stand, is ``connectors.config_sync.standing``

``pending_config_changes`` (the "config changes pending" metric) counts the not-applied changes standing:
a refusal recorded once is still counted every round it lasts.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from broker_store.client import Admin
from broker_store.clock import SYSTEM_CLOCK, ThreadClock
from broker_store.protocol.errors import RocketMQError
from connectors.config_sync.acl_sync import AclSync
from connectors.config_sync.evidence import Evidence
from connectors.config_sync.plan import ChangeKind, ChangeStatus, ConfigChange, plan_changes
from connectors.config_sync.standing import (
    NOT_APPLIED,
    ChangeKey,
    fold,
    fold_statuses,
    queue_floors,
    to_record,
    unfinished_deletions,
)
from connectors.config_sync.state import ClusterState, read_cluster_state
from connectors.core.delta import CommitResult, DeltaTableSet, RowBuilder, timestamp
from connectors.core.sync_settings import ConfigSyncSettings
from connectors.core.topic_mapping import TopicMapper

log = logging.getLogger(__name__)

CONFIG_CHANGES = "config_changes"
CONFIG_CHANGES_SCHEMA = pa.schema([
    ("kind", pa.string()),              # ChangeKind value
    ("subject", pa.string()),           # target topic or group
    ("sources", pa.list_(pa.string())),
    ("status", pa.string()),            # ChangeStatus value (never "planned"; "cleared" ends a standing change)
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


class ConfigTables(DeltaTableSet):
    """The ``config_changes`` table of one link. Driver only; one writer query per link."""

    def __init__(self, location: str | Path, *, clock: ThreadClock = SYSTEM_CLOCK) -> None:
        super().__init__(location, {CONFIG_CHANGES: CONFIG_CHANGES_SCHEMA}, (CONFIG_CHANGES,), clock=clock)

    def commit_changes(self, query_id: str, batch_id: int, snapshot_ms: int,
                       changes: Sequence[ConfigChange]) -> CommitResult:
        """Append ``changes`` as they are (no ``standing`` rule: tests and ``commit_round``)."""
        now_ms = self.now_ms()
        build: RowBuilder = lambda _dt: [_row(c, snapshot_ms, now_ms, query_id, batch_id) for c in changes]  # noqa: E731
        return self.commit_tables(query_id, batch_id, {CONFIG_CHANGES: build}, now_ms)

    def commit_round(self, query_id: str, batch_id: int, snapshot_ms: int, round_: AppliedRound) -> list[ConfigChange]:
        """Append what ``standing.to_record`` keeps of one round, given what stands in the table now; returns
        those changes (none when the batch was committed before)."""
        now_ms = self.now_ms()
        recorded: list[ConfigChange] = []

        def build(dt: Any) -> list[dict[str, Any]]:
            recorded[:] = to_record(_standing(self._changes(dt)), round_.changes, whole_view=round_.whole_view)
            return [_row(c, snapshot_ms, now_ms, query_id, batch_id) for c in recorded]

        self.commit_tables(query_id, batch_id, {CONFIG_CHANGES: build}, now_ms)
        return recorded

    def standing(self) -> dict[ChangeKey, ConfigChange]:
        """The not-applied changes standing now (``standing.fold`` over the whole table)."""
        return _standing(self._changes(self.open(CONFIG_CHANGES)))

    def history(self) -> tuple[dict[ChangeKey, ConfigChange], dict[str, tuple[int, int]]]:
        """(``standing()``, ``standing.queue_floors``) from one read of the table: what a round needs."""
        changes = self._changes(self.open(CONFIG_CHANGES))
        return _standing(changes), queue_floors(changes)

    def pending_config_changes(self) -> int:
        """Not-applied changes standing (the "config changes pending" gauge)."""
        return fold_pending({}, self.read(CONFIG_CHANGES, columns=["kind", "subject", "status", "committed_at"]))

    def _changes(self, dt: Any) -> list[ConfigChange]:
        """Every recorded change of the version ``dt``, oldest first."""
        return [_change(r) for r in _oldest_first(self.rows_of(CONFIG_CHANGES, dt)).to_pylist()]


def _standing(changes: Sequence[ConfigChange]) -> dict[ChangeKey, ConfigChange]:
    out: dict[ChangeKey, ConfigChange] = {}
    fold(out, changes)
    return out


def _oldest_first(rows: pa.Table) -> pa.Table:
    """Rows by ``committed_at``; the sort is stable, so a commit's rows keep their order."""
    return rows.take(pc.sort_indices(rows, sort_keys=[("committed_at", "ascending")]))


def fold_pending(standing: dict[ChangeKey, str], rows: pa.Table) -> int:
    """``standing.fold_statuses`` over ``rows`` (columns ``kind``, ``subject``, ``status``, ``committed_at``;
    in place); the pending count. Shared by ``ConfigTables.pending_config_changes`` and the metrics endpoint's
    incremental read."""
    ordered = _oldest_first(rows)
    return fold_statuses(standing, zip(ordered["kind"].to_pylist(), ordered["subject"].to_pylist(),
                                       ordered["status"].to_pylist(), strict=True))


def _change(r: Mapping[str, Any]) -> ConfigChange:
    """A recorded row back as a ``ConfigChange`` (``order`` is not recorded: False)."""
    attributes = r["attributes"] or []
    return ConfigChange(ChangeKind(r["kind"]), r["subject"], ChangeStatus(r["status"]), tuple(r["sources"] or ()),
                        r["read_queue_nums"], r["write_queue_nums"], r["perm"],
                        attributes=dict(attributes.items() if isinstance(attributes, Mapping) else attributes),
                        group_config=None if r["group_config"] is None else json.loads(r["group_config"]),
                        detail=r["detail"] or "")


def _row(c: ConfigChange, snapshot_ms: int, now_ms: int, query_id: str, batch_id: int) -> dict[str, Any]:
    return {"kind": c.kind.value, "subject": c.subject, "sources": list(c.sources), "status": c.status.value,
            "read_queue_nums": c.read_queue_nums, "write_queue_nums": c.write_queue_nums, "perm": c.perm,
            "attributes": sorted(c.attributes.items()),
            "group_config": None if c.group_config is None else json.dumps(c.group_config, sort_keys=True),
            "detail": c.detail, "snapshot_at": timestamp(snapshot_ms), "committed_at": timestamp(now_ms),
            "batch_id": batch_id, "query_id": query_id}


@dataclass(frozen=True)
class AppliedRound:
    """One round's changes with their final status, and whether it saw both clusters whole."""

    changes: list[ConfigChange]
    whole_view: bool
    """Every broker group of the source and the target was read: only then can a standing change be cleared."""


class ConfigApplier:
    """Plans and applies source snapshots on one link's target. Driver only; not thread-safe."""

    def __init__(self, *, target_admin: Admin, mapper: TopicMapper, settings: ConfigSyncSettings,
                 read_target: Callable[[], ClusterState] | None = None, acl: AclSync | None = None) -> None:
        self._admin = target_admin
        self._mapper = mapper
        self._settings = settings
        self._acl = acl
        self._read_target = read_target or (lambda: read_cluster_state(
            target_admin, None, subscription_groups=settings.subscription_groups))

    def apply(self, source: ClusterState, evidence: Evidence | None = None,
              queue_floors: Mapping[str, tuple[int, int]] | None = None) -> AppliedRound:
        """Every change of this round with its final status (see the module docstring). ``evidence``: what
        the source snapshot proves, with the target broker groups that are expected and not registered
        (counted unreachable here); ``queue_floors``: ``standing.queue_floors`` of the table."""
        evidence = evidence or Evidence()
        try:
            target = self._read_target()
        except RocketMQError as exc:
            return AppliedRound([ConfigChange(ChangeKind.READ_TARGET, "", ChangeStatus.FAILED, detail=str(exc))],
                                whole_view=False)
        missing = evidence.target_gaps(target)
        if missing:
            target = dataclasses.replace(target, unreachable={**missing, **target.unreachable})
        changes = plan_changes(source, target, self._mapper, self._settings, evidence, queue_floors)
        applied = [apply_change(self._admin, c) if c.status is ChangeStatus.PLANNED else c for c in changes]
        if self._acl is not None:
            applied.extend(self._acl.round())
        return AppliedRound(applied, not (source.unreachable or target.unreachable))


def apply_change(admin: Admin, c: ConfigChange) -> ConfigChange:
    """Apply one PLANNED change on the target ``admin`` reaches: APPLIED, or FAILED with the reason. Shared by
    ``ConfigApplier`` and ``connectors.config_sync.creation``."""
    try:
        if c.kind in (ChangeKind.CREATE_TOPIC, ChangeKind.UPDATE_TOPIC):
            assert c.read_queue_nums is not None and c.write_queue_nums is not None and c.perm is not None
            admin.create_topic(c.subject, max(c.read_queue_nums, c.write_queue_nums), c.perm,
                               read_queue_nums=c.read_queue_nums, write_queue_nums=c.write_queue_nums,
                               order=c.order, attributes=c.attributes or None)
        elif c.kind is ChangeKind.DELETE_TOPIC:
            log.warning("config sync deletes target topic %s (read/write queues %s/%s): %s", c.subject,
                        c.read_queue_nums, c.write_queue_nums, c.detail)
            admin.delete_topic(c.subject)
        elif c.kind in (ChangeKind.CREATE_GROUP, ChangeKind.UPDATE_GROUP):
            assert c.group_config is not None
            admin.create_subscription_group(c.group_config)
        elif c.kind is ChangeKind.DELETE_GROUP:
            log.warning("config sync deletes target subscription group %s: %s", c.subject, c.detail)
            admin.delete_subscription_group(c.subject)
        else:
            raise AssertionError(f"no way to apply {c.kind}")
    except RocketMQError as exc:
        log.warning("config change %s %s failed on the target: %s", c.kind.value, c.subject, exc)
        return c.with_status(ChangeStatus.FAILED, str(exc))
    return c.with_status(ChangeStatus.APPLIED, c.detail)


def sync_round(tables: ConfigTables, applier: ConfigApplier, state: ClusterState, evidence: Evidence, *, link: str,
               query_id: str, batch_id: int) -> AppliedRound:
    """One config-sync round on the driver, as ``ConfigStreamWriter.commit`` runs it: plan and apply ``state``
    with ``evidence`` and the table's unfinished deletions and queue floors, record the round, log it."""
    standing, floors = tables.history()
    round_ = applier.apply(state, evidence.retrying(*unfinished_deletions(standing)), floors)
    recorded = tables.commit_round(query_id, batch_id, state.taken_ms, round_)
    log_round(link, batch_id, round_, recorded)
    return round_
def log_round(link: str, batch_id: int, round_: AppliedRound, recorded: list[ConfigChange]) -> None:
    """One line per round: a WARNING when a not-applied change starts or changes (a refusal, a deferral: a
    broker group unreachable), else INFO (a clear, applied changes); a standing one is not repeated."""
    new = [c for c in recorded if c.status is not ChangeStatus.APPLIED]
    still = sum(1 for c in round_.changes if c.status is not ChangeStatus.APPLIED) - sum(
        1 for c in new if c.status is not ChangeStatus.CLEARED)
    level = logging.WARNING if any(c.status in NOT_APPLIED for c in new) else logging.INFO
    log.log(level, "link %s config sync %d: %s%s%s", link, batch_id, summary(round_.changes),
            f" ({still} not applied as recorded before)" if still > 0 else "",
            "".join(f"; {c.status.value} {c.kind.value} {c.subject}: {c.detail}" for c in new))


def summary(changes: Sequence[ConfigChange]) -> str:
    counts: Mapping[str, int] = {s.value: sum(1 for c in changes if c.status is s) for s in ChangeStatus}
    return ", ".join(f"{n} {s}" for s, n in counts.items() if n) or "no change"

"""Row retention of a replication link's Delta tables: what a maintenance round removes from ``offsets``,
``metrics`` and ``offset_map`` (``connectors.replication.tables.LinkTables`` hands these rules to
``connectors.core.maintenance``; the durations are ``connectors.core.history_settings.HistorySettings``).

* ``offsets`` (history) and ``metrics``: rows older than the retention are deleted
  (``connectors.core.maintenance.delete_older_than``).
  The resume point is in ``current_offsets``, which has no retention.
* ``failures``: rows replayed longer ago than ``replayed_failures_retention`` are deleted
  (``delete_failures``); rows never replayed only with ``failures_retention`` set (default: kept until
  replayed), with a WARNING, since those messages can then no longer be replayed.
* ``placements``: the decisions of source queues idle for ``placements_retention`` (``stale_placements``:
  no ``current_offsets`` advance for that long, or none since the decision) are deleted
  (``delete_placements``); without the resume point's table nothing is deleted (no evidence of idleness).
* ``offset_map``: the checkpoint translation (``connectors.checkpoint.translation``) maps a group's source
  offset S through the run holding the first replicated message at or after S, and an S past every run
  through the queue's highest run. So the rows it needs exactly are, per source queue, the runs at or above
  the lowest offset any checkpointed group is at (``MapFloors``) and the highest run. ``fold_offset_map``
  keeps those and every row newer than the retention, and replaces the other old rows of a queue by one
  summary row per stretch of one target queue (``plan_map_fold``): lowest and highest source and target
  offsets, the message count, ``query_id`` ``SUMMARY_QUERY_ID``, batch id -1. A group that shows up below
  what is kept is translated into a summary: to its lowest target offset, marked inexact (its consumer
  re-reads), never past a message; an S past it still maps after its highest target offset. Without the
  summaries a late group below the kept runs would map to the first kept run: past messages.
  The fold is one atomic Delta commit (``replaceWhere``: the old rows' predicate and the summaries, which
  satisfy it), so a crash never leaves rows removed without their summary. It is marked a retention commit
  (``connectors.core.maintenance.RETENTION_COMMIT``): the checkpoint's incremental reader skips it and keeps
  the exact runs it read before, so a round costs it nothing (a full read starts from the summaries).
  Summaries are folded again with newer old rows by later rounds: a queue keeps about one per target queue
  it ever used.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
from deltalake import DeltaTable, write_deltalake

from broker_store.client import MessageQueue
from connectors.core.maintenance import (
    COMPACTED_FILES,
    NO_HOOKS,
    RETENTION_COMMIT,
    Retention,
    has_rows_before,
    predicate_time,
)

log = logging.getLogger(__name__)

SUMMARY_QUERY_ID = "retention-summary"
"""``query_id`` of an ``offset_map`` summary row (``LinkTables.is_map_summary``)."""

MapFloors = Callable[[], Mapping[MessageQueue, int] | None]
"""Per source queue, the lowest next offset of a group in the link's newest checkpoint; ``{}``: no group is
checkpointed; None: cannot tell now (the round leaves ``offset_map`` alone: an unanswered read is not "no
group")."""

_QUEUE = ("source_topic", "source_broker", "source_queue_id")
_PREDICATE_CHUNK = 200
"""Decisions per delete of ``delete_placements`` (bounds the predicate's length)."""
_TARGET = ("target_topic", "target_broker", "target_queue_id")


def _quote(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


@dataclass(frozen=True)
class MapFold:
    """What a round folds of ``offset_map`` (``plan_map_fold``)."""

    below: Mapping[tuple[str, str, int], int]
    """Per source queue (topic, broker, queue id): old rows with ``source_last_offset`` below this are folded."""
    folded: int
    """Old rows folded (the summaries they become are ``summaries``)."""
    summaries: list[dict[str, Any]]


def plan_map_fold(old: pa.Table, floors: Mapping[MessageQueue, int]) -> MapFold:
    """Which of ``old`` (the ``offset_map`` rows older than the retention) to fold, and their summaries. Pure.

    Per source queue, rows ending below min(the queue's floor, its highest old row's ``source_last_offset``)
    are folded: the highest old run is kept (it may be the queue's highest run), and so is every run a group
    at or above the floor needs. Summaries: the folded rows of a queue in source order, one per stretch of
    one target queue (see the module docstring). Arrow kernels over the rows (a round of the benchmark's
    week folds millions), Python only per queue and stretch; no Acero plan (it runs on the maintenance
    thread: ``connectors.checkpoint.tables`` says why that matters)."""
    if old.num_rows == 0:
        return MapFold({}, 0, [])
    order = [(c, "ascending") for c in (*_QUEUE, "source_first_offset", "committed_at")]
    rows = old.take(pc.sort_indices(old, sort_keys=order))
    below: dict[tuple[str, str, int], int] = {}
    summaries: list[dict[str, Any]] = []
    folded = 0
    for start, end in _runs_of_equal(rows, _QUEUE):
        queue_rows = rows.slice(start, end - start)
        queue = tuple(queue_rows[c][0].as_py() for c in _QUEUE)
        limit = int(pc.max(queue_rows["source_last_offset"]).as_py())
        floor = floors.get(MessageQueue(*queue))
        if floor is not None:
            limit = min(limit, floor)
        gone = queue_rows.filter(pc.less(queue_rows["source_last_offset"], limit))
        if gone.num_rows == 0:
            continue
        stretches = _runs_of_equal(gone, _TARGET)
        if len(stretches) == gone.num_rows and pc.all(pc.equal(gone["query_id"], SUMMARY_QUERY_ID)).as_py():
            continue  # only the summaries of earlier rounds: nothing new to fold
        below[queue] = limit
        folded += gone.num_rows
        summaries += [_summary(gone.slice(a, b - a)) for a, b in stretches]
    return MapFold(below, folded, summaries)


def _runs_of_equal(rows: pa.Table, columns: Iterable[str]) -> list[tuple[int, int]]:
    """[start, end) of each stretch of consecutive rows equal in ``columns``."""
    n = rows.num_rows
    if n == 0:
        return []
    change = pa.array([False] * (n - 1), pa.bool_())
    for c in columns:
        col = rows[c]
        change = pc.or_(change, pc.fill_null(pc.not_equal(col.slice(1), col.slice(0, n - 1)), True))
    starts = [0, *(i + 1 for i in pc.indices_nonzero(change).to_pylist())]
    return list(zip(starts, [*starts[1:], n], strict=True))


def _summary(rows: pa.Table) -> dict[str, Any]:
    return {
        **{c: rows[c][0].as_py() for c in (*_QUEUE, *_TARGET)},
        "source_first_offset": pc.min(rows["source_first_offset"]).as_py(),
        "source_last_offset": pc.max(rows["source_last_offset"]).as_py(),
        "target_first_offset": pc.min(rows["target_first_offset"]).as_py(),
        "target_last_offset": pc.max(rows["target_last_offset"]).as_py(),
        "messages": pc.sum(rows["messages"]).as_py(),
        "batch_id": -1, "query_id": SUMMARY_QUERY_ID,
        "committed_at": pc.max(rows["committed_at"]).as_py(),
    }


def fold_offset_map(retention_s: float, floors: MapFloors) -> Retention:
    """The ``offset_map`` rule of the module docstring, at the round's time."""

    def apply(dt: DeltaTable, now_ms: int) -> int:
        cutoff = now_ms - round(retention_s * 1000)
        if not has_rows_before(dt, "committed_at", cutoff):
            return 0
        known = floors()
        if known is None:
            log.info("offset map %s: the checkpointed groups' positions cannot be read now; not trimmed this "
                     "round", dt.table_uri)
            return 0
        when = pa.scalar(datetime.fromtimestamp(cutoff / 1000, tz=UTC), pa.timestamp("us", tz="UTC"))
        old = dt.to_pyarrow_dataset().to_table(filter=ds.field("committed_at") < when)
        fold = plan_map_fold(old, known)
        if not fold.below:
            return 0
        queues = " OR ".join(
            f"(source_topic = {_quote(t)} AND source_broker = {_quote(b)} AND source_queue_id = {q} "
            f"AND source_last_offset < {limit})" for (t, b, q), limit in sorted(fold.below.items()))
        summaries = pa.Table.from_pylist(fold.summaries, schema=old.schema)
        write_deltalake(dt, summaries, mode="overwrite", predicate=f"committed_at < {predicate_time(cutoff)} AND "
                        f"({queues})", writer_properties=COMPACTED_FILES, commit_properties=RETENTION_COMMIT,
                        post_commithook_properties=NO_HOOKS)
        return fold.folded - len(fold.summaries)

    return apply


def delete_failures(replayed_s: float, unreplayed_s: float | None) -> Retention:
    """The ``failures`` rule of the module docstring, at the round's time."""

    def apply(dt: DeltaTable, now_ms: int) -> int:
        removed = 0
        replayed_cutoff = now_ms - round(replayed_s * 1000)
        if has_rows_before(dt, "replayed_at", replayed_cutoff):
            stats = dt.delete(f"replayed = true AND replayed_at < {predicate_time(replayed_cutoff)}",
                              writer_properties=COMPACTED_FILES, commit_properties=RETENTION_COMMIT,
                              post_commithook_properties=NO_HOOKS)
            removed += int(stats.get("num_deleted_rows", 0))
        if unreplayed_s is not None:
            cutoff = now_ms - round(unreplayed_s * 1000)
            if has_rows_before(dt, "failed_at", cutoff):
                dt.update_incremental()
                stats = dt.delete(f"replayed = false AND failed_at < {predicate_time(cutoff)}",
                                  writer_properties=COMPACTED_FILES, commit_properties=RETENTION_COMMIT,
                                  post_commithook_properties=NO_HOOKS)
                dropped = int(stats.get("num_deleted_rows", 0))
                if dropped:
                    log.warning("failures %s: %d failed message(s) never replayed and older than failures_retention "
                                "(%.0f s) deleted; they can no longer be replayed", dt.table_uri, dropped,
                                unreplayed_s)
                removed += dropped
        return removed

    return apply


PlacementKey = tuple[str, str, str, int, str]
"""(source cluster, source topic, source broker, source queue id, target topic): one decision."""

LastAdvanced = Callable[[], Mapping[tuple[str, str, str, int], int] | None]
"""Per source queue (cluster, topic, broker, queue id), when its resume point last advanced (ms since the
epoch, ``current_offsets.updated_at``); None: cannot tell now (the round deletes nothing)."""


def stale_placements(decisions: Iterable[Mapping[str, Any]], advanced: Mapping[tuple[str, str, str, int], int],
                     now_ms: int, retention_ms: int) -> list[PlacementKey]:
    """The decisions (rows of ``placements``) whose source queue has been idle for ``retention_ms`` at
    ``now_ms``: its last advance, or the decision itself when it never advanced (or advanced only before it),
    is older than that. Every row of a key must be that old (duplicates of a decision go with it). Pure."""
    newest: dict[PlacementKey, int] = {}
    for row in decisions:
        queue = (row["source_cluster"], row["source_topic"], row["source_broker"], int(row["source_queue_id"]))
        key = (*queue, row["target_topic"])
        decided = row["decided_at"]
        decided_ms = int(decided.timestamp() * 1000) if isinstance(decided, datetime) else int(decided)
        last = max(decided_ms, advanced.get(queue, decided_ms))
        newest[key] = max(last, newest.get(key, last))
    return sorted(key for key, last in newest.items() if now_ms - last >= retention_ms)


def delete_placements(retention_s: float, last_advanced: LastAdvanced) -> Retention:
    """The ``placements`` rule of the module docstring, at the round's time."""

    def apply(dt: DeltaTable, now_ms: int) -> int:
        retention_ms = round(retention_s * 1000)
        if not has_rows_before(dt, "decided_at", now_ms - retention_ms):
            return 0
        advanced = last_advanced()
        if advanced is None:
            return 0
        stale = stale_placements(dt.to_pyarrow_table().to_pylist(), advanced, now_ms, retention_ms)
        removed = 0
        for chunk in range(0, len(stale), _PREDICATE_CHUNK):
            keys = " OR ".join(
                f"(source_cluster = {_quote(c)} AND source_topic = {_quote(t)} AND source_broker = {_quote(b)} "
                f"AND source_queue_id = {q} AND target_topic = {_quote(target)})"
                for c, t, b, q, target in stale[chunk:chunk + _PREDICATE_CHUNK])
            dt.update_incremental()
            stats = dt.delete(keys, writer_properties=COMPACTED_FILES, commit_properties=RETENTION_COMMIT,
                              post_commithook_properties=NO_HOOKS)
            removed += int(stats.get("num_deleted_rows", 0))
        if removed:
            log.info("placements %s: %d decision(s) of source queues idle for placements_retention (%.0f s) "
                     "deleted; such a queue is decided anew if it replicates again", dt.table_uri, removed,
                     retention_s)
        return removed

    return apply

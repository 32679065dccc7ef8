"""A link's Delta history: the current_offsets resume point (read without the history, crash ordering,
migration), row retention (what is kept) and the checkpoint translation after retention, and the
maintenance rounds (compaction, vacuum, log clean-up) driven by the injected clock."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from broker_store.client import MessageQueue
from connectors.checkpoint.link_state import LinkProgressReader, read_link_progress
from connectors.checkpoint.translation import Outcome
from connectors.core.config import parse_replicator_config
from connectors.core.errors import ReplicatorConfigError, TableError
from connectors.core.group_positions import floors_from_rows
from connectors.core.history_settings import HistorySettings
from connectors.core.maintenance import TableMaintenance
from connectors.replication.records import BatchMetrics, OffsetMapping
from connectors.replication.retention import SUMMARY_QUERY_ID, plan_map_fold
from connectors.replication.tables import (
    CURRENT_OFFSETS,
    FAILURES,
    METRICS,
    OFFSET_MAP,
    OFFSET_MAP_SCHEMA,
    OFFSETS,
    LinkTables,
    next_current_rows,
)
from tests.support.clocks import MillisClock
from tests.support.link_history import DAY_MS, START_MS, link, round_now

Q0 = MessageQueue("Orders", "src-a", 0)
Q1 = MessageQueue("Orders", "src-a", 1)
T0 = MessageQueue("Orders", "dst-a", 0)
T1 = MessageQueue("Orders", "dst-a", 1)
def run(first: int, last: int, target_first: int, queue: MessageQueue = Q0, target: MessageQueue = T0) -> OffsetMapping:
    return OffsetMapping(queue.topic, queue.broker_name, queue.queue_id, first, last, target.topic,
                         target.broker_name, target.queue_id, target_first, target_first + last - first,
                         last - first + 1)


def rows(t: LinkTables, table: str) -> list[dict[str, Any]]:
    table_rows: list[dict[str, Any]] = DeltaTable(t.path(table)).to_pyarrow_table().to_pylist()  # pyarrow: untyped
    return table_rows


# -- current_offsets ---------------------------------------------------------------------------------


def test_the_resume_point_is_read_from_current_offsets_alone(tmp_path: Path) -> None:
    clock = MillisClock()
    t = link(tmp_path, clock)
    for batch in range(20):
        clock.now_ms += 1000
        t.commit_batch("q", batch, {Q0: 10 * (batch + 1), **({Q1: batch} if batch % 2 else {})}, [], [],
                       BatchMetrics(1, 1))
    assert len(rows(t, OFFSETS)) == 30 and len(rows(t, CURRENT_OFFSETS)) == 2  # one row per queue
    shutil.rmtree(t.path(OFFSETS))  # the history is not read
    fresh = LinkTables(t.location, source_cluster="src")
    assert fresh.latest_offsets() == fresh.delivered_offsets() == {Q0: 200, Q1: 19}


def test_a_reset_point_is_latest_until_the_next_batch_and_never_delivered(tmp_path: Path) -> None:
    clock = MillisClock()
    t = link(tmp_path, clock)
    t.commit_batch("q", 0, {Q0: 50, Q1: 5}, [], [], BatchMetrics(1, 1))
    t.append_resume_point({Q0: 20})
    assert t.latest_offsets() == {Q0: 20, Q1: 5} and t.delivered_offsets() == {Q0: 50, Q1: 5}
    assert len(rows(t, CURRENT_OFFSETS)) == 3
    t.commit_batch("q2", 0, {Q0: 30}, [], [], BatchMetrics(1, 1))  # a new query resumed from the reset point
    assert t.latest_offsets() == t.delivered_offsets() == {Q0: 30, Q1: 5}
    assert len(rows(t, CURRENT_OFFSETS)) == 2


def test_next_current_rows_keeps_the_newest_batch_row_and_a_newer_reset_row() -> None:
    def row(queue: int, offset: int, query: str, version: int, cluster: str = "src") -> dict[str, Any]:
        return {"cluster": cluster, "topic": "Orders", "broker_name": "src-a", "queue_id": queue,
                "next_offset": offset, "batch_id": 0, "query_id": query, "commit_version": version,
                "updated_at": None}

    current = [row(0, 10, "q", 1), row(1, 5, "q", 1), row(0, 3, "q", 1, cluster="old")]
    after_reset = next_current_rows(current, [row(0, 7, "reset-x", 2)])
    assert {(r["cluster"], r["queue_id"], r["next_offset"]) for r in after_reset} == {
        ("src", 0, 10), ("src", 0, 7), ("src", 1, 5), ("old", 0, 3)}
    after_batch = next_current_rows(after_reset, [row(0, 12, "q2", 3)])
    assert {(r["cluster"], r["queue_id"], r["next_offset"]) for r in after_batch} == {
        ("src", 0, 12), ("src", 1, 5), ("old", 0, 3)}


def test_a_crash_between_the_history_and_current_offsets_never_moves_the_resume_point(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """current_offsets is committed last: a crash after the history (and the map, failures, metrics) leaves
    the resume point at the previous batch (the batch is re-sent: at-least-once); the re-run completes it
    without a second history row. A failure before it never writes current_offsets."""
    clock = MillisClock()
    t = link(tmp_path, clock)
    t.commit_batch("q", 0, {Q0: 10}, [run(0, 9, 0)], [], BatchMetrics(10, 10))
    real = LinkTables._append_once

    def crash_at(table: str) -> Any:
        def append_once(self: LinkTables, name: str, *args: Any) -> bool | None:
            if name == table:
                raise TableError("driver killed (simulated)")
            return real(self, name, *args)
        return append_once

    monkeypatch.setattr(LinkTables, "_append_once", crash_at(CURRENT_OFFSETS))
    with pytest.raises(TableError, match="simulated"):
        t.commit_batch("q", 1, {Q0: 20}, [run(10, 19, 10)], [], BatchMetrics(10, 10))
    assert sorted(r["next_offset"] for r in rows(t, OFFSETS)) == [10, 20]  # the history has the batch ...
    restarted = LinkTables(t.location, source_cluster="src")
    assert restarted.latest_offsets() == restarted.delivered_offsets() == {Q0: 10}  # ... the resume point not
    monkeypatch.setattr(LinkTables, "_append_once", crash_at(OFFSETS))
    with pytest.raises(TableError, match="simulated"):
        restarted.commit_batch("q", 2, {Q0: 30}, [], [], BatchMetrics(1, 1))
    assert restarted.latest_offsets() == {Q0: 10}  # a first-stage failure never reaches current_offsets
    monkeypatch.undo()
    rerun = restarted.commit_batch("q", 1, {Q0: 20}, [run(10, 19, 10)], [], BatchMetrics(10, 10))
    assert rerun.written[CURRENT_OFFSETS] and {OFFSETS, OFFSET_MAP, METRICS} <= rerun.already_committed
    assert restarted.latest_offsets() == restarted.delivered_offsets() == {Q0: 20}
    assert sorted(r["next_offset"] for r in rows(t, OFFSETS)) == [10, 20]
    assert restarted.commit_batch("q", 1, {Q0: 20}, [], [], BatchMetrics(1, 1)).duplicate


def test_a_link_without_current_offsets_resumes_from_its_history_then_writes_it(tmp_path: Path) -> None:
    clock = MillisClock()
    t = link(tmp_path, clock)
    t.commit_batch("q", 0, {Q0: 10, Q1: 4}, [], [], BatchMetrics(1, 1))
    t.commit_batch("q", 1, {Q0: 20}, [], [], BatchMetrics(1, 1))
    t.append_resume_point({Q1: 2})
    shutil.rmtree(t.path(CURRENT_OFFSETS))  # tables written before current_offsets existed
    old = LinkTables(t.location, source_cluster="src")
    assert old.latest_offsets() == {Q0: 20, Q1: 2} and old.delivered_offsets() == {Q0: 20, Q1: 4}
    old.commit_batch("q", 2, {Q0: 30}, [], [], BatchMetrics(1, 1))
    assert DeltaTable(t.path(CURRENT_OFFSETS)).version() == 0
    shutil.rmtree(t.path(OFFSETS))
    assert old.latest_offsets() == {Q0: 30, Q1: 2} and old.delivered_offsets() == {Q0: 30, Q1: 4}


# -- retention ---------------------------------------------------------------------------------------


def test_history_and_metrics_keep_their_retention_and_the_resume_point_stays(tmp_path: Path) -> None:
    clock = MillisClock()
    t = link(tmp_path, clock, offsets_retention="2 days", metrics_retention="1 day")
    for day in range(5):
        clock.now_ms = START_MS + day * DAY_MS
        t.commit_batch("q", day, {Q0: 10 * (day + 1), **({Q1: 1} if day == 0 else {})}, [], [], BatchMetrics(1, 1))
    round_now(t)
    history = rows(t, OFFSETS)
    assert sorted(r["next_offset"] for r in history) == [30, 40, 50]  # days 2-4: within 2 days of day 4
    assert sorted(r["batch_id"] for r in rows(t, METRICS)) == [3, 4]
    assert t.latest_offsets() == {Q0: 50, Q1: 1}  # Q1 idle for 4 days: its resume point is kept
    assert t.read(FAILURES).num_rows == 0


def test_the_history_is_not_trimmed_while_it_is_the_resume_point(tmp_path: Path) -> None:
    clock = MillisClock()
    t = link(tmp_path, clock, offsets_retention="1 day")
    t.commit_batch("q", 0, {Q0: 10}, [], [], BatchMetrics(1, 1))
    shutil.rmtree(t.path(CURRENT_OFFSETS))  # an old link's tables
    clock.now_ms += 3 * DAY_MS
    round_now(t)
    assert len(rows(t, OFFSETS)) == 1 and t.latest_offsets() == {Q0: 10}


def _map_row(first: int, last: int, target_first: int, at_ms: int, *, target: MessageQueue = T0,
             query: str = "q") -> dict[str, Any]:
    return {"source_topic": "Orders", "source_broker": "src-a", "source_queue_id": 0,
            "source_first_offset": first, "source_last_offset": last, "target_topic": target.topic,
            "target_broker": target.broker_name, "target_queue_id": target.queue_id,
            "target_first_offset": target_first, "target_last_offset": target_first + last - first,
            "messages": last - first + 1, "batch_id": 0, "query_id": query,
            "committed_at": datetime.fromtimestamp(at_ms / 1000, tz=UTC)}


def test_plan_map_fold_keeps_the_highest_run_and_every_run_a_group_needs() -> None:
    old = pa.Table.from_pylist([
        _map_row(40, 49, 40, 5), _map_row(10, 19, 10, 2), _map_row(20, 29, 100, 3, target=T1),  # any order
        _map_row(30, 39, 110, 4, target=T1), _map_row(0, 9, 0, 1)], schema=OFFSET_MAP_SCHEMA)
    fold = plan_map_fold(old, {})  # no group: everything but the highest old run
    assert fold.below == {("Orders", "src-a", 0): 49} and fold.folded == 4
    assert [(s["source_first_offset"], s["source_last_offset"], s["target_first_offset"],
             s["target_last_offset"], s["messages"], s["target_queue_id"], s["query_id"]) for s in fold.summaries] == [
        (0, 19, 0, 19, 20, 0, SUMMARY_QUERY_ID), (20, 39, 100, 119, 20, 1, SUMMARY_QUERY_ID)]
    fold = plan_map_fold(old, {Q0: 25})  # a group at 25 needs the run 20..29 and every run after it
    assert fold.below == {("Orders", "src-a", 0): 25} and fold.folded == 2
    assert plan_map_fold(old, {Q0: 5}).folded == 0  # a group inside the first run: nothing folded
    again = plan_map_fold(pa.Table.from_pylist([fold.summaries[0], old.to_pylist()[2]], schema=OFFSET_MAP_SCHEMA),
                          {Q0: 25})  # a summary alone is not folded again
    assert again.folded == 0 and not again.below


def test_retention_never_removes_a_run_a_group_needs_and_translation_stays_exact(tmp_path: Path) -> None:
    """Runs with gaps (one message skipped per batch) so nothing merges: each batch is its own run. After the
    map's retention, a group at or above the floor translates exactly as before; a group below the kept runs
    lands in a summary: conservatively (inexact, at or before its true target offset), never past it."""
    clock = MillisClock()
    floors: dict[MessageQueue, int] = {Q0: 255}
    t = link(tmp_path, clock, floors, offset_map_retention="1 day")
    target = 0
    for batch in range(40):  # 40 batches of 10 offsets over 4 days, 9 messages each (offset 10b+5 skipped)
        clock.now_ms = START_MS + batch * DAY_MS // 10
        first = 10 * batch
        mapping = OffsetMapping("Orders", "src-a", 0, first, first + 9, "Orders", "dst-a", 0, target, target + 8, 9)
        t.commit_batch("q", batch, {Q0: first + 10}, [mapping], [], BatchMetrics(9, 9))
        target += 9
    before = read_link_progress(t)
    incremental = LinkProgressReader(t)
    incremental.read()
    round_now(t)
    after_fold = incremental.read()  # the retention commit is skipped: the exact runs read before stay
    assert not after_fold.full_read and after_fold.runs == 0
    for offset in range(0, 402):
        assert after_fold.translator.translate(Q0, offset, 400) == before.translator.translate(Q0, offset, 400)
    kept = rows(t, OFFSET_MAP)
    summaries = [r for r in kept if r["query_id"] == SUMMARY_QUERY_ID]
    assert len(summaries) == 1 and summaries[0]["source_first_offset"] == 0
    assert min(r["source_first_offset"] for r in kept if r["query_id"] != SUMMARY_QUERY_ID) == 250
    assert len(kept) == 1 + 15  # runs 250..399 kept (the group at 255 and everything after)
    after = read_link_progress(t)
    for offset in range(250, 402):
        assert after.translator.translate(Q0, offset, 400) == before.translator.translate(Q0, offset, 400), offset
    for offset in range(0, 250):
        true = before.translator.translate(Q0, offset, 400)
        late = after.translator.translate(Q0, offset, 400)
        assert late.outcome is Outcome.TRANSLATED and late.target == T0
        assert late.target_offset is not None and true.target_offset is not None
        assert late.target_offset <= true.target_offset  # re-reads, never skips
        assert not late.exact
    # the group moves on: the next round folds what it no longer needs; the summary is folded again
    floors[Q0] = 385
    round_now(t)
    kept = rows(t, OFFSET_MAP)
    assert [r["source_first_offset"] for r in kept if r["query_id"] == SUMMARY_QUERY_ID] == [0]
    # kept: the highest old run (280..289: runs from 290 on are newer than the day of retention) and after
    assert min(r["source_first_offset"] for r in kept if r["query_id"] != SUMMARY_QUERY_ID) == 280
    after = read_link_progress(t)
    for offset in range(280, 402):
        assert after.translator.translate(Q0, offset, 400) == before.translator.translate(Q0, offset, 400), offset


def test_the_map_is_left_alone_while_the_groups_positions_are_unknown(tmp_path: Path) -> None:
    clock = MillisClock()
    t2 = LinkTables(tmp_path / "l", source_cluster="src", clock=clock, map_floors=lambda: None,
                    history=HistorySettings(offset_map_retention="1 day", maintenance_interval=3600),
                    background_maintenance=False)
    for batch in range(3):
        clock.now_ms = START_MS + batch * DAY_MS
        t2.commit_batch("q", batch, {Q0: 10 * batch + 10}, [run(10 * batch, 10 * batch + 8, 9 * batch)], [],
                        BatchMetrics(9, 9))
    round_now(t2)
    assert len(rows(t2, OFFSET_MAP)) == 3


def test_floors_are_the_lowest_newest_position_of_the_groups() -> None:
    at = [datetime.fromtimestamp(s, tz=UTC) for s in (1, 2)]
    base = {"source_topic": "Orders", "source_broker": "src-a", "source_queue_id": 0}
    assert floors_from_rows([
        {**base, "group": "a", "source_offset": 5, "committed_at": at[0]},
        {**base, "group": "a", "source_offset": 50, "committed_at": at[1]},   # a moved on: 50
        {**base, "group": "b", "source_offset": 30, "committed_at": at[1]},
        {**base, "group": "c", "source_offset": -1, "committed_at": at[1]},   # no offset: ignored
        {"group": "d", "source_topic": "", "source_broker": "", "source_queue_id": -1, "source_offset": -1,
         "committed_at": at[1]},
    ]) == {Q0: 30}


# -- maintenance -------------------------------------------------------------------------------------


def test_rounds_compact_vacuum_and_keep_the_files_of_recent_versions(tmp_path: Path) -> None:
    clock = MillisClock()
    t = LinkTables(tmp_path / "l", source_cluster="src", clock=clock, background_maintenance=False,
                   history=HistorySettings(maintenance_interval=10, file_retention=30))
    for batch in range(100):
        clock.now_ms += 1000
        t.commit_batch("q", batch, {Q0: batch + 1, Q1: batch + 1}, [run(batch, batch, batch)], [], BatchMetrics(1, 1))
    for table in (OFFSETS, OFFSET_MAP, METRICS, CURRENT_OFFSETS):
        parquet = list(Path(t.path(table)).glob("*.parquet"))
        # a round every 10 s compacts; files removed are kept 30 s (three rounds) for readers of those versions
        assert len(parquet) <= 45, (table, len(parquet))
        assert len(DeltaTable(t.path(table)).file_uris()) <= 11, table
    assert t.latest_offsets() == {Q0: 100, Q1: 100} and len(rows(t, OFFSETS)) == 200
    assert DeltaTable(t.path(OFFSETS)).transaction_version("q") == 99
    assert list(Path(t.path(OFFSETS), "_delta_log").glob("*.checkpoint.parquet"))
    assert DeltaTable(t.path(OFFSETS)).metadata().configuration["delta.logRetentionDuration"] == "interval 30 seconds"


def test_history_settings_validate_and_name_the_field() -> None:
    base = {"clusters": [{"name": "a", "namesrv": "h:1"}, {"name": "b", "namesrv": "h:2"}],
            "links": [{"name": "l", "source": "a", "target": "b", "topics": {"all_topics": True},
                       "checkpoint_location": "c", "delta_location": "d"}]}
    link_config = parse_replicator_config(base).links[0]
    assert link_config.history.offsets_retention == 7 * 86400 and link_config.history.offset_map_retention == 86400
    base["links"][0]["history"] = {"offsets_retention": "3 days", "file_retention": "5 minutes"}  # type: ignore[index]
    history = parse_replicator_config(base).links[0].history
    assert (history.offsets_retention, history.file_retention) == (3 * 86400, 300)
    for bad in ({"metrics_retention": "0 days"}, {"offsets_retention": "a week"}, {"target_file_size": 10},
                {"vacuum": True}):
        base["links"][0]["history"] = bad  # type: ignore[index]
        with pytest.raises(ReplicatorConfigError, match=f"history.{next(iter(bad))}"):
            parse_replicator_config(base)


def test_a_round_reports_a_failing_table_and_carries_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = MillisClock()
    t = link(tmp_path, clock)
    t.commit_batch("q", 0, {Q0: 1}, [run(0, 0, 0)], [], BatchMetrics(1, 1))
    maintenance = TableMaintenance(t, HistorySettings(), background=False,
                                   retention={METRICS: lambda dt, now: (_ for _ in ()).throw(OSError("disk"))})
    done = {r.table: r for r in maintenance.run_round(clock.now_ms)}
    assert done[METRICS].errors == ["disk"] and not done[OFFSETS].errors

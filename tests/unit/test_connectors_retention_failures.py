"""Retention of a link's ``failures`` and ``placements`` tables (``connectors.replication.retention``), applied by
the link's maintenance rounds (``connectors.core.maintenance``) with the settings of the link's ``history:``
(``connectors.core.history_settings``). Real Delta tables in a temp dir, time on a manual clock."""

from __future__ import annotations

import logging
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from broker_store.client import MessageQueue
from connectors.core.config import parse_replicator_config
from connectors.core.delta import shared_table_set
from connectors.core.errors import ReplicatorConfigError
from connectors.core.history_settings import HistorySettings
from connectors.replication.placement_table import PLACEMENTS, PlacementTable
from connectors.replication.queue_placement import Placement, TargetQueue
from connectors.replication.records import BatchMetrics, FailedMessage, FailureOutcome, RecordedFailure
from connectors.replication.retention import stale_placements
from connectors.replication.tables import FAILURES, LinkTables, failure_id
from tests.support.clocks import MillisClock
from tests.support.link_history import DAY_MS, START_MS, link, round_now

Q0 = MessageQueue("Orders", "src-a", 0)
Q1 = MessageQueue("Orders", "src-a", 1)
Q2 = MessageQueue("Daily-1", "src-a", 0)
def failed(offset: int) -> RecordedFailure:
    message = FailedMessage(Q0.topic, Q0.broker_name, Q0.queue_id, offset, f"MSG{offset}", "Orders", b"body", {},
                            "SystemBusyError", 4)
    return RecordedFailure(message, "dismiss", FailureOutcome.DISMISSED)


def failure_offsets(t: LinkTables) -> list[int]:
    return sorted(r["queue_offset"] for r in DeltaTable(t.path(FAILURES)).to_pyarrow_table().to_pylist())


def test_replayed_failures_go_after_their_retention_and_unreplayed_ones_stay(tmp_path: Path) -> None:
    clock = MillisClock()
    t = link(tmp_path, clock, {}, replayed_failures_retention="2 days")
    t.commit_batch("q", 0, {Q0: 10}, [], [failed(o) for o in (1, 2, 3)], BatchMetrics(7, 7))
    ids = {o: failure_id("q", 0, Q0, o) for o in (1, 2, 3)}
    clock.now_ms += DAY_MS // 2
    assert t.mark_replayed([ids[1]]) == 1
    clock.now_ms += 3 * DAY_MS
    assert t.mark_replayed([ids[2]]) == 1
    round_now(t)
    assert failure_offsets(t) == [2, 3]  # 1 was replayed 3 days ago; 2 just now; 3 never: kept until replayed
    clock.now_ms += 30 * DAY_MS
    round_now(t)
    assert failure_offsets(t) == [3]
    assert [f.message.queue_offset for f in t.unreplayed_failures()] == [3]


def test_unreplayed_failures_go_only_with_failures_retention_and_a_warning(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    clock = MillisClock()
    t = link(tmp_path, clock, {}, failures_retention="5 days")
    t.commit_batch("q", 0, {Q0: 10}, [], [failed(1)], BatchMetrics(1, 1))
    clock.now_ms += 3 * DAY_MS
    t.commit_batch("q", 1, {Q0: 20}, [], [failed(11)], BatchMetrics(1, 1))
    clock.now_ms += 3 * DAY_MS
    with caplog.at_level(logging.WARNING, logger="connectors.replication.retention"):
        round_now(t)
    assert failure_offsets(t) == [11]
    assert "1 failed message(s) never replayed" in caplog.text and "can no longer be replayed" in caplog.text


def record(t: LinkTables, clock: MillisClock, *queues: MessageQueue) -> None:
    table = PlacementTable(t.location, source_cluster="src", clock=clock)
    table.record([Placement(q, q.topic, TargetQueue("dst-a", q.queue_id), "preserved") for q in queues], "driver")


def decided(t: LinkTables) -> list[tuple[str, int]]:
    rows = DeltaTable(f"{t.location}/{PLACEMENTS}").to_pyarrow_table().to_pylist()
    return sorted((r["source_topic"], r["source_queue_id"]) for r in rows)


def test_decisions_of_idle_source_queues_go_after_placements_retention(tmp_path: Path) -> None:
    clock = MillisClock()
    t = link(tmp_path, clock, {}, placements_retention="10 days")
    record(t, clock, Q0, Q1, Q2)
    for day in range(12):
        clock.now_ms = START_MS + day * DAY_MS
        # Q0 advances daily, Q1 advanced on day 0 only, Q2 (a topic of one day, gone) never did
        t.commit_batch("q", day, {Q0: day + 1, **({Q1: 5} if day == 0 else {})}, [], [], BatchMetrics(1, 1))
    round_now(t)  # day 11: Q1 idle 11 days, Q2 decided 11 days ago; Q0 advanced today
    assert decided(t) == [("Orders", 0)]
    assert [p.source for p in PlacementTable(t.location, source_cluster="src").load()] == [Q0]


def test_decisions_stay_without_the_resume_point_or_with_no_retention(tmp_path: Path) -> None:
    clock = MillisClock()
    t = link(tmp_path / "a", clock, {}, placements_retention="1 day")
    record(t, clock, Q0)  # no batch committed: current_offsets does not exist, idleness is unknown
    clock.now_ms += 5 * DAY_MS
    round_now(t)
    assert decided(t) == [("Orders", 0)]
    kept = link(tmp_path / "b", clock, {}, placements_retention=None)
    record(kept, clock, Q0)
    kept.commit_batch("q", 0, {Q1: 1}, [], [], BatchMetrics(1, 1))
    clock.now_ms += 400 * DAY_MS
    round_now(kept)
    assert decided(kept) == [("Orders", 0)]


def test_stale_placements_needs_every_row_of_a_decision_idle() -> None:
    at = datetime.fromtimestamp(START_MS / 1000, tz=UTC)
    later = datetime.fromtimestamp((START_MS + 5 * DAY_MS) / 1000, tz=UTC)
    row = {"source_cluster": "src", "source_topic": "T", "source_broker": "b", "source_queue_id": 0,
           "target_topic": "T"}
    rows = [{**row, "decided_at": at}, {**row, "decided_at": later}]  # a duplicate re-made after a crash
    now = START_MS + 12 * DAY_MS
    assert stale_placements(rows, {}, now, 10 * DAY_MS) == []  # the duplicate is 7 days old
    assert stale_placements(rows, {}, now + 3 * DAY_MS, 10 * DAY_MS) == [("src", "T", "b", 0, "T")]
    assert stale_placements(rows, {("src", "T", "b", 0): now}, now + 3 * DAY_MS, 10 * DAY_MS) == []


def test_failure_and_placement_settings_default_and_validate() -> None:
    base: dict[str, Any] = {
        "clusters": [{"name": "a", "namesrv": "h:1"}, {"name": "b", "namesrv": "h:2"}],
        "links": [{"name": "l", "source": "a", "target": "b", "topics": {"all_topics": True},
                   "checkpoint_location": "c", "delta_location": "d"}]}
    history = parse_replicator_config(base).links[0].history
    assert (history.replayed_failures_retention, history.failures_retention,
            history.placements_retention) == (7 * 86400, None, 30 * 86400)
    base["links"][0]["history"] = {"failures_retention": "90 days", "placements_retention": None}
    history = parse_replicator_config(base).links[0].history
    assert (history.failures_retention, history.placements_retention) == (90 * 86400, None)
    for bad in ({"replayed_failures_retention": None}, {"failures_retention": "0 days"},
                {"placements_retention": "a month"}):
        base["links"][0]["history"] = bad
        with pytest.raises(ReplicatorConfigError, match=f"history.{next(iter(bad))}"):
            parse_replicator_config(base)


def test_the_shared_link_tables_share_their_placements_table(tmp_path: Path) -> None:
    """The writer's driver gets both sets through ``shared_table_set`` (``writer._link_tables`` and
    ``_record_placements``); creating ``LinkTables`` asks for the ``PlacementTable`` from inside that call (it
    once deadlocked on a non-reentrant lock: the job's commit hung)."""
    location = str(tmp_path / "l")
    done: list[LinkTables] = []

    def create() -> None:
        done.append(shared_table_set((location, "src"), LinkTables, lambda: LinkTables(
            location, source_cluster="src", history=HistorySettings(), background_maintenance=False)))

    worker = threading.Thread(target=create, daemon=True)
    worker.start()
    worker.join(60)  # a deadlock guard, not a timing assertion
    assert done, "creating the shared LinkTables deadlocked"
    placements = shared_table_set((location, "src"), PlacementTable,
                                  lambda: PlacementTable(location, source_cluster="src"))
    assert done[0].maintenance is not None and placements.maintenance is done[0].maintenance.companions[0]

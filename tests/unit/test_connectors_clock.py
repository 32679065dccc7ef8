"""The connectors read the one clock (``broker_store.clock``; docs/architecture.md, "The broker's layers"): a
``ManualClock`` the test moves drives the heartbeat schedule and monitor, stamps the link's Delta tables and the
checkpoint snapshots, and no connector module reads the time module itself (so none can slip past the injected
clock)."""

from __future__ import annotations

import ast
import threading
from datetime import UTC, datetime
from pathlib import Path

import pytest
from deltalake import DeltaTable

from broker_store.client import MessageQueue
from broker_store.clock import ManualClock
from connectors.core.config import parse_replicator_config
from connectors.heartbeat.monitor import HeartbeatMonitor, LinkStatus
from connectors.heartbeat.monitor_loop import HeartbeatMonitorLoop
from connectors.heartbeat.schedule import HeartbeatSchedule
from connectors.replication.records import BatchMetrics
from connectors.replication.tables import CURRENT_OFFSETS, METRICS, LinkTables
from tests.support.import_graph import REPO

WALL = 1_800_000_000.0


def test_a_manual_clock_drives_the_heartbeat_schedule() -> None:
    clock = ManualClock(wall=WALL)
    schedule = HeartbeatSchedule(2_000, clock)
    tick, state = schedule.next_item(schedule.initial_state())
    assert tick is not None and tick.due_ms == WALL * 1000  # the first one at once
    clock.advance(1.5)
    assert schedule.next_item(state)[0] is None
    clock.advance(0.5)
    assert schedule.next_item(state)[0] is not None


def test_a_manual_clock_ends_a_silent_links_start_up() -> None:
    clock = ManualClock(wall=WALL)
    monitor = HeartbeatMonitor(["l1"], interval_ms=1_000, lagging_threshold_ms=500, stale_intervals=3,
                               startup_limit_ms=10_000, clock=clock)
    assert monitor.state("l1").status is LinkStatus.STARTING
    clock.advance(10.0)
    assert monitor.state("l1").status is LinkStatus.STARTING  # exactly at the limit
    clock.advance(1.0)
    state = monitor.state("l1")
    assert state.status is not LinkStatus.STARTING and state.age_ms == 11_000, state


def test_the_link_tables_stamp_their_rows_with_their_clock(tmp_path: Path) -> None:
    clock = ManualClock(wall=WALL)
    tables = LinkTables(tmp_path / "l", source_cluster="src", clock=clock)
    tables.commit_batch("q", 0, {MessageQueue("T", "b", 0): 5}, [], [], BatchMetrics(5, 50))
    clock.advance(60.0)
    tables.commit_batch("q", 1, {MessageQueue("T", "b", 0): 9}, [], [], BatchMetrics(4, 40))
    committed = [r["committed_at"] for r in DeltaTable(tables.path(METRICS)).to_pyarrow_table().to_pylist()]
    assert sorted(committed) == [datetime.fromtimestamp(WALL, UTC), datetime.fromtimestamp(WALL + 60, UTC)]
    current = DeltaTable(tables.path(CURRENT_OFFSETS)).to_pyarrow_table().to_pylist()
    assert [r["updated_at"] for r in current] == [datetime.fromtimestamp(WALL + 60, UTC)]


class ParkingClock(ManualClock):
    """A ManualClock that reports each time a thread parks in ``wait``; it still holds the condition's lock then, so
    an ``advance`` after the report cannot slip in before the thread waits."""

    def __init__(self) -> None:
        super().__init__(wall=WALL)
        self.parked = threading.Semaphore(0)

    def wait(self, cond: threading.Condition, timeout: float) -> None:
        self.parked.release()
        super().wait(cond, timeout)


def test_a_manual_clock_paces_the_heartbeat_monitor_loop_and_stop_ends_its_wait(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = parse_replicator_config({
        "clusters": [{"name": "s", "namesrv": "127.0.0.1:1"}, {"name": "t", "namesrv": "127.0.0.1:2"}],
        "links": [{"name": "l1", "source": "s", "target": "t", "topics": {"all_topics": True},
                   "checkpoint_location": str(tmp_path / "c"), "delta_location": str(tmp_path / "d")}],
        "heartbeat": {"interval": 1}})
    clock = ParkingClock()
    loop = HeartbeatMonitorLoop(config, ["l1"], clock=clock)
    polls: list[float] = []
    monkeypatch.setattr(loop, "poll_once", lambda: polls.append(clock.monotonic()))
    start = clock.monotonic()
    loop.start()
    try:
        assert clock.parked.acquire(timeout=30)  # first poll done, waiting on the clock
        assert polls == [start]
        clock.advance(loop.poll_interval / 2)
        assert clock.parked.acquire(timeout=30)  # woken early, waits for the rest
        assert polls == [start]
        clock.advance(loop.poll_interval / 2)
        assert clock.parked.acquire(timeout=30)
        assert polls == [start, start + loop.poll_interval]
    finally:
        loop.stop()  # ends the wait without the clock moving
    assert loop._thread is not None and not loop._thread.is_alive()
    assert len(polls) == 2


TIME_READS = frozenset({"time", "time_ns", "monotonic", "monotonic_ns", "perf_counter", "sleep"})


def test_no_connector_module_reads_the_time_module() -> None:
    """Every timer and stamp of the connectors goes through an injected ``ThreadClock`` (``SYSTEM_CLOCK`` by
    default): none imports ``time`` or calls ``time.<clock>``."""
    found = []
    for path in sorted((REPO / "connectors").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import) and any(alias.name == "time" for alias in node.names):
                found.append(f"{path.relative_to(REPO)}:{node.lineno} imports time")
            elif isinstance(node, ast.ImportFrom) and node.module == "time":
                found.append(f"{path.relative_to(REPO)}:{node.lineno} imports from time")
            elif (isinstance(node, ast.Attribute) and node.attr in TIME_READS and isinstance(node.value, ast.Name)
                  and node.value.id == "time"):
                found.append(f"{path.relative_to(REPO)}:{node.lineno} calls time.{node.attr}")
    assert found == []

"""The metrics endpoint's parts without Spark or a broker: replication counters fed from a real Delta
metrics table, heartbeat gauges computed at scrape time, the port-in-use error, and jobs.lag's reading
of a scrape (statuses, --check line)."""

from __future__ import annotations

import socket
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake
from prometheus_client import CollectorRegistry, generate_latest

from connectors.core.config import LinkConfig
from connectors.core.monitoring import MetricsSettings
from connectors.core.topic_settings import TopicMappingConfig
from connectors.heartbeat.monitor import HeartbeatMonitor
from connectors.heartbeat.records import Heartbeat, Observed
from connectors.heartbeat.tables import HEARTBEATS, HeartbeatTables
from connectors.replication.records import BatchMetrics, LatencySummary
from connectors.replication.tables import METRICS, METRICS_SCHEMA, LinkTables
from jobs.lag import Status, check_line, link_lags
from jobs.metrics import HeartbeatCollector, MetricsPortInUseError, MetricsTableFeed, ReplicationMetrics, serve
from tests.support.clocks import ReadingClock


def _link(tmp_path: Path, name: str = "l1") -> LinkConfig:
    return LinkConfig(name=name, source="a", target="b", topics=TopicMappingConfig(all_topics=True),
                      checkpoint_location=str(tmp_path / "cp"), delta_location=str(tmp_path / "delta"))


def _batch(tables: LinkTables, batch_id: int, messages: int, p99: int) -> None:
    tables.commit_batch("q1", batch_id, {}, [], [], BatchMetrics(
        messages=messages, bytes=messages * 10, skipped_loop=1, failed=2,
        latency=LatencySummary(5, p99, p99), record_age_ms=300))


def _value(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, labels)


def test_replication_metrics_are_fed_incrementally_from_the_delta_table(tmp_path: Path) -> None:
    link = _link(tmp_path)
    tables = LinkTables.for_link(link)
    _batch(tables, 0, 100, 40)  # committed before the endpoint started: not counted
    feed = MetricsTableFeed(link, since=datetime.now(UTC) + timedelta(milliseconds=5))
    registry = CollectorRegistry()
    metrics = ReplicationMetrics(registry)
    time.sleep(0.01)
    _batch(tables, 1, 7, 50)
    _batch(tables, 2, 3, 60)
    metrics.add_batches("l1", feed.new_rows())
    assert feed.new_rows() == []  # nothing twice
    _batch(tables, 3, 1, 20)
    metrics.add_batches("l1", feed.new_rows())
    assert _value(registry, "rmq_replicator_messages_total", link="l1") == 11
    assert _value(registry, "rmq_replicator_bytes_total", link="l1") == 110
    assert _value(registry, "rmq_replicator_failed_total", link="l1") == 6
    assert _value(registry, "rmq_replicator_skipped_total", link="l1") == 3
    assert _value(registry, "rmq_replicator_latency_p99_seconds", link="l1") == 0.02  # the newest batch
    assert _value(registry, "rmq_replicator_latency_p50_seconds", link="l1") == 0.005
    assert _value(registry, "rmq_replicator_record_age_seconds", link="l1") == 0.3


def test_duplicates_avoided_count_from_a_metrics_table_written_before_the_column(tmp_path: Path) -> None:
    """A link's metrics table created before ``duplicates_avoided`` existed: the next commit adds the column (the
    older rows read it as null) and the counter counts from the rows that have it."""
    link = _link(tmp_path)
    tables = LinkTables.for_link(link)
    old_schema = pa.schema([f for f in METRICS_SCHEMA if f.name != "duplicates_avoided"])
    write_deltalake(tables.path(METRICS), pa.Table.from_pylist([{
        "query_id": "q0", "batch_id": 0, "messages": 5, "bytes": 50, "skipped_loop": 0, "failed": 0,
        "committed_at": datetime.now(UTC)}], schema=old_schema))
    feed = MetricsTableFeed(link, since=datetime.now(UTC) - timedelta(hours=1))
    registry = CollectorRegistry()
    metrics = ReplicationMetrics(registry)
    metrics.add_batches("l1", feed.new_rows())  # the old table: no such column yet
    assert _value(registry, "rmq_replicator_duplicates_avoided_total", link="l1") == 0
    tables.commit_batch("q1", 1, {}, [], [], BatchMetrics(messages=2, bytes=20, duplicates_avoided=7))
    tables.commit_batch("q1", 2, {}, [], [], BatchMetrics(messages=1, bytes=10, duplicates_avoided=1))
    metrics.add_batches("l1", feed.new_rows())
    assert _value(registry, "rmq_replicator_duplicates_avoided_total", link="l1") == 8
    assert _value(registry, "rmq_replicator_messages_total", link="l1") == 8
    assert sorted(tables.read(METRICS).column("duplicates_avoided").to_pylist(), key=str) == [1, 7, None]


def _monitor_scrape(now: list[int], *, lag_ms: int) -> str:
    monitor = HeartbeatMonitor(["l1", "l2"], interval_ms=1000, lagging_threshold_ms=500, stale_intervals=3,
                               startup_limit_ms=120_000, clock=ReadingClock(lambda: now[0]))
    monitor.on_arrived([Observed(Heartbeat("l1", 0, now[0] - lag_ms, "a", "b"), now[0], "t/b/0", 0)])
    registry = CollectorRegistry()
    registry.register(HeartbeatCollector(monitor))
    return generate_latest(registry).decode()


def test_heartbeat_gauges_and_lag_statuses() -> None:
    now = [1_700_000_000_000]
    text = _monitor_scrape(now, lag_ms=120)
    assert 'rmq_replicator_heartbeat_lag_seconds{link="l1"} 0.12' in text
    assert 'rmq_replicator_link_state{link="l1",state="ok"} 1.0' in text
    assert 'rmq_replicator_link_state{link="l2",state="starting"} 1.0' in text
    rows = {r.link: r for r in link_lags(text, ["l1", "l2", "l3"], lagging_threshold_s=0.5)}
    assert rows["l1"].status is Status.OK and rows["l1"].lag_s == 0.12 and rows["l1"].p99_1h_s == 0.12
    assert rows["l2"].status is Status.STARTING  # nothing arrived yet, within the start-up limit
    assert rows["l3"].status is Status.STALE  # no heartbeat metrics at all
    code, line = check_line(rows.values())
    assert code == 1 and line.startswith("STALE: l3 STALE (no heartbeat metrics)")
    lagging = link_lags(_monitor_scrape(now, lag_ms=900), ["l1"], lagging_threshold_s=0.5)
    assert lagging[0].status is Status.LAGGING and check_line(lagging)[0] == 0


def test_stale_after_three_intervals() -> None:
    text = ('rmq_replicator_heartbeat_age_seconds{link="l1"} 3.5\n'
            'rmq_replicator_heartbeat_interval_seconds{link="l1"} 1.0\n'
            'rmq_replicator_heartbeat_lag_seconds{link="l2"} 0.1\n'
            'rmq_replicator_heartbeat_age_seconds{link="l2"} 2.9\n'
            'rmq_replicator_heartbeat_interval_seconds{link="l2"} 1.0\n')
    rows = link_lags(text, ["l1", "l2"], lagging_threshold_s=10)
    assert [r.status for r in rows] == [Status.STALE, Status.OK]


def test_a_metrics_port_in_use_is_a_clear_error() -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        with pytest.raises(MetricsPortInUseError, match=f"metrics.port: port {port} on 127.0.0.1 is already in use"):
            serve(MetricsSettings(port=port), CollectorRegistry())


def test_heartbeats_table_rows(tmp_path: Path) -> None:
    tables = HeartbeatTables.for_link(_link(tmp_path))
    arrival = Observed(Heartbeat("l1", 4, 1_700_000_000_000, "a", "b"), 1_700_000_000_250, "t/b/0", 9)
    assert tables.record("run-1", 0, [arrival], 1_700_000_000_300).written == {HEARTBEATS: True}
    assert tables.record("run-1", 0, [arrival], 1_700_000_000_300).duplicate  # a poll is recorded once
    (row,) = tables.read(HEARTBEATS).to_pylist()
    assert (row["link"], row["seq"], row["lag_ms"], row["target_queue"], row["target_offset"]) == ("l1", 4, 250,
                                                                                                   "t/b/0", 9)
    assert row["seen_at"] == datetime.fromtimestamp(1_700_000_000.3, UTC)


def test_checkpoint_age_and_config_pending_from_the_connector_tables(tmp_path: Path) -> None:
    from connectors.checkpoint.tables import CheckpointOutcome, CheckpointRow, CheckpointTables
    from connectors.config_sync.applier import ConfigTables
    from connectors.config_sync.plan import ChangeKind, ChangeStatus, ConfigChange
    from jobs.metrics import ConnectorStateFeed, MetricsEndpoint

    link = _link(tmp_path)
    now = [datetime(2026, 1, 1, tzinfo=UTC)]
    now_ms = int(now[0].timestamp() * 1000)
    endpoint = MetricsEndpoint(MetricsSettings(port=0), [link], now=lambda: now[0])
    endpoint.feed_once()  # neither table exists yet: no checkpoint age, nothing pending, no error
    registry = endpoint.registry
    assert _value(registry, "rmq_replicator_checkpoint_age_seconds", link="l1") is None
    assert _value(registry, "rmq_replicator_config_changes_pending", link="l1") == 0  # nothing stands

    checkpoints = CheckpointTables(link.tables_location)
    checkpoints.commit_checkpoint("q", 0, [CheckpointRow("g", CheckpointOutcome.COMMITTED, now_ms - 9_000)])
    checkpoints.commit_checkpoint("q", 1, [CheckpointRow("g", CheckpointOutcome.COMMITTED, now_ms - 4_000),
                                           CheckpointRow("g", CheckpointOutcome.PENDING, now_ms - 4_000)])
    config = ConfigTables(link.tables_location)
    topic = ConfigChange(ChangeKind.CREATE_TOPIC, "T", ChangeStatus.APPLIED, ("T",), 4, 4, 6)
    unknown = ConfigChange(ChangeKind.SOURCE_TOPIC_UNKNOWN, "U", ChangeStatus.DEFERRED, ("U",),
                           detail="broker group a: not registered")
    config.commit_changes("c", 0, now_ms, [topic, topic.with_status(ChangeStatus.REFUSED, "shrink"), unknown])
    endpoint.feed_once()
    assert _value(registry, "rmq_replicator_checkpoint_age_seconds", link="l1") == 9.0  # batch 1 is incomplete
    assert _value(registry, "rmq_replicator_config_changes_pending", link="l1") == 2
    assert _value(registry, "rmq_replicator_config_changes_deferred", link="l1") == 1
    now[0] += timedelta(seconds=2)  # the age is computed at scrape time
    assert _value(registry, "rmq_replicator_checkpoint_age_seconds", link="l1") == 11.0

    checkpoints.commit_checkpoint("q", 2, [CheckpointRow("g", CheckpointOutcome.CURRENT, now_ms - 1_000)])
    time.sleep(0.002)
    config.commit_changes("c", 1, now_ms, [topic, unknown.with_status(ChangeStatus.CLEARED, "answers again")])
    endpoint.feed_once()  # the next round applied everything and the broker group answers again
    assert _value(registry, "rmq_replicator_checkpoint_age_seconds", link="l1") == 3.0
    assert _value(registry, "rmq_replicator_config_changes_pending", link="l1") == 0
    assert _value(registry, "rmq_replicator_config_changes_deferred", link="l1") == 0

    # incremental: an unchanged table is not read again; a new version reads only the newest commits
    feed = ConnectorStateFeed(link)
    feed.update()
    assert feed.newest_checkpoint_ms == now_ms - 1_000 and feed.pending_changes == 0
    feed.update()  # no new version: nothing read, nothing changed
    assert feed.newest_checkpoint_ms == now_ms - 1_000 and feed.pending_changes == 0


def test_disabled_connectors_export_nothing(tmp_path: Path) -> None:
    from connectors.core.sync_settings import CheckpointSettings, ConfigSyncSettings
    from jobs.metrics import ConnectorStateFeed

    link = _link(tmp_path).model_copy(update={"checkpoints": CheckpointSettings(enabled=False),
                                              "config_sync": ConfigSyncSettings(enabled=False)})
    feed = ConnectorStateFeed(link)
    feed.update()
    assert feed.newest_checkpoint_ms is None and feed.pending_changes is None


def test_shared_target_queues_reach_the_lag_view(tmp_path: Path) -> None:
    """Checkpoint rows marked "shared: may re-read" (several source queues on one target queue) are counted per
    newest checkpoint into rmq_replicator_checkpoint_shared_queues, and jobs.lag shows them without failing
    --check; a checkpoint with only conditions (no target queue) leaves the count as it was."""
    from connectors.checkpoint.tables import SHARED_DETAIL, CheckpointOutcome, CheckpointRow, CheckpointTables
    from jobs.metrics import MetricsEndpoint

    link = _link(tmp_path)
    endpoint = MetricsEndpoint(MetricsSettings(port=0), [link])
    checkpoints = CheckpointTables(link.tables_location)

    def row(queue: int, source: int, at: int, detail: str = "") -> CheckpointRow:
        return CheckpointRow("g", CheckpointOutcome.COMMITTED, at, "S", "src-a", source, 5, "T", "dst", queue, 5,
                             5, not detail, detail)

    shared = f"{SHARED_DETAIL} (source queues S@src-a@0, S@src-a@1 feed this target queue)"
    checkpoints.commit_checkpoint("q", 0, [row(0, 0, 1_000, shared), row(0, 1, 1_000, shared), row(1, 2, 1_000)])
    endpoint.feed_once()
    assert _value(endpoint.registry, "rmq_replicator_checkpoint_shared_queues", link="l1") == 1
    checkpoints.commit_checkpoint("q", 1, [CheckpointRow("src", CheckpointOutcome.SOURCE_UNREACHABLE, 2_000)])
    endpoint.feed_once()
    assert _value(endpoint.registry, "rmq_replicator_checkpoint_shared_queues", link="l1") == 1
    text = (generate_latest(endpoint.registry).decode()
            + 'rmq_replicator_heartbeat_lag_seconds{link="l1"} 0.1\n'
              'rmq_replicator_heartbeat_age_seconds{link="l1"} 0.5\n'
              'rmq_replicator_heartbeat_interval_seconds{link="l1"} 1.0\n')
    (lag,) = link_lags(text, ["l1"], lagging_threshold_s=10)
    assert lag.status is Status.OK and lag.failover() == "1 shared: may re-read"
    code, line = check_line([lag])
    assert code == 0 and "1 shared: may re-read" in line
    checkpoints.commit_checkpoint("q", 2, [row(0, 0, 3_000), row(1, 1, 3_000)])
    endpoint.feed_once()
    assert _value(endpoint.registry, "rmq_replicator_checkpoint_shared_queues", link="l1") == 0
    (exact,) = link_lags(generate_latest(endpoint.registry).decode(), ["l1"], lagging_threshold_s=10)
    assert exact.failover() == "exact" and "shared" not in exact.describe()

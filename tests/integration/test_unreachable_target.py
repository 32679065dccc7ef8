"""An unreachable target cluster is a reported condition, never an exception (bad input and
faults), for the polling connectors' driver sides, without Spark: config sync's round is one FAILED
``read_target`` change (recorded and pending, nothing planned on a view it does not have), and the heartbeat
monitor logs the cluster unreachable once, keeps polling, and never reports the link OK. (The checkpoint
committer's case is in test_checkpoint_committer.py; the replication sink's in tests/spark/test_fault_tolerance.)
Nothing listens on loopback ports 1 and 2."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from broker_store.client import Admin
from connectors.config_sync.applier import ConfigApplier
from connectors.config_sync.evidence import Evidence
from connectors.config_sync.plan import ChangeKind, ChangeStatus
from connectors.config_sync.state import ClusterState, TopicState
from connectors.core.config import parse_replicator_config
from connectors.core.sync_settings import ConfigSyncSettings
from connectors.core.topic_mapping import TopicMapper
from connectors.core.topic_settings import TopicMappingConfig
from connectors.heartbeat.monitor import LinkStatus
from connectors.heartbeat.monitor_loop import HeartbeatMonitorLoop
from tests.support.clocks import ReadingClock

pytestmark = pytest.mark.integration


def test_config_sync_with_the_target_down_records_a_failed_read() -> None:
    source = ClusterState(1, {"Orders": TopicState("Orders", 4, 4, 6, brokers=("b1",))}, {}, ("b1",))
    with Admin("127.0.0.1:1", request_timeout=0.5) as admin:
        applier = ConfigApplier(target_admin=admin, mapper=TopicMapper(TopicMappingConfig(all_topics=True)),
                                settings=ConfigSyncSettings())
        round_ = applier.apply(source, Evidence(deleted_topics={"Gone": "absent twice"}))
    assert [(c.kind, c.status) for c in round_.changes] == [(ChangeKind.READ_TARGET, ChangeStatus.FAILED)]
    assert "127.0.0.1:1" in round_.changes[0].detail and not round_.whole_view


def test_heartbeat_monitor_with_both_clusters_down_reports_once_and_keeps_polling(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    config = parse_replicator_config({
        "clusters": [{"name": "s", "namesrv": "127.0.0.1:1"}, {"name": "t", "namesrv": "127.0.0.1:2"}],
        "links": [{"name": "l1", "source": "s", "target": "t", "topics": {"all_topics": True},
                   "checkpoint_location": str(tmp_path / "c"), "delta_location": str(tmp_path / "d")}],
        "heartbeat": {"interval": 1}})
    now = [int(time.time() * 1000)]
    loop = HeartbeatMonitorLoop(config, ["l1"], clock=ReadingClock(lambda: now[0]))
    try:
        with caplog.at_level(logging.WARNING, logger="connectors.heartbeat.monitor_loop"):
            for _ in range(4):
                loop.poll_once()
                now[0] += 1000
    finally:
        loop.stop()
    assert sorted(r.getMessage().split(" (")[0] for r in caplog.records) == [
        "heartbeat monitor: cluster s unreachable", "heartbeat monitor: cluster t unreachable"]
    assert loop.monitor.state("l1").status is not LinkStatus.OK

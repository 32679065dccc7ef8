"""monitoring/ against a real Prometheus: the project's config and rules pass ``promtool``, Prometheus scrapes a
running metrics endpoint of a job (``jobs.metrics.MetricsEndpoint`` fed from the link's real Delta tables and a
heartbeat monitor), each alert's condition is made true and the alert goes pending or firing, and every query of
the Grafana dashboard returns data from that Prometheus. The brokers' alerts the same way: a real controller-mode
broker whose store is a size-limited tmpfs (``tests.support.private_tmpfs``) fills it, then is killed, while
Prometheus scrapes its endpoint and its name server's embedded controller's."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from broker_store.client import Admin, MessageQueue, Producer, SendStatus, new_message
from broker_store.deploy.launcher import HOST, free_port
from broker_store.protocol.errors import ServiceNotAvailableError
from connectors.checkpoint.tables import CheckpointOutcome, CheckpointRow, CheckpointTables
from connectors.config_sync.applier import ConfigTables
from connectors.config_sync.plan import ChangeKind, ChangeStatus, ConfigChange
from connectors.core.config import LinkConfig
from connectors.core.monitoring import MetricsSettings
from connectors.core.topic_settings import TopicMappingConfig
from connectors.heartbeat.monitor import HeartbeatMonitor
from connectors.heartbeat.records import Heartbeat, Observed
from connectors.replication.records import BatchMetrics, LatencySummary
from connectors.replication.tables import LinkTables
from jobs.metrics import MetricsEndpoint
from tests.support.clocks import ReadingClock
from tests.support.private_tmpfs import PrivateTmpfs, fill, private_tmpfs
from tests.support.processes import Broker, GroupSpec, LocalCluster
from tests.support.prometheus import MONITORING, PrometheusServer, missing_programs, promtool, write_config
from tests.support.waiting import eventually

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(bool(missing_programs()), reason=f"{missing_programs()} not installed: "
                                 ".ci/install-tools test installs Debian's prometheus")]


def _wall_ms() -> int:
    return int(time.time() * 1000)


def _rules() -> list[str]:
    groups = yaml.safe_load((MONITORING / "alerts.yml").read_text())["groups"]
    return [rule["alert"] for group in groups for rule in group["rules"] if "alert" in rule]


def _dashboard_queries() -> dict[str, str]:
    dashboard = json.loads((MONITORING / "dashboard.json").read_text())
    return {f"{p['title']} ({t['refId']})": t["expr"] for p in dashboard["panels"] for t in p["targets"]}


def _returns_data(prometheus: PrometheusServer, expr: str) -> Callable[[], bool]:
    return lambda: bool(prometheus.query(expr))


@pytest.fixture
def endpoint(tmp_path: Path) -> Iterator[tuple[MetricsEndpoint, LinkConfig]]:
    link = LinkConfig(name="l1", source="a", target="b", topics=TopicMappingConfig(all_topics=True),
                      checkpoint_location=str(tmp_path / "cp"), delta_location=str(tmp_path / "delta"))
    monitor = HeartbeatMonitor(["l1"], interval_ms=1000, lagging_threshold_ms=10_000, stale_intervals=3,
                               startup_limit_ms=120_000, clock=ReadingClock(_wall_ms))
    metrics = MetricsEndpoint(MetricsSettings(host=HOST, port=free_port()), [link], monitor=monitor,
                              feed_interval=0.2)
    metrics.start()
    try:
        # One heartbeat that took 120 s to arrive, and none since: the source has stopped.
        now = _wall_ms()
        monitor.on_arrived([Observed(Heartbeat("l1", 0, now - 120_000, "a", "b"), now, "t/b/0", 0)])
        yield metrics, link
    finally:
        metrics.stop()


def test_alerts_fire_and_dashboard_queries_return_data(tmp_path: Path,
                                                       endpoint: tuple[MetricsEndpoint, LinkConfig]) -> None:
    metrics, link = endpoint
    promtool("check", "rules", str(MONITORING / "alerts.yml"))
    config = write_config(tmp_path / "prometheus", [f"{metrics.settings.host}:{metrics.settings.port}"])
    promtool("check", "config", str(config))
    prometheus = PrometheusServer(config, tmp_path / "prometheus")
    prometheus.start()
    try:
        # Scraped first at 0 failures, so the counter's increase is seen.
        eventually(lambda: bool(prometheus.query('rmq_replicator_failed_total{link="l1"}')), 30,
                   "the first scrape of the job's endpoint")
        # What the job's connectors commit: a batch with failed messages, a deferred config change,
        # a checkpoint 700 s old.
        now = _wall_ms()
        LinkTables.for_link(link).commit_batch("q1", 0, {}, [], [], BatchMetrics(
            messages=10, bytes=100, skipped_loop=0, failed=2, latency=LatencySummary(5, 40, 40), record_age_ms=300))
        ConfigTables(link.tables_location).commit_changes("c", 0, now, [ConfigChange(
            ChangeKind.SOURCE_TOPIC_UNKNOWN, "U", ChangeStatus.DEFERRED, ("U",), detail="broker group a: expired")])
        CheckpointTables(link.tables_location).commit_checkpoint(
            "q", 0, [CheckpointRow("g", CheckpointOutcome.COMMITTED, now - 700_000)])

        expected = {r for r in _rules() if r.startswith("RmqReplicator")} - {"RmqReplicatorJobDown"}
        eventually(lambda: expected <= set(prometheus.alert_states()), 60,
                   lambda: f"alerts {sorted(expected)} active; active: {prometheus.alert_states()}")
        for title, expr in _dashboard_queries().items():
            eventually(_returns_data(prometheus, expr), 30, f"data for dashboard panel {title}: {expr}")

        metrics.stop()  # the job stops: its target goes down
        eventually(lambda: "RmqReplicatorJobDown" in prometheus.alert_states(), 30,
                   lambda: f"RmqReplicatorJobDown active; targets {prometheus.target_health()}")
    finally:
        prometheus.stop()


def test_broker_alerts_fire_for_a_full_disk_and_a_group_without_primary(tmp_path: Path) -> None:
    assert {r for r in _rules() if r.startswith("RmqBroker")} == {
        "RmqBrokerDiskFull", "RmqBrokerDiskUsageHigh", "RmqBrokerGroupWithoutPrimary"}, "a new alert: make it true here"
    broker_port, controller_port = free_port(), free_port()
    with private_tmpfs(tmp_path / "store", "6m") as tmpfs:
        cluster = LocalCluster(tmp_path, "mon", [GroupSpec("mon-a", ({"metrics_port": broker_port},))],
                               controller={"metrics_port": controller_port})
        (member,) = cluster.groups["mon-a"]  # its store moved onto the tmpfs, entered through nsenter
        broker = Broker("broker", member.config.model_copy(update={"store_dir": tmpfs.mountpoint}), cluster.root,
                        "mon-a-0", wrap=tmpfs.nsenter_argv())
        cluster.groups["mon-a"], cluster.brokers = [broker], [broker]
        with cluster:
            _broker_alerts_fire(tmp_path, tmpfs, cluster, broker, broker_port, controller_port)


def _broker_alerts_fire(tmp_path: Path, tmpfs: PrivateTmpfs, cluster: LocalCluster, broker: Broker, broker_port: int,
                        controller_port: int) -> None:
    """The broker alerts made true: a full disk under the broker, then the group's only broker killed."""
    config = write_config(tmp_path / "prometheus", {"rmq_broker": [f"{HOST}:{broker_port}"],
                                                    "rmq_controller": [f"{HOST}:{controller_port}"]})
    promtool("check", "config", str(config))
    prometheus = PrometheusServer(config, tmp_path / "prometheus")
    prometheus.start()
    try:
        eventually(lambda: bool(prometheus.query('rmq_broker_is_primary{group="mon-a"} == 1')), 30,
                   "the broker's endpoint scraped, the broker primary")
        eventually(lambda: bool(prometheus.query('rmq_controller_group_has_primary{group="mon-a"} == 1')), 30,
                   "the controller's endpoint scraped, the group's primary alive")
        assert prometheus.query('rmq_broker_commit_log_max_offset{group="mon-a"}')

        mq = MessageQueue("mon-topic", "mon-a", 0)
        with Admin(cluster.namesrv_addr) as admin, \
                Producer(cluster.namesrv_addr, "mon-pg", retry_times_when_send_failed=0) as producer:
            admin.create_topic(mq.topic, queue_nums=1, cluster="mon")
            admin.wait_for_route(mq.topic, timeout=10)
            assert producer.send(new_message(mq.topic, b"x" * 4096), mq).status is SendStatus.SEND_OK
            fill(tmpfs.inside() / "filler")
            refused = 0
            for _ in range(40):  # the commit log's last allocated page may still take a send or two
                try:
                    producer.send(new_message(mq.topic, b"x" * 4096), mq)
                except ServiceNotAvailableError:
                    refused += 1
                    if refused == 2:
                        break
            assert refused == 2, "sends kept succeeding on a full disk"
        broker_alerts = {"RmqBrokerDiskFull", "RmqBrokerDiskUsageHigh"}
        eventually(lambda: broker_alerts <= set(prometheus.alert_states()), 30,
                   lambda: f"alerts {sorted(broker_alerts)} active; active: {prometheus.alert_states()}")

        broker.kill()  # the group's only broker: no primary can be elected
        eventually(lambda: "RmqBrokerGroupWithoutPrimary" in prometheus.alert_states(), 30,
                   lambda: f"RmqBrokerGroupWithoutPrimary active; active: {prometheus.alert_states()}")
    finally:
        prometheus.stop()

"""The heartbeat connector end to end (docs/operations.md, "Monitoring"), real processes: ``python jobs/heartbeat.py``
(its own Spark, the heartbeat producer, the monitor and the metrics endpoint), the replication link as a query of the
session's SparkSession, ``python -m jobs.lag --check`` as the probe. The clusters are this module's own pair: the
heartbeat topic it creates must not reach the links of the other Spark tests."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from broker_store.client import Admin
from connectors.core.config import load_replicator_config
from connectors.core.monitoring import HEARTBEAT_TOPIC
from jobs.lag import Status, link_lags, scrape
from tests.spark.conftest import PROJECT_ROOT
from tests.spark.helpers import unique
from tests.spark.spark_processes import TaggedProcess, spark_env, wait_for, write_replicator_config
from tests.support.processes import LocalCluster, free_port

INTERVAL = 1.0


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalCluster, LocalCluster]]:
    root = tmp_path_factory.mktemp("heartbeat-clusters")
    with LocalCluster(root, "hsrc", brokers=1, namesrv={"broker_expiry_seconds": 5.0}) as src, \
            LocalCluster(root, "hdst", brokers=1, namesrv={"broker_expiry_seconds": 5.0}) as dst:
        yield src, dst


def _lag_check(config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "jobs.lag", "--config", str(config), "--check"], cwd=PROJECT_ROOT,
                          env={**os.environ, **spark_env()}, capture_output=True, text=True, timeout=60)


def _sample(text: str, name: str) -> float | None:
    prefix = name + '{link="l1"} '
    return next((float(line.removeprefix(prefix)) for line in text.splitlines() if line.startswith(prefix)), None)


def _heartbeat_job(config: Path, tmp_path: Path, *extra: str) -> TaggedProcess:
    argv = [sys.executable, str(PROJECT_ROOT / "jobs" / "heartbeat.py"), "--config", str(config),
            "--log-dir", str(tmp_path / "logs"), *extra]
    return TaggedProcess(argv, tmp_path / "heartbeat-console.log", spark_env(SPARK_MASTER="local[1]"))


def test_heartbeat_lag_on_the_target_then_stale_when_replication_stops(
        spark: SparkSession, pair: tuple[LocalCluster, LocalCluster], tmp_path: Path) -> None:
    """"Heartbeat lag appears on the target within two intervals", read as: once the link is up (it has
    carried one heartbeat from source to target: link l1 OK on the endpoint; measured from there, not from
    process launch, since Spark's start-up on a loaded machine is no part of the link's lag), the first
    heartbeat born after that moment is visible on the target (its row in the link's Delta ``heartbeats``
    table and the gauges, both written when the monitor reads it: ``seen_at``) no later than two heartbeat
    intervals after its ``born_at`` (the producer's clock just before the send). Also: no heartbeat born
    after that moment is lost, and their median born -> visible time stays within two intervals."""
    src, dst = pair
    topic = unique("Beat")
    port = free_port()
    config = write_replicator_config(tmp_path / "replicator.yaml", source=("hsrc", src.namesrv_addr),
                                     target=("hdst", dst.namesrv_addr), metrics_port=port,
                                     links={"l1": {"topic": topic, "trigger_interval": INTERVAL}},
                                     heartbeat={"interval": INTERVAL})
    url = f"http://127.0.0.1:{port}/metrics"
    job = _heartbeat_job(config, tmp_path)
    query = None
    try:
        from jobs.replicate import start_link

        query = start_link(spark, str(config), load_replicator_config(config), "l1")
        started = time.monotonic()

        def ok() -> bool:
            try:
                rows = link_lags(scrape(url, 2), ["l1"], lagging_threshold_s=10)
            except Exception:  # noqa: BLE001 - the endpoint is not up yet
                return False
            return rows[0].status is Status.OK
        wait_for(ok, 180, "link l1 OK on the endpoint", interval=0.5, alive=job)
        up_ms = time.time() * 1000  # the link is up: it has carried a heartbeat from source to target
        print(f"first heartbeat through the link {time.monotonic() - started:.1f} s after the link started")
        heartbeats = tmp_path / "delta" / "l1" / "heartbeats"

        def born_after_up() -> list[dict[str, Any]]:
            rows = DeltaTable(str(heartbeats)).to_pyarrow_table().to_pylist()
            return sorted((r for r in rows if r["born_at"].timestamp() * 1000 >= up_ms), key=lambda r: r["seq"])
        # the first heartbeat born once the link is up, and the ones after it for a few intervals
        wait_for(lambda: len(born_after_up()) >= 5, 30 * INTERVAL, "5 heartbeats born after the link was up",
                 interval=0.2, alive=job)
        table = born_after_up()
        visible = [round((r["seen_at"] - r["born_at"]).total_seconds() * 1000) for r in table]
        print(f"born -> visible on the target, ms, per heartbeat born after the link was up: {visible}; "
              f"lag (arrived - born) ms: {[r['lag_ms'] for r in table]}")
        assert [r["seq"] for r in table] == list(range(table[0]["seq"], table[0]["seq"] + len(table)))  # none lost
        assert visible[0] <= 2 * INTERVAL * 1000, visible  # the first heartbeat within two intervals
        assert sorted(visible)[len(visible) // 2] <= 2 * INTERVAL * 1000, visible  # and in the steady state
        row = table[-1]
        assert row["born_at"] < row["arrived_at"] <= row["seen_at"] and row["target_cluster"] == "hdst"
        probe = _lag_check(config)
        assert probe.returncode == 0 and probe.stdout.startswith("OK: 1 link(s): l1 OK"), probe
        # the replication metrics of the link, fed from its Delta metrics table (the heartbeats it carried)
        wait_for(lambda: (_sample(scrape(url, 2), "rmq_replicator_messages_total") or 0) >= 3, 30,
                 "replicated messages counted on the endpoint", alive=job)
        assert _sample(scrape(url, 2), "rmq_replicator_latency_p99_seconds") is not None
        with Admin(src.namesrv_addr) as admin:  # created by the heartbeat writer, one queue per broker
            assert [q.write_queue_nums for q in admin.topic_route(HEARTBEAT_TOPIC).queue_datas] == [1]

        query.stop()
        stopped = time.monotonic()

        def stale() -> bool:
            return _lag_check(config).returncode != 0
        wait_for(stale, 60, "jobs.lag --check failing after the replication stopped", interval=0.5, alive=job)
        print(f"STALE {time.monotonic() - stopped:.1f} s after the replication stopped")
        probe = _lag_check(config)
        assert probe.returncode == 1 and probe.stdout.startswith("STALE: l1 STALE"), probe
        assert "monitor broken" in probe.stdout  # the source still produces: a broken link, not an idle one
        assert 'rmq_replicator_link_state{link="l1",state="broken"} 1.0' in scrape(url, 2)

        os.killpg(job.pid, signal.SIGTERM)
        assert job.wait(90) == 0, job.log()[-3000:]
    finally:
        if query is not None and query.isActive:
            query.stop()
        job.kill()


def test_metrics_port_in_use_and_unreachable_endpoint(pair: tuple[LocalCluster, LocalCluster],
                                                       tmp_path: Path) -> None:
    src, dst = pair
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        config = write_replicator_config(tmp_path / "replicator.yaml", source=("hsrc", src.namesrv_addr),
                                         target=("hdst", dst.namesrv_addr), metrics_port=port,
                                         links={"l1": {"topic": unique("Busy")}})
        for script in ("heartbeat.py", "replicate.py"):
            argv = [sys.executable, str(PROJECT_ROOT / "jobs" / script), "--config", str(config),
                    "--log-dir", str(tmp_path / "logs")]
            job = TaggedProcess(argv, tmp_path / f"{script}.log", spark_env())
            try:
                rc = job.wait(60)
            finally:
                job.kill()
            console = job.log()
            assert rc == 2, console
            assert f"metrics.port: port {port} on 127.0.0.1 is already in use" in console, console
            assert "Traceback" not in console and len(console.strip().splitlines()) == 1, console
    probe = _lag_check(config)  # nothing listens there any more
    assert probe.returncode == 1 and probe.stdout.startswith("UNREACHABLE: "), probe

"""``spark-submit jobs/run_all.py``: one Spark application with every connector of a link, as an operator runs it
on a cluster. Real processes: the job is its own Spark application (``local[2]``); the clusters are this
module's own (the heartbeat topic it fills on the source would reach every later link of the session's
clusters). ``python jobs/run_all.py`` (the JVM started by ``jobs.spark_session.build_spark``, no master set) runs
in tests/spark/test_demo.py, which launches it as ``make demo`` does; the Spark tier runs each launch once."""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from deltalake import DeltaTable

from broker_store.client import Admin, MessageQueue, Producer, PullConsumer, PullStatus, new_message
from broker_store.protocol.errors import RocketMQError
from connectors.checkpoint.tables import CheckpointTables
from jobs.lag import scrape
from tests.spark.helpers import unique
from tests.spark.spark_processes import python_driver_pid, submit_job, wait_for, write_replicator_config
from tests.support.processes import LocalCluster, free_port

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalCluster, LocalCluster]]:
    root = tmp_path_factory.mktemp("run-all-clusters")
    with LocalCluster(root, "asrc", brokers=1, namesrv={"broker_expiry_seconds": 5.0}) as src, \
            LocalCluster(root, "adst", brokers=1, namesrv={"broker_expiry_seconds": 5.0}) as dst:
        yield src, dst


def _queues(admin: Admin, topic: str) -> list[MessageQueue]:
    route = admin.wait_for_route(topic, timeout=15)
    return sorted(MessageQueue(topic, q.broker_name, i) for q in route.queue_datas for i in range(q.read_queue_nums))


def _count(namesrv: str, topic: str) -> int:
    with Admin(namesrv) as admin:
        try:
            return sum(admin.max_offset(mq) for mq in _queues(admin, topic))
        except RocketMQError:  # no route yet
            return 0


def _per_queue(namesrv: str, topic: str) -> dict[int, tuple[tuple[int, int], int]]:
    """Queue id -> (the topic's read / write queue counts, messages in the queue) on the cluster's one broker."""
    with Admin(namesrv) as admin:
        route = admin.wait_for_route(topic, timeout=15)
        (data,) = route.queue_datas
        counts = (data.read_queue_nums, data.write_queue_nums)
        return {mq.queue_id: (counts, admin.max_offset(mq)) for mq in _queues(admin, topic)}


def _config_rows(delta: Path) -> list[dict[str, object]]:
    table = delta / "config_changes"
    return DeltaTable(str(table)).to_pyarrow_table().to_pylist() if (table / "_delta_log").exists() else []


def _sample(text: str, name: str) -> float | None:
    prefix = name + '{link="l1"} '
    return next((float(line.removeprefix(prefix)) for line in text.splitlines() if line.startswith(prefix)), None)


def _consume_half(namesrv: str, group: str, topic: str) -> None:
    """Read half of each queue as ``group`` and commit the offsets (no heartbeats: never online)."""
    consumer = PullConsumer(namesrv, group, heartbeat_interval=None)
    try:
        with Admin(namesrv) as admin:
            queues = [(mq, admin.max_offset(mq)) for mq in _queues(admin, topic)]
        for mq, end in queues:
            result = consumer.pull(mq, 0, max(1, end // 2))
            assert result.status is PullStatus.FOUND
            consumer.update_consumer_offset(mq, result.next_begin_offset)
    finally:
        consumer.close()


def test_run_all_replicates_heartbeats_and_checkpoints_then_stops_on_sigterm(
        pair: tuple[LocalCluster, LocalCluster], tmp_path: Path) -> None:
    src, dst = pair
    topic, group, empty = unique("All"), unique("GID_all"), unique("AllEmpty")
    # on the source only, and holding data before the job starts: the replication query's first batch comes
    # before config sync's first round, so it creates the topic on the target like the source (2 queues, not
    # the target's auto-create default of 4, which config sync would then refuse to shrink every round)
    with Admin(src.namesrv_addr) as admin:
        admin.create_topic(topic, 2)
        admin.wait_for_route(topic)
        admin.create_topic(empty, 3)  # no message: only config sync creates it on the target
        admin.wait_for_route(empty)
    with Producer(src.namesrv_addr, "PID_run_all") as producer:
        for i in range(100):
            producer.send(new_message(topic, f"m{i}".encode()))
    _consume_half(src.namesrv_addr, group, topic)
    port = free_port()
    config = write_replicator_config(
        tmp_path / "replicator.yaml", source=("asrc", src.namesrv_addr), target=("adst", dst.namesrv_addr),
        metrics_port=port, heartbeat={"interval": 1.0},
        links={"l1": {"topic": topic, "topics": {"explicit": [{"source": topic}, {"source": empty}]},
                      "trigger_interval": 1.0, "checkpoints": {"interval": 1.0}, "config_sync": {"interval": 1.0}}})
    # faulthandler: an abort at the driver's exit (seen once: "terminate called without an active exception",
    # exit -6, after the summary) then shows every Python thread's stack in the console log
    job = submit_job("run_all.py", config, tmp_path / "console.log", env={"PYTHONFAULTHANDLER": "1"}, job_log4j=True)
    delta = tmp_path / "delta" / "l1"
    try:
        wait_for(lambda: _count(dst.namesrv_addr, topic) >= 100, 180, "the 100 messages on the target", alive=job)
        wait_for(lambda: (delta / "heartbeats" / "_delta_log").exists() and DeltaTable(
            str(delta / "heartbeats")).to_pyarrow_table(columns=["seq"]).num_rows >= 2, 90,
            "two heartbeats recorded on the target", alive=job)
        tables = CheckpointTables(delta)
        wait_for(lambda: tables.newest_translated_ms(group) is not None, 90, "a translated checkpoint of the group",
                 alive=job)
        # the one endpoint serves replication, heartbeat and checkpoint metrics of the link
        wait_for(lambda: _sample(scrape(f"http://127.0.0.1:{port}/metrics", 2),
                                 "rmq_replicator_checkpoint_age_seconds") is not None, 30, "the checkpoint age")
        text = scrape(f"http://127.0.0.1:{port}/metrics", 2)
        assert (_sample(text, "rmq_replicator_messages_total") or 0) >= 100
        assert _sample(text, "rmq_replicator_heartbeat_lag_seconds") is not None
        # the topic exists on the target like on the source; queue-preserving placement saw the right count, so
        # every source queue went to the same queue id; config sync found nothing to refuse over several rounds
        commits = tmp_path / "checkpoints" / "l1-config" / "commits"
        wait_for(lambda: commits.exists() and len([f for f in commits.iterdir() if f.name.isdigit()]) >= 3, 60,
                 "three config-sync rounds", alive=job)
        on_source = _per_queue(src.namesrv_addr, topic)
        assert on_source == _per_queue(dst.namesrv_addr, topic)
        assert all(counts == (2, 2) for counts, _ in on_source.values())
        assert [r for r in _config_rows(delta) if r["status"] != "applied"] == []
        text = scrape(f"http://127.0.0.1:{port}/metrics", 2)
        assert _sample(text, "rmq_replicator_config_changes_pending") == 0
        # config sync created the topic the replication had nothing to copy from, with the source's queue count
        assert {q: counts for q, (counts, _) in _per_queue(dst.namesrv_addr, empty).items()} == {
            q: (3, 3) for q in range(3)}
        assert [(r["kind"], r["status"]) for r in _config_rows(delta) if r["subject"] == empty] == [
            ("create_topic", "applied")]
        os.kill(python_driver_pid(job, "run_all.py"), signal.SIGTERM)
        rc = job.wait(120)
    finally:
        job.kill()
    console = job.log()
    assert rc == 0, console
    assert [line for line in console.splitlines() if " ERROR " in line or "Traceback" in line] == [], console
    assert "SIGTERM: stopping the queries" in console
    # a batch the stop cancels is aborted by the stop, not by a fault: no WARNING for it (connectors.core.job_stop)
    assert [line for line in console.splitlines() if " WARNING " in line and "aborted" in line] == [], console
    assert "link l1 done:" in console, console
    # the spark-submit command of docs/replicator.md: Spark's log4j lines go to spark.log, none to the console
    assert not re.search(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d (INFO|WARN) ", console, re.MULTILINE), console
    assert "SparkContext" in (tmp_path / "console.logs" / "spark.log").read_text()

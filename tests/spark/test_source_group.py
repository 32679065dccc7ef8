"""The source consumer group shows the truth: the replicator's group on the source
(CID_RMQ_SYS_REPLICATOR_<link>) has lag 0, as the admin CLI computes it (``python -m broker_store offsets
--group``: max offset - committed offset), once everything is replicated: after an AvailableNow run, while
the link is idle, after a clean stop. The sink's driver commit mirrors each batch's end offsets; the
reader's own mirror is off, as the replicate job runs it (``commitOffsetsToSource=false``)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from tests.spark.conftest import Cluster
from tests.spark.helpers import produce_random, run_link, unique
from tests.spark.spark_processes import wait_for

pytestmark = pytest.mark.integration

READER = {"rowFormat": "ranges", "commitOffsetsToSource": "false"}


def lag(src: Cluster, topic: str, group: str) -> dict[str, int]:
    """Per queue: max offset - (committed offset, or the min offset when the group has none)."""
    out = {}
    for mq in src.queues(topic):
        committed = src.admin.consumer_offset(group, mq)
        out[f"{mq.broker_name}/{mq.queue_id}"] = src.admin.max_offset(mq) - (
            committed if committed is not None else src.admin.min_offset(mq))
    return out


def wait_for_no_lag(src: Cluster, topic: str, group: str, timeout: float = 10) -> None:
    wait_for(lambda: not any(lag(src, topic, group).values()), timeout,
             f"lag 0 of group {group} on {topic} (lag when the wait began: {lag(src, topic, group)})")


def test_lag_is_zero_after_an_available_now_run(spark: SparkSession, clusters: tuple[Cluster, Cluster],
                                                tmp_path: Path) -> None:
    src, dst = clusters
    topic = unique("LagNow")
    src.create_topic(topic, 4)
    dst.create_topic(topic, 4)
    produce_random(src.producer, topic, src.queues(topic), 900, seed=3, max_body=128)
    query = run_link(spark, source_namesrv=src.namesrv, source_cluster="src", target_namesrv=dst.namesrv,
                     target_cluster="dst", topics=topic, work=tmp_path, link="lag-now",
                     reader={**READER, "maxMessagesPerTrigger": "300"})
    assert query.exception() is None and dst.count(topic) == 900
    wait_for_no_lag(src, topic, "CID_RMQ_SYS_REPLICATOR_lag-now", timeout=5)


def test_lag_is_zero_when_idle_and_after_stop(spark: SparkSession, clusters: tuple[Cluster, Cluster],
                                              tmp_path: Path) -> None:
    src, dst = clusters
    topic = unique("LagIdle")
    group = "CID_RMQ_SYS_REPLICATOR_lag-idle"
    src.create_topic(topic, 4)
    dst.create_topic(topic, 4)
    queues = src.queues(topic)
    produce_random(src.producer, topic, queues, 400, seed=4, max_body=128)
    query = run_link(spark, source_namesrv=src.namesrv, source_cluster="src", target_namesrv=dst.namesrv,
                     target_cluster="dst", topics=topic, work=tmp_path, link="lag-idle", reader=READER,
                     available_now=False)
    try:
        wait_for(lambda: dst.count(topic) == 400, 60, "first 400 replicated")
        wait_for_no_lag(src, topic, group)  # idle: no next batch comes to commit the last one
        produce_random(src.producer, topic, queues[:1], 50, seed=5, max_body=128)  # one queue moves
        wait_for(lambda: dst.count(topic) == 450, 60, "450 replicated")
        wait_for_no_lag(src, topic, group)
        time.sleep(1.0)  # idle for a while: nothing moves backwards
        assert not any(lag(src, topic, group).values())
    finally:
        query.stop()
    assert query.exception() is None
    assert not any(lag(src, topic, group).values())

"""The replicator against replica groups: source and target clusters whose broker groups each have a
SYNC_MASTER 2/2 primary and a replica (as conf/cluster-replicas.yaml) replicate exactly as single brokers do;
the user's link options are unchanged."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from broker_store.client import Admin, MessageQueue, Producer
from connectors.replication.tables import LinkTables
from tests.spark.helpers import produce_random, run_link, unique
from tests.spark.spark_processes import read_topic
from tests.support.processes import LocalCluster

pytestmark = pytest.mark.integration

HA = {"role": "SYNC_MASTER", "total_replicas": 2, "in_sync_replicas": 2,
      "ha_send_heartbeat_interval_ms": 1000, "ha_housekeeping_interval_ms": 3000}


@pytest.fixture(scope="module")
def ha_clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalCluster, LocalCluster]]:
    root = tmp_path_factory.mktemp("spark-ha")
    with LocalCluster(root, "hsrc", brokers=2, replicas=2, ha=HA) as src, \
            LocalCluster(root, "hdst", brokers=2, replicas=2, ha=HA) as dst:
        yield src, dst


def test_replication_between_replica_groups(spark: SparkSession, ha_clusters: tuple[LocalCluster, LocalCluster],
                                            tmp_path: Path) -> None:
    src, dst = ha_clusters
    topic = unique("HA")
    with Admin(src.namesrv_addr) as src_admin, Admin(dst.namesrv_addr) as dst_admin, \
            Producer(src.namesrv_addr, "ha-spark", send_timeout=10.0) as producer:
        for admin in (src_admin, dst_admin):
            admin.create_topic(topic, 2)
            admin.wait_for_route(topic, timeout=15)
        route = src_admin.topic_route(topic)
        queues = sorted(MessageQueue(topic, q.broker_name, i) for q in route.queue_datas
                        for i in range(q.read_queue_nums))
        assert len(queues) == 4
        produce_random(producer, topic, queues, 600)
        query = run_link(spark, source_namesrv=src.namesrv_addr, source_cluster="hsrc",
                         target_namesrv=dst.namesrv_addr, target_cluster="hdst", topics=topic, work=tmp_path,
                         link="ha", reader={"maxMessagesPerTrigger": "300", "rowFormat": "ranges"})
        assert query.exception() is None
        route = dst_admin.topic_route(topic)
        target_queues = sorted(MessageQueue(topic, q.broker_name, i) for q in route.queue_datas
                               for i in range(q.read_queue_nums))
        source = read_topic(src.namesrv_addr, queues)
        target = read_topic(dst.namesrv_addr, target_queues)
        assert sum(len(v) for v in target.values()) == 600
        assert sorted(m.body for v in target.values() for m in v) == \
            sorted(m.body for v in source.values() for m in v)
        latest = LinkTables(tmp_path / "delta" / "ha", source_cluster="hsrc").latest_offsets()
        for mq in queues:
            assert latest[mq] == src_admin.max_offset(mq)

"""A consumer group moved to the target finds its retry and dead-letter topics there: with a link's default
``group_topics``, config sync creates ``%RETRY%<group>`` and ``%DLQ%<group>`` of a checkpointed group on the
target, the link replicates them (retry messages one by one: brokers take no batches there) and the
checkpoint connector translates the group's offset on its retry topic with the rest. The group, having
consumed part of its retries on the source, resumes them on the target exactly: nothing missed, nothing
read twice; its dead letters are all there."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pyspark.sql import SparkSession

from broker_store.client import new_message
from broker_store.protocol.topic import dlq_topic, retry_topic
from connectors.checkpoint.tables import CHECKPOINTS
from connectors.config_sync.data_source import ConfigDataSource
from connectors.core.config import load_replicator_config
from jobs.config_sync import start_config_sync
from tests.spark.conftest import Cluster
from tests.spark.helpers import run_job_links, unique
from tests.spark.spark_processes import wait_for
from tests.spark.test_checkpoint_failover import consume, translate_once

pytestmark = pytest.mark.integration


def on_target(cluster: Cluster, topic: str) -> bool:
    """Whether some primary of ``cluster`` holds ``topic``."""
    return any(topic in cluster.admin.all_topic_config(addr) for addr in cluster.admin.primary_addrs().values())


def test_a_moved_group_resumes_its_retries_on_the_target(spark: SparkSession, clusters: tuple[Cluster, Cluster],
                                                        tmp_path: Path) -> None:
    src, dst = clusters
    topic, group = unique("Orders"), unique("billing")
    retry, dlq = retry_topic(group), dlq_topic(group)
    src.create_topic(topic, 2)
    src.create_topic(retry, 1)  # as a consumer's heartbeat creates it: one queue on every broker group
    src.create_topic(dlq, 1)
    for i in range(40):
        src.producer.send(new_message(topic, f"order {i}".encode()))
    retry_queues = src.queues(retry)
    for i in range(30):  # alone, as send-back delivers them (brokers refuse batches into a retry topic)
        src.producer.send(new_message(retry, f"retry {i}".encode(), keys=[f"r{i}"]), retry_queues[i % 2])
    for i in range(5):
        src.producer.send(new_message(dlq, f"dead {i}".encode()), src.queues(dlq)[0])
    # the group consumed some orders and part of its retries on the source
    consumed_src = consume(src.namesrv, group, retry_queues, {mq: 4 + 3 * i for i, mq in enumerate(retry_queues)},
                           start_from_group=False)
    consume(src.namesrv, group, src.queues(topic), {mq: 5 for mq in src.queues(topic)}, start_from_group=False)

    link = "grouptopics"
    config = tmp_path / "replicator.yaml"
    config.write_text(yaml.safe_dump({
        "clusters": [{"name": "src", "namesrv": [src.namesrv]}, {"name": "dst", "namesrv": [dst.namesrv]}],
        "links": [{"name": link, "source": "src", "target": "dst", "topics": {"explicit": [{"source": topic}]},
                   "checkpoint_location": str(tmp_path / "checkpoints" / link),
                   "delta_location": str(tmp_path / "delta"),
                   "checkpoints": {"interval": "1 second", "groups": {"explicit": [group]}},
                   "config_sync": {"interval": "1 second"}}]}))
    loaded = load_replicator_config(config)

    # config sync creates the group's topics on the target (nothing created there by hand)
    spark.dataSource.register(ConfigDataSource)
    sync = start_config_sync(spark, str(config), loaded, link)
    try:
        wait_for(lambda: all(on_target(dst, t) for t in (topic, retry, dlq)), 60,
                 "config sync to create the topic, retry and DLQ topics on the target")
    finally:
        sync.stop()
    for created in (retry, dlq):  # one queue on each of the target's two broker groups, as on the source
        dst.admin.wait_for_route(created, timeout=15, min_queues=2)

    run_job_links(spark, config, [link])
    assert dst.count(retry) == 30 and dst.count(dlq) == 5 and dst.count(topic) == 40

    tables = translate_once(spark, config, link, tmp_path, group)
    rows = [r for r in tables.read(CHECKPOINTS).to_pylist() if r["group"] == group]
    assert retry in {r["source_topic"] for r in rows}, rows
    assert all(r["exact"] for r in rows)

    # the group, moved to the target, resumes its retries there exactly
    retry_targets = dst.queues(retry)
    consumed_dst = consume(dst.namesrv, group, retry_targets, start_from_group=True)
    everything = [m.msg_id for msgs in src.read_all(retry).values() for m in msgs]
    assert len(consumed_src) + len(consumed_dst) == 30, "a retry was consumed twice or never"
    assert sorted(consumed_src + consumed_dst) == sorted(everything)
    dead = [m.body for msgs in dst.read_all(dlq).values() for m in msgs]
    assert sorted(dead) == sorted(f"dead {i}".encode() for i in range(5))

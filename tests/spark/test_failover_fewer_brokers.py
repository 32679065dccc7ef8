"""Consumer failover when the target has fewer broker groups than the source (docs/replicator.md, "Checkpoints and
config sync"): the session's two-broker source cluster replicates into a one-broker target cluster of this module.

* The target topic is created by the link (``createTopicsLikeSource``: config sync's rule,
  ``connectors.config_sync.sizing``) with the source's total queue count, 2 x 4 = 8 queues on its one broker;
  placement gives each source queue its own target queue (the ``placements`` table), so the checkpoint
  translates exactly: a group failing over reads every message once between source and target.
* A target topic that cannot have as many queues (``config_sync.max_queue_nums: 4`` caps it at 4) must
  share: two source queues per target queue. The checkpoint still skips nothing (union = everything) and
  marks those queues "shared: may re-read" in the ``checkpoints`` table; the re-reads are messages of the
  queue sharing the target queue.
* The source topic grows between two runs of the link: the driver grows the target topic before it places
  the new source queues, so they get target queues of their own too.

The replication query runs as the replicate job runs it under ``jobs/run_all.py`` (config + link,
``rowFormat=ranges``, ``createTopicsLikeSource``): the driver creates the topic and places the queues.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from broker_store.client import Admin, MessageQueue, Producer
from connectors.checkpoint.tables import CHECKPOINTS, SHARED_DETAIL, TRANSLATED_OUTCOMES
from connectors.replication.placement_table import PLACEMENTS, PlacementTable
from tests.spark.conftest import DST_MAX_MESSAGE_SIZE, Cluster
from tests.spark.helpers import produce_random, unique
from tests.spark.spark_processes import write_replicator_config
from tests.spark.test_checkpoint_failover import consume, translate_once
from tests.support.processes import LocalCluster

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def one_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A target cluster with a single broker group (``one-a``), shared by this module's tests."""
    processes = LocalCluster(tmp_path_factory.mktemp("one-broker"), "one", brokers=1,
                             namesrv={"broker_expiry_seconds": 5.0}, commit_log_segment_size=64 * 1024 * 1024,
                             max_message_size=DST_MAX_MESSAGE_SIZE).start()
    addr = processes.namesrv_addr
    cluster = Cluster("one", addr, processes, Admin(addr), Producer(addr))
    try:
        yield cluster
    finally:
        cluster.producer.close()
        cluster.admin.close()
        processes.stop()


def replicate(spark: SparkSession, config: Path, link: str, work: Path) -> None:
    """The link once through (AvailableNow), as ``jobs/replicate.py`` starts it under run_all."""
    delta = str(work / "delta")
    frame = (spark.readStream.format("rocketmq").option("config", str(config)).option("link", link)
             .option("deltaLocation", delta).option("startingOffsets", "earliest").option("rowFormat", "ranges")
             .option("createTopicsLikeSource", "true").option("commitOffsetsToSource", "false").load())
    query = (frame.writeStream.format("rocketmq").option("config", str(config)).option("link", link)
             .option("deltaLocation", delta).option("checkpointLocation", str(work / "checkpoints" / link))
             .option("retryBackoffMs", "50").trigger(availableNow=True).queryName(link).start())
    query.awaitTermination(180)
    assert query.exception() is None


def setup_link(src: Cluster, dst: Cluster, work: Path, link: str, messages: int,
               **config_sync: Any) -> tuple[str, Path, str, list[MessageQueue], list[str]]:
    """A source topic of 4 queues on each source broker with ``messages`` messages, a group that consumed part
    of every queue on the source, the link's config (``config_sync``: that section's keys). Returns topic,
    config, group, source queues, consumed."""
    topic = unique("Fewer")
    src.create_topic(topic, 4)
    queues = src.queues(topic)
    assert len(queues) == 8 and len({q.broker_name for q in queues}) == 2
    produce_random(src.producer, topic, queues, messages, max_body=48, batch=10)
    group = unique("fewer")
    consumed = consume(src.namesrv, group, queues, {mq: 5 + (i * 11) % 40 for i, mq in enumerate(queues)},
                       start_from_group=False)
    config = write_replicator_config(work / "replicator.yaml", source=("src", src.namesrv),
                                     target=(dst.name, dst.namesrv),
                                     links={link: {"topic": topic, "checkpoints": {"interval": "1 second"},
                                                   "config_sync": config_sync}})
    return topic, config, group, queues, consumed


def test_two_source_brokers_into_one_fail_over_exactly(spark: SparkSession, clusters: tuple[Cluster, Cluster],
                                                       one_broker: Cluster, tmp_path: Path) -> None:
    src, dst, link = clusters[0], one_broker, "fewer"
    topic, config, group, queues, consumed_src = setup_link(src, dst, tmp_path, link, 800)
    replicate(spark, config, link, tmp_path)
    assert dst.count(topic) == 800
    assert len(dst.queues(topic)) == 8, "the target topic has the source's total queue count"
    placements = PlacementTable(tmp_path / "delta" / link, source_cluster="src").read(PLACEMENTS).to_pylist()
    targets = {(p["source_broker"], p["source_queue_id"]): (p["target_broker"], p["target_queue_id"])
               for p in placements}
    assert len(targets) == 8 and len(set(targets.values())) == 8, targets  # one target queue per source queue

    tables = translate_once(spark, config, link, tmp_path, group)
    rows = [r for r in tables.read(CHECKPOINTS).to_pylist() if r["group"] == group]
    assert rows and all(r["outcome"] in TRANSLATED_OUTCOMES and r["exact"] for r in rows), rows
    assert not any((r["detail"] or "").startswith(SHARED_DETAIL) for r in rows)
    consumed_dst = consume(dst.namesrv, group, dst.queues(topic), start_from_group=True)
    everything = {m.msg_id for msgs in src.read_all(topic).values() for m in msgs}
    assert set(consumed_src) | set(consumed_dst) == everything, "a message was missed"
    assert not set(consumed_src) & set(consumed_dst), "a message consumed on the source was read again"
    assert len(consumed_src) + len(consumed_dst) == 800


def test_a_capped_target_topic_shares_queues_and_says_so(spark: SparkSession, clusters: tuple[Cluster, Cluster],
                                                          one_broker: Cluster, tmp_path: Path) -> None:
    src, dst, link = clusters[0], one_broker, "shared"
    topic, config, group, queues, consumed_src = setup_link(src, dst, tmp_path, link, 800, max_queue_nums=4)
    replicate(spark, config, link, tmp_path)
    assert dst.count(topic) == 800 and len(dst.queues(topic)) == 4  # capped: 4 target queues for 8 source queues
    placements = PlacementTable(tmp_path / "delta" / link, source_cluster="src").read(PLACEMENTS).to_pylist()
    assert sorted(Counter((p["target_broker"], p["target_queue_id"]) for p in placements).values()) == [2] * 4

    tables = translate_once(spark, config, link, tmp_path, group)
    rows = [r for r in tables.read(CHECKPOINTS).to_pylist() if r["group"] == group]
    newest = max(r["snapshot_at"] for r in rows)
    latest = [r for r in rows if r["snapshot_at"] == newest]
    assert len(latest) == 8 and all(r["detail"].startswith(SHARED_DETAIL) and not r["exact"] for r in latest)
    consumed_dst = consume(dst.namesrv, group, dst.queues(topic), start_from_group=True)
    source = src.read_all(topic)
    everything = {m.msg_id for msgs in source.values() for m in msgs}
    assert set(consumed_src) | set(consumed_dst) == everything, "a message was missed"
    assert len(consumed_dst) == len(set(consumed_dst))
    repeated = set(consumed_src) & set(consumed_dst)
    assert repeated, "two source queues with different positions on one target queue must re-read"
    print(f"\nshared target queues: {len(repeated)} of {len(consumed_src)} messages consumed on the source read "
          f"again on the target")


def test_source_growth_grows_the_target_before_new_queues_are_placed(spark: SparkSession,
                                                                     clusters: tuple[Cluster, Cluster],
                                                                     one_broker: Cluster, tmp_path: Path) -> None:
    """The source topic grows from 2 x 2 to 2 x 4 queues between two runs of the link, with no config-sync round
    in between: the replication driver grows the target topic (4 -> 8 queues on its one broker) before it
    places the new source queues, so every source queue still has a target queue of its own and a failover
    after the growth is exact."""
    src, dst, link = clusters[0], one_broker, "grow"
    topic = unique("Grow")
    src.create_topic(topic, 2)
    produce_random(src.producer, topic, src.queues(topic), 200, max_body=48, batch=10, seed=5)
    config = write_replicator_config(tmp_path / "replicator.yaml", source=("src", src.namesrv),
                                     target=(dst.name, dst.namesrv),
                                     links={link: {"topic": topic, "checkpoints": {"interval": "1 second"}}})
    replicate(spark, config, link, tmp_path)
    assert len(dst.queues(topic)) == 4
    src.admin.create_topic(topic, 4, cluster="src")
    src.admin.wait_for_route(topic, timeout=15, min_queues=8)
    queues = src.queues(topic)
    assert len(queues) == 8
    produce_random(src.producer, topic, queues, 400, max_body=48, batch=10, seed=6)
    replicate(spark, config, link, tmp_path)
    assert dst.count(topic) == 600 and len(dst.queues(topic)) == 8
    placements = PlacementTable(tmp_path / "delta" / link, source_cluster="src").read(PLACEMENTS).to_pylist()
    assert len({(p["target_broker"], p["target_queue_id"]) for p in placements}) == len(placements) == 8

    group = unique("grow")
    consumed_src = consume(src.namesrv, group, queues, {mq: 3 + (i * 7) % 30 for i, mq in enumerate(queues)},
                           start_from_group=False)
    tables = translate_once(spark, config, link, tmp_path, group)
    rows = [r for r in tables.read(CHECKPOINTS).to_pylist() if r["group"] == group]
    assert rows and all(r["exact"] for r in rows)
    consumed_dst = consume(dst.namesrv, group, dst.queues(topic), start_from_group=True)
    everything = {m.msg_id for msgs in src.read_all(topic).values() for m in msgs}
    assert set(consumed_src) | set(consumed_dst) == everything and not set(consumed_src) & set(consumed_dst)

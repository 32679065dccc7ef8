"""Queue placement never moves: with preserve_queues on, the source topic grows from 4 to 8 queues per
broker group while the link runs and the target topic's write queues shrink from 4 to 2 per group; every
old source queue keeps landing in its original target queue, the new ones are spread evenly, and a restart
keeps every placement. The link runs as the replicate job runs it (config + link, rowFormat=ranges: the
driver places the queues, ``connectors.replication.placement_planner``)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from connectors.replication.placement_table import PLACEMENTS, PlacementTable
from connectors.replication.tables import OFFSET_MAP, LinkTables
from tests.spark.conftest import Cluster
from tests.spark.helpers import produce_random, unique
from tests.spark.spark_processes import wait_for, write_replicator_config

pytestmark = pytest.mark.integration


def start(spark: SparkSession, config: Path, work: Path, row_format: str) -> Any:
    delta = str(work / "delta")
    frame = (spark.readStream.format("rocketmq").option("config", str(config)).option("link", "place")
             .option("deltaLocation", delta).option("startingOffsets", "earliest").option("rowFormat", row_format)
             .option("commitOffsetsToSource", "false").load())
    return (frame.writeStream.format("rocketmq").option("config", str(config)).option("link", "place")
            .option("deltaLocation", delta).option("checkpointLocation", str(work / "checkpoints" / "place"))
            .option("retryBackoffMs", "50").trigger(processingTime="500 milliseconds").queryName("place").start())


def committed(tables: LinkTables) -> int:
    """Messages the offset_map records (the Delta commit follows the sends)."""
    return sum(row["messages"] for row in tables.read(OFFSET_MAP).to_pylist())


def mapping(tables: LinkTables) -> dict[tuple[str, int], set[tuple[str, int]]]:
    """Source queue -> every target queue the offset_map says its messages went to."""
    out: dict[tuple[str, int], set[tuple[str, int]]] = {}
    for row in tables.read(OFFSET_MAP).to_pylist():
        out.setdefault((row["source_broker"], row["source_queue_id"]), set()).add(
            (row["target_broker"], row["target_queue_id"]))
    return out


@pytest.mark.parametrize(("row_format", "decided_by"), [("ranges", "driver"), ("arrow", "executor")])
def test_placement_survives_source_growth_target_shrink_and_restart(spark: SparkSession,
                                                                    clusters: tuple[Cluster, Cluster],
                                                                    tmp_path: Path, row_format: str,
                                                                    decided_by: str) -> None:
    """ranges: the driver places the queues (the job's format); arrow: the sink's tasks do, with the same
    rule and table."""
    src, dst = clusters
    topic = unique("Place")
    src.create_topic(topic, 4)
    dst.create_topic(topic, 4)
    config = write_replicator_config(tmp_path / "replicator.yaml", source=("src", src.namesrv),
                                     target=("dst", dst.namesrv),
                                     links={"place": {"topic": topic, "preserve_queues": True}})
    tables = LinkTables(tmp_path / "delta" / "place", source_cluster="src")
    query = start(spark, config, tmp_path, row_format)
    try:
        old_queues = src.queues(topic)
        produce_random(src.producer, topic, old_queues, 400, seed=1, max_body=64, batch=8)
        wait_for(lambda: committed(tables) == 400, 60, "400 replicated")
        first = mapping(tables)
        assert len(first) == 8 and all(len(t) == 1 for t in first.values())
        assert {s: next(iter(t)) for s, t in first.items()} == {  # equal counts: queue ids kept
            (mq.broker_name, mq.queue_id): (mq.broker_name.replace("src", "dst"), mq.queue_id) for mq in old_queues}

        src.admin.create_topic(topic, 8, cluster="src")  # the source topic grows: 8 queues per group
        src.admin.wait_for_route(topic, timeout=15)
        wait_for(lambda: len(src.queues(topic)) == 16, 15, "16 source queues")
        dst.admin.create_topic(topic, 4, cluster="dst", read_queue_nums=4, write_queue_nums=2)  # target shrinks
        produce_random(src.producer, topic, src.queues(topic), 800, seed=2, max_body=64, batch=8)
        wait_for(lambda: committed(tables) == 1200, 90, "1200 replicated")
    finally:
        query.stop()
    assert query.exception() is None
    grown = mapping(tables)
    assert all(len(t) == 1 for t in grown.values()), grown  # no source queue split across target queues
    assert {s: grown[s] for s in first} == first
    new = [next(iter(t)) for s, t in grown.items() if s not in first]
    assert len(new) == 8
    assert set(Counter(new).values()) == {2}, Counter(new)  # 8 new queues on the 4 writable target queues
    assert all(qid < 2 for _broker, qid in new)

    placements = PlacementTable(tmp_path / "delta" / "place", source_cluster="src").read(PLACEMENTS)
    assert placements.num_rows == 16  # each decision recorded once
    assert set(placements["decided_by"].to_pylist()) == {decided_by}

    query = start(spark, config, tmp_path, row_format)  # restart from the same checkpoint and tables
    try:
        produce_random(src.producer, topic, src.queues(topic), 400, seed=3, max_body=64, batch=8)
        wait_for(lambda: committed(tables) == 1600, 60, "1600 replicated")
    finally:
        query.stop()
    assert query.exception() is None
    assert mapping(tables) == grown
    assert dst.count(topic) == 1600

"""End to end: rows read by the rocketmq source are written by the rocketmq sink between two real
clusters; the Delta tables and the target's queues are checked message by message."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from broker_store.client import MessageQueue
from connectors.loop_guard import CHAIN_PROPERTY
from connectors.offsets import QueueKey
from connectors.tables import LinkTables
from tests.spark.conftest import Cluster
from tests.spark.helpers import produce_random, run_link, unique

pytestmark = pytest.mark.integration

IGNORED = {"CLUSTER", CHAIN_PROPERTY}


def test_byte_exact_queue_preserving(spark, clusters: tuple[Cluster, Cluster], tmp_path: Path) -> None:
    src, dst = clusters
    topic = unique("Exact")
    src.create_topic(topic, 4)
    dst.create_topic(topic, 4)
    queues = src.queues(topic)
    assert len(queues) == 8
    produce_random(src.producer, topic, queues, 3000)
    started = time.monotonic()
    query = run_link(spark, source_namesrv=src.namesrv, source_cluster="src", target_namesrv=dst.namesrv,
                     target_cluster="dst", topics=topic, work=tmp_path, link="exact",
                     reader={"maxMessagesPerTrigger": "1000"})
    elapsed = time.monotonic() - started
    assert query.exception() is None
    source = src.read_all(topic)
    target = dst.read_all(topic)
    assert sum(len(v) for v in target.values()) == 3000, f"replicated in {elapsed:.1f}s"
    src_sorted, dst_sorted = sorted(source), sorted(target)
    for smq, tmq in zip(src_sorted, dst_sorted, strict=True):
        assert smq.queue_id == tmq.queue_id and smq.broker_name[-1] == tmq.broker_name[-1]
        s_msgs, t_msgs = source[smq], target[tmq]
        assert len(s_msgs) == len(t_msgs), smq
        for s, t in zip(s_msgs, t_msgs, strict=True):
            assert t.body == s.body
            assert t.flag == s.flag
            assert t.msg_id == s.msg_id  # UNIQ_KEY survives
            assert {k: v for k, v in t.properties.items() if k not in IGNORED} == \
                   {k: v for k, v in s.properties.items() if k not in IGNORED}
            assert t.properties[CHAIN_PROPERTY] == "src"
            assert t.properties["CLUSTER"] == "dst"
    tables = LinkTables(tmp_path / "delta" / "exact", source_cluster="src")
    latest = tables.latest_offsets()
    for mq in queues:
        assert latest[QueueKey(mq.topic, mq.broker_name, mq.queue_id)] == src.admin.max_offset(mq)
    # offset map: every source offset maps to the target message with the same body
    rows = tables.read("offset_map").to_pylist()
    assert sum(r["messages"] for r in rows) == 3000
    by_src = {(m.broker_name, m.queue_id): source[m] for m in source}
    by_dst = {(m.broker_name, m.queue_id): target[m] for m in target}
    for r in rows:
        s_msgs = {m.queue_offset: m for m in by_src[(r["source_broker"], r["source_queue_id"])]}
        t_msgs = {m.queue_offset: m for m in by_dst[(r["target_broker"], r["target_queue_id"])]}
        assert r["source_last_offset"] - r["source_first_offset"] == r["target_last_offset"] - r["target_first_offset"]
        for k in range(r["messages"]):
            assert t_msgs[r["target_first_offset"] + k].body == s_msgs[r["source_first_offset"] + k].body
    metrics = tables.read("metrics").to_pylist()
    assert sum(m["messages"] for m in metrics) == 3000
    assert all(m["messages"] <= 1000 for m in metrics)
    print(f"3000 messages replicated in {elapsed:.1f}s over {len(metrics)} batches")

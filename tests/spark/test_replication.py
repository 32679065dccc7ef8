"""End to end: rows read by the rocketmq source are written by the rocketmq sink between two real
clusters; the Delta tables and the target's queues are checked message by message."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from connectors.replication.loop_guard import CHAIN_PROPERTY
from connectors.replication.tables import LinkTables
from tests.spark.conftest import Cluster
from tests.spark.helpers import LinkArgs, produce_random, run_link, unique

pytestmark = pytest.mark.integration

IGNORED = {"CLUSTER", CHAIN_PROPERTY, "ROCKETMQ_REPLICATOR_POSITION"}


@pytest.mark.parametrize("row_format", ["arrow", "raw", "ranges"])
def test_byte_exact_queue_preserving(spark: SparkSession, clusters: tuple[Cluster, Cluster], tmp_path: Path,
                                     row_format: str) -> None:
    """Per-message rows (arrow), raw pulls forwarded by the sink, and queue ranges the sink pulls itself
    (ranges, as the replicate job runs), queues grouped into fewer partitions for raw and ranges."""
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
                     reader={"maxMessagesPerTrigger": "1000", "rowFormat": row_format,
                             # as the job runs it: 8 queues grouped into 3 partitions
                             **({"maxPartitions": "3"} if row_format != "arrow" else {})})
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
        assert latest[mq] == src.admin.max_offset(mq)
    # offset map: every source offset maps to the target message with the same body
    rows = tables.read("offset_map").to_pylist()
    assert sum(r["messages"] for r in rows) == 3000
    by_src = {(m.broker_name, m.queue_id): source[m] for m in source}
    by_dst = {(m.broker_name, m.queue_id): target[m] for m in target}
    for r in rows:
        s_at = {m.queue_offset: m for m in by_src[(r["source_broker"], r["source_queue_id"])]}
        t_at = {m.queue_offset: m for m in by_dst[(r["target_broker"], r["target_queue_id"])]}
        assert r["source_last_offset"] - r["source_first_offset"] == r["target_last_offset"] - r["target_first_offset"]
        for k in range(r["messages"]):
            assert t_at[r["target_first_offset"] + k].body == s_at[r["source_first_offset"] + k].body
    metrics = tables.read("metrics").to_pylist()
    assert sum(m["messages"] for m in metrics) == 3000
    assert all(m["messages"] <= 1000 for m in metrics)
    print(f"3000 messages replicated in {elapsed:.1f}s over {len(metrics)} batches")


@pytest.mark.parametrize("row_format", ["raw", "ranges"])
def test_pulls_by_the_sink_apply_the_tag_filter_and_advance_past_filtered_messages(
        spark: SparkSession, clusters: tuple[Cluster, Cluster], tmp_path: Path, row_format: str) -> None:
    src, dst = clusters
    topic = unique("RawTags")
    src.create_topic(topic, 2)
    dst.create_topic(topic, 2)
    queues = src.queues(topic)
    produce_random(src.producer, topic, queues, 600, seed=3, max_body=512)
    query = run_link(spark, source_namesrv=src.namesrv, source_cluster="src", target_namesrv=dst.namesrv,
                     target_cluster="dst", topics=topic, work=tmp_path, link="rawtags",
                     reader={"rowFormat": row_format, "tags": "TagA || TagB", "pullBatchSize": "64"})
    assert query.exception() is None
    source, target = src.read_all(topic), dst.read_all(topic)
    for smq, tmq in zip(sorted(source), sorted(target), strict=True):
        wanted = [m.body for m in source[smq] if m.tags in ("TagA", "TagB")]
        assert [m.body for m in target[tmq]] == wanted, smq
    assert 0 < sum(len(v) for v in target.values()) < 600
    latest = LinkTables(tmp_path / "delta" / "rawtags", source_cluster="src").latest_offsets()
    for mq in queues:  # offsets move past the filtered messages too
        assert latest[mq] == src.admin.max_offset(mq)


def _write_config(path: Path, src: Cluster, dst: Cluster, topic: str, work: Path, **extra: str) -> Path:
    import yaml

    def link(name: str, source: str, target: str) -> dict[str, object]:
        return {"name": name, "source": source, "target": target, "topics": {"include": [f"{topic}.*"]},
                "checkpoint_location": str(work / "checkpoints" / name), "delta_location": str(work / "delta"),
                "retry_backoff_ms": 50, "trigger_interval": "500 milliseconds", **extra}

    path.write_text(yaml.safe_dump({
        "clusters": [{"name": "src", "namesrv": [src.namesrv]}, {"name": "dst", "namesrv": [dst.namesrv]}],
        "links": [link("a-to-b", "src", "dst"), link("b-to-a", "dst", "src")],
    }))
    return path


def test_loop_prevention_between_two_links(spark: SparkSession, clusters: tuple[Cluster, Cluster],
                                           tmp_path: Path) -> None:
    """A->B and B->A on the same topics (regex links, started through jobs.replicate): every message
    ends up once on each side, and messages that came from the other side are skipped, not echoed."""
    from connectors.core.config import load_replicator_config
    from jobs.replicate import start_link

    src, dst = clusters
    topic = unique("Loop")
    for c in (src, dst):
        c.create_topic(topic, 2)
    produce_random(src.producer, topic, src.queues(topic), 200, seed=1)
    produce_random(dst.producer, topic, dst.queues(topic), 120, seed=2)
    config_path = _write_config(tmp_path / "replicator.yaml", src, dst, topic, tmp_path)
    config = load_replicator_config(config_path)
    for name in ("a-to-b", "b-to-a", "a-to-b"):
        query = start_link(spark, str(config_path), config, name, available_now=True)
        query.awaitTermination(120)
        assert query.exception() is None
    assert src.count(topic) == 320
    assert dst.count(topic) == 320
    chains = {m.properties.get(CHAIN_PROPERTY) for msgs in dst.read_all(topic).values() for m in msgs}
    assert chains == {None, "src"}
    metrics_b = LinkTables(tmp_path / "delta" / "b-to-a", source_cluster="dst").read("metrics").to_pylist()
    assert sum(m["messages"] for m in metrics_b) == 120
    assert sum(m["skipped_loop"] for m in metrics_b) == 200
    metrics_a = LinkTables(tmp_path / "delta" / "a-to-b", source_cluster="src").read("metrics").to_pylist()
    assert sum(m["messages"] for m in metrics_a) == 200
    assert sum(m["skipped_loop"] for m in metrics_a) == 120


def test_resume_from_delta_when_checkpoint_is_deleted(spark: SparkSession, clusters: tuple[Cluster, Cluster],
                                                      tmp_path: Path) -> None:
    import shutil

    src, dst = clusters
    topic = unique("Resume")
    src.create_topic(topic, 2)
    dst.create_topic(topic, 2)
    queues = src.queues(topic)
    produce_random(src.producer, topic, queues, 300, seed=3)
    kwargs = LinkArgs(source_namesrv=src.namesrv, source_cluster="src", target_namesrv=dst.namesrv,
                      target_cluster="dst", topics=topic, work=tmp_path, link="resume")
    assert run_link(spark, **kwargs).exception() is None
    assert dst.count(topic) == 300
    shutil.rmtree(tmp_path / "checkpoints")
    produce_random(src.producer, topic, queues, 100, seed=4)
    # startingOffsets=earliest would copy all 400 again; the Delta offsets table says where to go on.
    assert run_link(spark, **kwargs).exception() is None
    assert dst.count(topic) == 400
    source = src.read_all(topic)
    target = dst.read_all(topic)
    for smq, tmq in zip(sorted(source), sorted(target), strict=True):
        assert [m.body for m in source[smq]] == [m.body for m in target[tmq]]


def test_a_batch_replayed_after_a_restart_is_not_sent_twice(spark: SparkSession, clusters: tuple[Cluster, Cluster],
                                                             tmp_path: Path) -> None:
    """The job stopped after the sink committed its batch to Delta but before Spark wrote the batch's commit
    (here: that commit file removed): the restarted query re-runs the batch with the same offsets, and the
    reader leaves out what the Delta offsets table says was delivered."""
    src, dst = clusters
    topic = unique("Replay")
    src.create_topic(topic, 2)
    dst.create_topic(topic, 2)
    produce_random(src.producer, topic, src.queues(topic), 300, seed=5)
    kwargs = LinkArgs(source_namesrv=src.namesrv, source_cluster="src", target_namesrv=dst.namesrv,
                      target_cluster="dst", topics=topic, work=tmp_path, link="replay",
                      reader={"maxMessagesPerTrigger": "100"})  # 3 batches: the last one is re-run
    assert run_link(spark, **kwargs).exception() is None
    assert dst.count(topic) == 300
    commits = sorted((tmp_path / "checkpoints" / "replay" / "commits").glob("[0-9]*"), key=lambda f: int(f.name))
    commits[-1].unlink()  # Spark re-runs that batch on the next start
    commits[-1].with_name(f".{commits[-1].name}.crc").unlink(missing_ok=True)  # Hadoop's checksum of it
    assert run_link(spark, **kwargs).exception() is None
    assert dst.count(topic) == 300
    metrics = LinkTables(tmp_path / "delta" / "replay", source_cluster="src").read("metrics").to_pylist()
    assert sum(m["messages"] for m in metrics) == 300


def test_available_now_stops_at_the_end_and_limit_bounds_batches(spark: SparkSession, clusters: tuple[Cluster, Cluster],
                                                                  tmp_path: Path) -> None:
    """maxMessagesPerTrigger=150 over 1000 messages: every batch <= 150; messages produced after the
    query started (after its first batch) are not read by this AvailableNow run."""
    src, dst = clusters
    topic = unique("Avail")
    src.create_topic(topic, 4)
    dst.create_topic(topic, 4)
    queues = src.queues(topic)
    produce_random(src.producer, topic, queues, 1000, seed=5, max_body=256)
    query = run_link(spark, source_namesrv=src.namesrv, source_cluster="src", target_namesrv=dst.namesrv,
                     target_cluster="dst", topics=topic, work=tmp_path, link="avail",
                     reader={"maxMessagesPerTrigger": "150"}, wait=False)
    deadline = time.monotonic() + 60
    while not query.recentProgress and time.monotonic() < deadline:
        time.sleep(0.05)
    produce_random(src.producer, topic, queues, 500, seed=6, max_body=256)
    query.awaitTermination(120)
    assert query.exception() is None
    sizes = [p["numInputRows"] for p in (json.loads(p.json) for p in query.recentProgress)]
    assert sum(sizes) == 1000 and max(sizes) <= 150, sizes
    assert dst.count(topic) == 1000


def test_progress_is_mirrored_to_the_source_consumer_group(spark: SparkSession, clusters: tuple[Cluster, Cluster],
                                                           tmp_path: Path) -> None:
    """commit(end) writes the query's offsets as CID_RMQ_SYS_REPLICATOR_<link> on the source, so
    mqadmin-style tools see the replicator's progress and lag (one batch behind: Spark commits a
    batch's offsets when it plans the next one)."""
    from broker_store.client import PullConsumer

    src, dst = clusters
    topic = unique("Group")
    src.create_topic(topic, 2)
    dst.create_topic(topic, 2)
    queues = src.queues(topic)
    produce_random(src.producer, topic, queues, 200, seed=5)
    first_round = {mq: src.admin.max_offset(mq) for mq in queues}
    query = run_link(spark, source_namesrv=src.namesrv, source_cluster="src", target_namesrv=dst.namesrv,
                     target_cluster="dst", topics=topic, work=tmp_path, link="group-lag", available_now=False,
                     reader={"rowFormat": "ranges"})
    try:
        deadline = time.monotonic() + 60
        while dst.count(topic) < 200 and time.monotonic() < deadline:
            time.sleep(0.2)
        produce_random(src.producer, topic, queues, 50, seed=6)  # a next batch, so the first is committed
        with PullConsumer(src.namesrv, "CID_RMQ_SYS_REPLICATOR_group-lag", heartbeat_interval=None) as group:
            while time.monotonic() < deadline:
                committed = {mq: group.query_consumer_offset(mq) for mq in queues}
                if all((committed[mq] or 0) >= first_round[mq] for mq in queues):
                    break
                time.sleep(0.2)
        assert all((committed[mq] or 0) >= first_round[mq] for mq in queues), (committed, first_round)
        assert all((committed[mq] or 0) <= src.admin.max_offset(mq) for mq in queues)
    finally:
        query.stop()
    assert query.exception() is None

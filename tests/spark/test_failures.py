"""Failed sends end to end: the dismiss policy records whole messages in the failures table and
moves on; a custom hook decides; a failed batch is not committed; replay re-sends what was recorded."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml
from pyspark.sql import SparkSession

from broker_store.client import MessageQueue, new_message
from connectors.replication.tables import LinkTables, StoredFailure
from tests.spark.conftest import DST_MAX_MESSAGE_SIZE, Cluster
from tests.spark.helpers import LinkArgs, produce_random, run_link, unique

pytestmark = pytest.mark.integration

PERM_READ = 4
PERM_READ_WRITE = 6


def _args(src: Cluster, dst: Cluster, topic: str, work: Path, link: str) -> LinkArgs:
    return LinkArgs(source_namesrv=src.namesrv, source_cluster="src", target_namesrv=dst.namesrv,
                    target_cluster="dst", topics=topic, work=work, link=link)


def test_dismiss_records_not_writable_and_too_big(spark: SparkSession, clusters: tuple[Cluster, Cluster],
                                                  tmp_path: Path) -> None:
    src, dst = clusters
    closed, big = unique("Closed"), unique("Big")
    src.create_topic(closed, 1)
    dst.create_topic(closed, 1, perm=PERM_READ)  # the target refuses writes
    src.create_topic(big, 1)
    dst.create_topic(big, 1)
    closed_sent = produce_random(src.producer, closed, src.queues(closed), 5, seed=8, batch=5)
    mq = src.queues(big)[0]
    huge = os.urandom(DST_MAX_MESSAGE_SIZE + 1024)  # fits the source, not the target
    src.producer.send_batch([new_message(big, b"small-1", keys="s1")], mq)
    src.producer.send(new_message(big, huge, tags="Huge", keys="h1", properties={"p": "q"}), mq)
    src.producer.send_batch([new_message(big, b"small-2", keys="s2")], mq)
    query = run_link(spark, **_args(src, dst, f"{closed},{big}", tmp_path, "dismiss"),
                     writer={"maxRetries": "2", "batchMaxBytes": str(8 * 1024 * 1024)})
    assert query.exception() is None
    tables = LinkTables(tmp_path / "delta" / "dismiss", source_cluster="src")
    failures = tables.unreplayed_failures()
    by_topic: dict[str, list[StoredFailure]] = {}
    for f in failures:
        by_topic.setdefault(f.message.topic, []).append(f)
    assert len(by_topic[closed]) == 5 and len(by_topic[big]) == 1
    closed_bodies = {f.message.body for f in by_topic[closed]}
    assert len(closed_bodies) == 5
    assert all(f.outcome.value == "DISMISSED" and f.message.attempts == 3 for f in by_topic[closed])
    big_failure = by_topic[big][0].message
    assert big_failure.body == huge and big_failure.properties["p"] == "q" and big_failure.tags == "Huge"
    assert "MessageIllegal" in big_failure.error
    assert [m.body for msgs in dst.read_all(big).values() for m in msgs] == [b"small-1", b"small-2"]
    # offsets moved past the failed messages (dismissed = done)
    latest = tables.latest_offsets()
    assert latest[MessageQueue(big, mq.broker_name, mq.queue_id)] == 3
    assert sum(latest[MessageQueue(closed, q.broker_name, q.queue_id)] for q in src.queues(closed)) == 5
    metrics = tables.read("metrics").to_pylist()
    assert sum(m["failed"] for m in metrics) == 6 and sum(m["messages"] for m in metrics) == 2
    assert len(closed_sent) == 1

    # replay: open the topic on the target, re-send what the table holds, mark it replayed
    from jobs.replay_failures import replay

    dst.create_topic(closed, 1, perm=PERM_READ_WRITE)
    config = tmp_path / "replicator.yaml"
    config.write_text(yaml.safe_dump({
        "clusters": [{"name": "src", "namesrv": [src.namesrv]}, {"name": "dst", "namesrv": [dst.namesrv]}],
        "links": [{"name": "dismiss", "source": "src", "target": "dst", "topics": {"explicit": [{"source": closed}]},
                   "checkpoint_location": str(tmp_path / "checkpoints" / "dismiss"),
                   "delta_location": str(tmp_path / "delta")}]}))
    replayed, still = replay(str(config), "dismiss")
    assert replayed == 5 and len(still) == 1 and "MessageIllegal" in still[0]
    assert {m.body for msgs in dst.read_all(closed).values() for m in msgs} == closed_bodies
    assert [f.message.topic for f in tables.unreplayed_failures()] == [big]


def test_custom_hook_dismisses_or_fails_the_batch(spark: SparkSession, clusters: tuple[Cluster, Cluster],
                                                  tmp_path: Path, hook_log: Path) -> None:
    src, dst = clusters
    topic = unique("Hook")
    src.create_topic(topic, 1)
    dst.create_topic(topic, 1, perm=PERM_READ)
    produce_random(src.producer, topic, src.queues(topic), 3, seed=9, batch=3)
    writer = {"failurePolicy": "custom", "maxRetries": "0"}

    from pyspark.errors import StreamingQueryException

    with pytest.raises(StreamingQueryException) as raised:
        run_link(spark, **_args(src, dst, topic, tmp_path / "fail", "hook-fail"),
                 writer={**writer, "failureHook": "tests.spark.hooks:fail_batch"})
    error = str(raised.value)
    assert "BatchFailedError" in error and "failure hook returned False" in error
    tables = LinkTables(tmp_path / "fail" / "delta" / "hook-fail", source_cluster="src")
    assert tables.latest_offsets() == {} and tables.unreplayed_failures() == []
    assert not (tmp_path / "fail" / "checkpoints" / "hook-fail" / "commits" / "0").exists()

    ok = run_link(spark, **_args(src, dst, topic, tmp_path / "ok", "hook-ok"),
                  writer={**writer, "failureHook": "tests.spark.hooks:dismiss_all"})
    assert ok.exception() is None
    tables = LinkTables(tmp_path / "ok" / "delta" / "hook-ok", source_cluster="src")
    failures = tables.unreplayed_failures()
    assert len(failures) == 3 and {f.policy for f in failures} == {"custom"}
    logged = [json.loads(line) for line in hook_log.read_text().splitlines() if topic in line]
    assert len(logged) == 6  # three messages seen by each hook

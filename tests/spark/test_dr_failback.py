"""``python -m jobs.dr failback`` between the session's real clusters, after a switchover, with both links'
replication queries on the test session (``jobs.replicate.start_link``) and the command as its own process: a
group reads on A, moves to B (switchover), reads a mix of A's messages and messages produced on B, moves back
(failback, killed with kill -9 once while it waits for the reverse link, then run again) and reads on A exactly
what it had not read: nothing missed, nothing twice. A's topics take writes again, then B's (the standby), and the
forward link restarted afterwards skips the reverse link's copies on A (nothing copied back to B) while it
still copies A's new messages."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from broker_store.client import new_message
from broker_store.protocol.codes import PERM_READ, PERM_WRITE
from connectors.core.config import load_replicator_config
from connectors.replication.tables import LinkTables
from jobs.dr.failback_cli import print_failback_report
from jobs.dr.operation import StepState
from jobs.replicate import start_link
from tests.spark.conftest import Cluster
from tests.spark.helpers import produce_random, unique
from tests.spark.spark_processes import wait_for, write_replicator_config
from tests.spark.test_checkpoint_failover import consume
from tests.spark.test_dr_switchover import Setup

pytestmark = pytest.mark.integration


def perms(cluster: Cluster, topic: str) -> set[int]:
    return {cluster.admin.all_topic_config(addr)[topic].perm
            for addr in cluster.admin.primary_addrs(cluster.name).values()}


def test_a_group_moved_a_to_b_to_a_reads_every_message_once_and_the_forward_link_copies_nothing_back(
        spark: SparkSession, clusters: tuple[Cluster, Cluster], tmp_path: Path) -> None:
    src, dst = clusters
    setup = Setup(src, dst, tmp_path, "DrBack")
    reverse = unique("DrBackRev")
    groups = {"checkpoints": {"groups": {"explicit": [setup.group]}}}
    write_replicator_config(setup.config, source=(src.name, src.namesrv), target=(dst.name, dst.namesrv), links={
        setup.link: {"topic": setup.topic, "trigger_interval": 1, **groups},
        reverse: {"topic": setup.topic, "source": dst.name, "target": src.name, "trigger_interval": 1, **groups}})
    src.admin.create_subscription_group({"groupName": setup.group}, cluster=src.name)
    config = load_replicator_config(setup.config)

    on_a = [i for r in produce_random(src.producer, setup.topic, setup.queues, 200, max_body=64) for i in r.msg_ids]
    read = consume(src.namesrv, setup.group, setup.queues, {q: 10 for q in setup.queues}, start_from_group=False)
    with setup.replicating(spark):
        rc, out = setup.dr_done("switchover", "--max-lag", "100000", log="switchover.log")
    assert rc == 0, out

    b_queues = dst.queues(setup.topic)
    on_b = [i for r in produce_random(dst.producer, setup.topic, b_queues, 120, max_body=64, seed=11)
            for i in r.msg_ids]
    # a mix: some B queues read into B's own messages, some only into A's, one not at all
    read += consume(dst.namesrv, setup.group, b_queues, {q: (0, 20, 60, 90)[i % 4] for i, q in enumerate(b_queues)},
                    start_from_group=True)
    assert set(read) & set(on_b) and set(on_a) - set(read)

    rc, out = setup.dr_done("failback", "--dry-run", log="dry.log")
    assert rc == 0 and f"reverse link: {reverse}" in out and "reopen" in out, out

    def waiting_in_drain() -> bool:
        record = setup.journal.load()
        return record is not None and record.kind == "failback" and record.step("drain").state is StepState.RUNNING

    first = setup.dr("failback", log="failback1.log")
    try:
        wait_for(waiting_in_drain, 120, "the failback waiting for the reverse link", alive=first)
    finally:
        first.kill()  # kill -9 while it waits; A is open again, B fenced
    assert perms(src, setup.topic) == {PERM_READ | PERM_WRITE} and perms(dst, setup.topic) == {PERM_READ}

    query = start_link(spark, str(setup.config), config, reverse)
    try:
        rc, out = setup.dr_done("failback", "--json", log="failback2.log")
    finally:
        query.stop()
    assert rc == 0, out
    document: dict[str, Any] = json.loads(out[out.index("{"):])
    assert document["state"] == "done" and document["kind"] == "failback"
    assert [s["attempts"] for s in document["steps"]] == [1, 1, 1, 2, 1, 1, 1, 1]
    report = document["steps"][-1]["result"]
    assert all(q["missing"] == 0 for q in report["queues"])
    assert sum(q["on_a"] for q in report["queues"]) == 200 + 120  # every message of B's queues crossed or came
    rows = report["groups"][setup.group]
    assert rows and all(r["exact"] and r["re_read"] == 0 for r in rows), rows
    assert report["forward_resume"] == {"from_b": 120, "others": 0}
    assert "name server address" in report["operator"]
    print(first.log(), out[:out.index("{")])  # the runbook's output (pytest -s)
    print_failback_report(setup.record())
    assert perms(src, setup.topic) == {PERM_READ | PERM_WRITE} and perms(dst, setup.topic) == {PERM_READ | PERM_WRITE}

    # the group on A reads exactly what it had not read
    rest = consume(src.namesrv, setup.group, src.queues(setup.topic), start_from_group=True)
    assert not set(rest) & set(read)
    assert len(read) + len(rest) == len(set(read) | set(rest))
    assert set(read) | set(rest) == set(on_a) | set(on_b)

    # the forward link resumes from A's end: B's messages are not copied back, A's new ones are
    src.admin.wait_for_route(setup.topic, timeout=15, min_queues=len(setup.queues))
    new = [src.producer.send(new_message(setup.topic, f"after failback {i}".encode())).msg_id for i in range(5)]
    forward_tables = LinkTables.for_link(config.link(setup.link))
    a_queues = src.queues(setup.topic)
    a_end = {q: src.admin.max_offset(q) for q in a_queues}

    def forward_at_a_end() -> bool:
        done = forward_tables.latest_offsets()
        return all(done.get(q, 0) >= end for q, end in a_end.items())

    with setup.replicating(spark):
        wait_for(forward_at_a_end, 120, "the forward link past every message of A")
    on_b_now = [m.msg_id for msgs in dst.read_all(setup.topic).values() for m in msgs]
    assert len(on_b_now) == 200 + 120 + 5 and set(on_b_now) == set(on_a) | set(on_b) | set(new)

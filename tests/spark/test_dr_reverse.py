"""``python -m jobs.dr switchover --reverse`` then ``failback`` between the session's real clusters, both links'
replication queries on the test session (``jobs.replicate.start_link``) and the command as its own process: the
reverse link's query runs from the start, held by the link stop marker (a warm job); the switchover, killed with
kill -9 while it waits in ``drain`` and run again, holds it, then starts it exactly at B's end: it copies the
messages produced on B and reads none of A's copies (nothing skipped by its loop guard), A's topics take its
writes. The failback then finds the reverse link caught up, and the group moved A -> B -> A reads every message
once."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from broker_store.protocol.codes import PERM_READ, PERM_WRITE
from broker_store.protocol.topic import retry_topic
from connectors.core.config import load_replicator_config
from connectors.replication.link_stop import LinkStop, read_stop, stop_link
from connectors.replication.tables import LinkTables
from jobs.dr.operation import StepState
from jobs.replicate import start_link
from tests.spark.conftest import Cluster
from tests.spark.helpers import produce_random, unique
from tests.spark.spark_processes import wait_for, write_replicator_config
from tests.spark.test_checkpoint_failover import consume
from tests.spark.test_dr_failback import perms
from tests.spark.test_dr_switchover import Setup

pytestmark = pytest.mark.integration


def test_switchover_with_reverse_starts_the_warm_reverse_link_exactly_and_the_failback_finds_it_caught_up(
        spark: SparkSession, clusters: tuple[Cluster, Cluster], tmp_path: Path) -> None:
    src, dst = clusters
    setup = Setup(src, dst, tmp_path, "DrRev")
    reverse = unique("DrRevBack")
    groups = {"checkpoints": {"groups": {"explicit": [setup.group]}}}
    write_replicator_config(setup.config, source=(src.name, src.namesrv), target=(dst.name, dst.namesrv), links={
        setup.link: {"topic": setup.topic, "trigger_interval": 1, **groups},
        reverse: {"topic": setup.topic, "source": dst.name, "target": src.name, "trigger_interval": 1,
                  "checkpoints": {"enabled": False, **groups["checkpoints"]}}})
    src.admin.create_subscription_group({"groupName": setup.group}, cluster=src.name)
    src.create_topic(retry_topic(setup.group), 1)
    config = load_replicator_config(setup.config)
    reverse_location = config.link(reverse).tables_location
    reverse_tables = LinkTables.for_link(config.link(reverse))

    on_a = [i for r in produce_random(src.producer, setup.topic, setup.queues, 200, max_body=64) for i in r.msg_ids]
    read = consume(src.namesrv, setup.group, setup.queues, {q: 10 for q in setup.queues}, start_from_group=False)

    def running(step: str) -> bool:
        record = setup.journal.load()
        return record is not None and record.step(step).state is StepState.RUNNING

    # the reverse link's job, warm and held (as an operator starts it ahead of the switchover)
    stop_link(reverse_location, LinkStop("operator", "held until the switchover", 0.0))
    reverse_query = start_link(spark, str(setup.config), config, reverse)
    try:
        # 1. the forward link is not running: the switchover holds the reverse link, fences A, waits in drain
        first = setup.dr("switchover", "--reverse", reverse, log="switchover1.log")
        try:
            wait_for(lambda: running("drain"), 60, "the switchover waiting in drain", alive=first)
        finally:
            first.kill()
        stop = read_stop(reverse_location)
        assert stop is not None and stop.operation == setup.record().id
        assert perms(src, setup.topic) == {PERM_READ}
        with setup.replicating(spark):  # 2. the same command (its --reverse taken from the journal) finishes
            rc, out = setup.dr_done("switchover", "--json", log="switchover2.log")
        assert rc == 0, out
        document: dict[str, Any] = json.loads(out[out.index("{"):])
        assert [s["name"] for s in document["steps"]] == ["preflight", "hold", "fence", "drain", "groups", "commit",
                                                         "reverse", "report"]
        assert [s["attempts"] for s in document["steps"]] == [1, 1, 1, 2, 1, 1, 1, 1]
        report = document["steps"][-1]["result"]
        started = report["reverse"]
        assert started["reverse_link"] == reverse and started["skipped"] == 200
        assert all(q["start"] == q["end"] for q in started["queues"])  # B held only A's copies: its end
        assert "warm standby" in report["operator"]
        assert read_stop(reverse_location) is None
        assert perms(src, setup.topic) == {PERM_READ | PERM_WRITE}  # A takes the reverse link's writes

        b_queues = dst.queues(setup.topic)
        on_b = [i for r in produce_random(dst.producer, setup.topic, b_queues, 120, max_body=64, seed=11)
                for i in r.msg_ids]
        read += consume(dst.namesrv, setup.group, b_queues,
                        {q: (0, 20, 60, 90)[i % 4] for i, q in enumerate(b_queues)}, start_from_group=True)
        b_end = {q: dst.admin.max_offset(q) for q in b_queues}

        def reverse_at_b_end() -> bool:
            done = reverse_tables.latest_offsets()
            return all(done.get(q, 0) >= end for q, end in b_end.items())

        wait_for(reverse_at_b_end, 120, "the reverse link past every message of B")
        totals = reverse_tables.totals()
        assert totals["messages"] == 120 and totals["skipped_loop"] == 0, totals  # none of A's copies read

        rc, out = setup.dr_done("failback", "--json", log="failback.log")
    finally:
        reverse_query.stop()
    assert rc == 0, out
    document = json.loads(out[out.index("{"):])
    assert document["state"] == "done" and [s["attempts"] for s in document["steps"]] == [1] * 8
    report = document["steps"][-1]["result"]
    assert all(q["missing"] == 0 for q in report["queues"])
    rows = report["groups"][setup.group]
    assert rows and all(r["exact"] and r["re_read"] == 0 for r in rows), rows
    assert report["forward_resume"] == {"from_b": 120, "others": 0}
    rest = consume(src.namesrv, setup.group, src.queues(setup.topic), start_from_group=True)
    assert not set(rest) & set(read)
    assert set(read) | set(rest) == set(on_a) | set(on_b)

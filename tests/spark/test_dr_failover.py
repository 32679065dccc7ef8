"""``python -m jobs.dr failover`` with A lost: a source cluster of the test's own (two broker groups) replicated to
the session's target by the link's query on the test session, throttled so that it lags; A's group has a
translated checkpoint. ``failover`` is refused while A answers; then every process of A is killed with kill -9
while the link still has A's messages to copy, ``failover --dry-run`` previews the audit, the command is killed
with kill -9 in its stop step and run again: it finishes each step once, its audit counts exactly the messages
A acknowledged that the link had not replicated (from the job's own record of A's max offsets), and the group
resumes on B where its checkpoint says, reading every replicated message it had not read on A, none twice."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from broker_store.client import MessageQueue
from connectors.checkpoint.tables import CHECKPOINTS, CheckpointOutcome, CheckpointTables, newest_complete_snapshot_ms
from connectors.core.config import load_replicator_config
from connectors.core.offsets import queue_key
from connectors.replication.link_stop import is_stopped
from connectors.replication.partition_writer import PartitionWriter
from connectors.replication.planning import QueueRange
from connectors.replication.pulling import pull_range_raw
from connectors.replication.reader import RocketMQStreamReader
from connectors.replication.source_maxes import read_source_maxes
from connectors.replication.tables import LinkTables
from connectors.replication.writer_options import SinkOptions
from jobs.dr.link_ends import triple
from jobs.dr.operation import OperationState, StepState
from tests.spark.conftest import SRC_MAX_MESSAGE_SIZE, Cluster, _start_cluster
from tests.spark.helpers import produce_random
from tests.spark.spark_processes import wait_for, write_replicator_config
from tests.spark.test_checkpoint_failover import consume, start_checkpoints, translate_once
from tests.spark.test_dr_switchover import Setup

pytestmark = pytest.mark.integration

PHASE1, PHASE2 = 120, 600
HUNG = 8
"""Messages of a batch that sent to B and never committed (``send_without_committing``)."""


def test_failover_after_a_is_killed_audits_what_did_not_cross_and_moves_the_group_exactly(
        spark: SparkSession, clusters: tuple[Cluster, Cluster], tmp_path: Path) -> None:
    _, dst = clusters
    a = _start_cluster("drA", tmp_path / "a", SRC_MAX_MESSAGE_SIZE)  # its own A: this test kills it
    try:
        setup = Setup(a, dst, tmp_path, "DrFail")
        write_replicator_config(  # the link lags by design: at most 40 messages per one-second trigger
            setup.config, source=(a.name, a.namesrv), target=(dst.name, dst.namesrv),
            links={setup.link: {"topic": setup.topic, "trigger_interval": 1, "max_messages_per_trigger": 40,
                                "checkpoints": {"interval": "1 second",
                                                "groups": {"explicit": [setup.group]}}}})
        config = load_replicator_config(setup.config)
        link = config.link(setup.link)
        tables = LinkTables.for_link(link)
        produce_random(a.producer, setup.topic, setup.queues, PHASE1, max_body=64)
        consumed_on_a = consume(a.namesrv, setup.group, setup.queues, start_from_group=False)
        assert len(consumed_on_a) == PHASE1

        rc, out = setup.dr_done("failover", log="refused.log")  # A answers
        assert rc == 1, out
        last = [line for line in out.splitlines() if line.strip()][-1]
        assert last.startswith("refused: broker group ") and "answers: a failover is for a lost cluster" in last
        assert "--force" in last and setup.journal.load() is None  # refused before anything was recorded

        with setup.replicating(spark):
            wait_for(lambda: sum(tables.latest_offsets().values()) == PHASE1, 120, "phase 1 replicated")
            translate_once(spark, setup.config, setup.link, tmp_path, setup.group, timeout=120)
            phase2 = {i for r in produce_random(a.producer, setup.topic, setup.queues, PHASE2, seed=8, max_body=64)
                      for i in r.msg_ids}

            def seen_not_replicated() -> bool:
                record = read_source_maxes(link.tables_location)
                seen = 0 if record is None else sum(o.max_offset for o in record.queues.values())
                return seen == PHASE1 + PHASE2 and sum(tables.latest_offsets().values()) > PHASE1

            wait_for(seen_not_replicated, 120, "A's newest max offsets recorded, the link behind them")
            a.processes.stop()  # kill -9 of every process of A
            replicated_at_kill = sum(tables.latest_offsets().values())
            assert replicated_at_kill < PHASE1 + PHASE2, "the link caught up before A was killed: nothing to audit"

            rc, out = setup.dr_done("failover", "--dry-run", log="dry.log")
            assert rc == 0, out
            assert "dry run: nothing changed" in out and setup.journal.load() is None

            proc = setup.dr("failover", log="run1.log")
            try:
                wait_for(lambda: _running(setup, "stop"), 120, "the failover in its stop step", alive=proc)
            finally:
                proc.kill()  # kill -9 while it waits for the link's commits to settle
            assert setup.record().state is OperationState.RUNNING
            rc, out = setup.dr_done("failover", log="run2.log")  # docs/operations.md shows this output
        assert rc == 0, out
    finally:
        a.producer.close()
        a.admin.close()
        a.processes.stop()

    record = setup.record()
    assert record.state is OperationState.DONE
    assert {s.name: s.attempts for s in record.steps} == {
        "preflight": 1, "stop": 2, "adopt": 1, "audit": 1, "commit": 1, "report": 1}
    replicated = tables.latest_offsets()
    # nothing on B beyond the replicated point: what a batch sent without committing was adopted into it
    assert sum(dst.admin.max_offset(q) for q in dst.queues(setup.topic)) == sum(replicated.values())
    audit = record.step("report").result["audit"]
    assert sum(q["last_seen"] for q in audit["queues"]) == PHASE1 + PHASE2
    assert audit["missing"] == PHASE1 + PHASE2 - sum(replicated.values()) > 0
    assert {tuple(q["queue"]): q["replicated"] for q in audit["queues"]} == {
        (q.topic, q.broker_name, q.queue_id): o for q, o in replicated.items()}
    assert f"at least {audit['missing']} acknowledged message(s) of A are not on B" in out
    assert "acknowledged after its last observation are unknown" in out
    assert is_stopped(link.tables_location)

    # the group resumes on B after what it read on A: every replicated message of phase 2, none twice
    groups = record.step("commit").result["groups"][setup.group]
    assert all(e["b_offset"] is not None for e in groups if e["a_offset"] > 0)
    consumed_on_b = consume(dst.namesrv, setup.group, dst.queues(setup.topic), start_from_group=True)
    assert len(consumed_on_b) == len(set(consumed_on_b)) == sum(replicated.values()) - PHASE1
    assert set(consumed_on_b) <= phase2 and not set(consumed_on_b) & set(consumed_on_a)


def send_without_committing(setup: Setup, most: int) -> tuple[MessageQueue, int]:
    """Up to ``most`` messages of the link's most lagging source queue sent to B through the link's own sink,
    from its committed point, without committing them (what a batch that hangs on A's death leaves). Every
    send is checked against B's tail first, so a copy the stopped query left is not sent twice."""
    link = load_replicator_config(setup.config).link(setup.link)
    replicated = LinkTables.for_link(link).latest_offsets()
    ends = {q: setup.src.admin.max_offset(q) for q in setup.queues}
    queue = max(setup.queues, key=lambda q: (ends[q] - replicated.get(q, 0), queue_key(q)))
    start = replicated.get(queue, 0)
    end = min(ends[queue], start + most)
    assert end > start, "no source queue lags the link"
    reader = RocketMQStreamReader({"config": str(setup.config), "link": setup.link})
    writer = PartitionWriter(SinkOptions.from_options({"config": str(setup.config), "link": setup.link}))
    writer.check_all = True
    try:
        for raw in pull_range_raw(reader.settings, QueueRange(queue.topic, queue.broker_name, queue.queue_id,
                                                              start, end)):
            writer.add_pull(raw.records, queue.topic, queue.broker_name, queue.queue_id, setup.src.name,
                            setup.topic, start, end)
        result = writer.finish()
    finally:
        reader.stop()
    assert not result.failures
    return queue, end - start


def _running(setup: Setup, step: str) -> bool:
    record = setup.journal.load()
    return record is not None and record.step(step).state is StepState.RUNNING


def test_a_group_reading_ahead_of_a_lagging_link_fails_over_from_its_fresh_partial_checkpoint(
        spark: SparkSession, clusters: tuple[Cluster, Cluster], tmp_path: Path) -> None:
    """The group reads A to its end while the link lags behind it: every checkpoint after the first is partial
    (the group's queues translated up to the end of what crossed, not committed on B). A is killed while the
    link is still behind; the failover starts the group from its newest partial checkpoint, not from the old
    complete one: it is set to the end of the replicated data on B and reads nothing there twice (it read all
    of it on A, and nothing after its checkpoint: at most one checkpoint interval's worth may be re-read).
    Before A dies, messages of the most lagging queue reach B without being committed (a batch that hangs on
    A's death): the failover adopts them, and the group moves past them too."""
    _, dst = clusters
    a = _start_cluster("drP", tmp_path / "a", SRC_MAX_MESSAGE_SIZE)
    try:
        setup = Setup(a, dst, tmp_path, "DrPart")
        write_replicator_config(  # at most 40 messages per one-second trigger: the group outruns the link
            setup.config, source=(a.name, a.namesrv), target=(dst.name, dst.namesrv),
            links={setup.link: {"topic": setup.topic, "trigger_interval": 1, "max_messages_per_trigger": 40,
                                "checkpoints": {"interval": "1 second",
                                                "groups": {"explicit": [setup.group]}}}})
        link = load_replicator_config(setup.config).link(setup.link)
        tables, checkpoints = LinkTables.for_link(link), CheckpointTables(link.tables_location)
        produce_random(a.producer, setup.topic, setup.queues, PHASE1, max_body=64)
        assert len(consume(a.namesrv, setup.group, setup.queues, start_from_group=False)) == PHASE1

        with setup.replicating(spark):
            query = start_checkpoints(spark, setup.config, setup.link, tmp_path)
            try:
                wait_for(lambda: checkpoints.newest_translated_ms(setup.group) is not None, 120,
                         "a complete checkpoint of phase 1")
                produce_random(a.producer, setup.topic, setup.queues, PHASE2, seed=9, max_body=64)
                consumed = consume(a.namesrv, setup.group, setup.queues, start_from_group=True)
                assert len(consumed) == PHASE2  # the group is at A's end, the link far behind it

                def partial_at_the_end() -> bool:
                    rows = [r for r in checkpoints.read(CHECKPOINTS).to_pylist() if r["group"] == setup.group]
                    partial = [r["snapshot_at"] for r in rows if r["outcome"] == CheckpointOutcome.PARTIAL.value]
                    if not partial:
                        return False
                    at = [r for r in rows if r["snapshot_at"] == max(partial)]
                    return (sum(r["source_offset"] for r in at) == PHASE1 + PHASE2
                            and sum(tables.latest_offsets().values()) > PHASE1)

                wait_for(partial_at_the_end, 120, "a partial checkpoint of the group at A's end")
            finally:
                query.stop()
        # what a batch hung on A's death leaves: messages on B the link never committed (the stopped query may
        # have left some of its own too)
        hung, sent = send_without_committing(setup, HUNG)
        a.processes.stop()  # kill -9 of every process of A, the link still behind the group
        rows = checkpoints.read(CHECKPOINTS, columns=["group", "outcome", "snapshot_at"])
        partial_ms = newest_complete_snapshot_ms(rows, partial=True)
        complete_ms = checkpoints.newest_translated_ms(setup.group)  # of phase 1, before the group read on
        assert partial_ms is not None and complete_ms is not None and partial_ms > complete_ms
        assert sum(tables.latest_offsets().values()) < PHASE1 + PHASE2, "the link caught up: nothing to show"
        rc, out = setup.dr_done("failover", log="failover.log")
        assert rc == 0, out
    finally:
        a.producer.close()
        a.admin.close()
        a.processes.stop()

    record = setup.record()
    assert record.step("preflight").result["checkpoint_ms"] == {setup.group: partial_ms}
    adopted = {tuple(q["queue"]): q for q in record.step("adopt").result["queues"]}
    assert adopted[triple(hung)]["adopted"] >= sent and adopted[triple(hung)]["beyond_gap"] == 0
    assert "counted as replicated" in out
    assert record.step("commit").result["lowered"]  # the group's A offsets lay beyond the replicated end
    ends = {(q.topic, q.broker_name, q.queue_id): dst.admin.max_offset(q) for q in dst.queues(setup.topic)}
    moved: dict[tuple[str, str, int], int] = {}
    for e in record.step("commit").result["groups"][setup.group]:
        if e["b_queue"] is None:  # a source queue the group never read (nothing produced to it): unmapped
            assert e["a_offset"] == 0, e
            continue
        key = (e["b_queue"][0], e["b_queue"][1], int(e["b_queue"][2]))
        moved[key] = min(moved.get(key, e["b_offset"]), e["b_offset"])
    assert moved == {q: end for q, end in ends.items() if q in moved or end}  # the replicated end on B, per queue
    assert consume(dst.namesrv, setup.group, dst.queues(setup.topic), start_from_group=True) == []

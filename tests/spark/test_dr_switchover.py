"""``python -m jobs.dr switchover`` between the session's real clusters, with the link's replication query
running on the test session (``jobs.replicate.start_link``) and the command as its own process, as an operator
runs it: a switchover under load (every acknowledged send on B, the group continues on B with nothing missed
and nothing read twice), its refusals (lag over the gate; a group still online on A, then ``abort`` reopens
A), and kill -9 of the command while it waits in two different steps, after which the same command finishes
with every step done once (the fence's saved permissions are the original ones)."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from broker_store.client import MessageQueue, Producer, PullConsumer, PullStatus, StoredMessage, new_message
from broker_store.protocol.codes import PERM_READ, PERM_WRITE
from broker_store.protocol.errors import RocketMQError
from broker_store.protocol.topic import retry_topic
from connectors.core.config import load_replicator_config
from connectors.replication.tables import LinkTables
from jobs.dr.journal import FileJournal
from jobs.dr.operation import OperationRecord, OperationState, StepState
from jobs.replicate import start_link
from tests.spark.conftest import Cluster
from tests.spark.helpers import produce_random, unique
from tests.spark.spark_processes import PROJECT_ROOT, TaggedProcess, spark_env, wait_for, write_replicator_config
from tests.spark.test_checkpoint_failover import consume

pytestmark = pytest.mark.integration


class Setup:
    """One test's topic (same name on both clusters), group (offsets on A, subscription group on B) and link."""

    def __init__(self, src: Cluster, dst: Cluster, work: Path, prefix: str) -> None:
        self.src, self.dst, self.work = src, dst, work
        self.topic, self.group, self.link = unique(prefix), unique(f"{prefix}App"), unique(f"{prefix}Link")
        src.create_topic(self.topic, 4)
        dst.create_topic(self.topic, 4)
        dst.admin.create_subscription_group({"groupName": self.group}, cluster=dst.name)
        # the group's retry topic travels with it (a consumer's heartbeat creates it on A): on B as config sync
        # would create it, so the switchover's preflight finds every mapped topic there
        dst.create_topic(retry_topic(self.group), 1)
        self.queues = src.queues(self.topic)
        self.config = write_replicator_config(
            work / "replicator.yaml", source=(src.name, src.namesrv), target=(dst.name, dst.namesrv),
            links={self.link: {"topic": self.topic, "trigger_interval": 1,
                               "checkpoints": {"groups": {"explicit": [self.group]}}}})
        self.journal = FileJournal(load_replicator_config(self.config).link(self.link).tables_location)

    def dr(self, command: str, *args: str, log: str = "dr.log") -> TaggedProcess:
        argv = [sys.executable, "-m", "jobs.dr", command, "--link", self.link, "--config", str(self.config), *args]
        return TaggedProcess(argv, self.work / log, spark_env(), cwd=PROJECT_ROOT)

    def dr_done(self, command: str, *args: str, log: str = "dr.log", timeout: float = 180) -> tuple[int, str]:
        proc = self.dr(command, *args, log=log)
        try:
            rc = proc.wait(timeout)
        finally:
            proc.kill()
        return rc, proc.log()

    def record(self) -> OperationRecord:
        record = self.journal.load()
        assert record is not None
        return record

    def perms_on_a(self) -> set[int]:
        return {self.src.admin.all_topic_config(addr)[self.topic].perm
                for addr in self.src.admin.primary_addrs(self.src.name).values()}

    @contextmanager
    def replicating(self, spark: SparkSession) -> Iterator[None]:
        query = start_link(spark, str(self.config), load_replicator_config(self.config), self.link)
        try:
            yield
        finally:
            query.stop()


def assert_moved_exactly(setup: Setup, consumed_on_a: list[str], produced: set[str]) -> None:
    """The group's consumer moved to B reads exactly what it had not read on A."""
    consumed_on_b = consume(setup.dst.namesrv, setup.group, setup.dst.queues(setup.topic), start_from_group=True)
    assert len(consumed_on_a) + len(consumed_on_b) == len(set(consumed_on_a) | set(consumed_on_b))  # none twice
    assert set(consumed_on_a) | set(consumed_on_b) == produced  # none missed


def test_switchover_under_load_moves_every_acknowledged_message_and_the_group_exactly(
        spark: SparkSession, clusters: tuple[Cluster, Cluster], tmp_path: Path) -> None:
    src, dst = clusters
    setup = Setup(src, dst, tmp_path, "DrMove")
    ids = [i for r in produce_random(src.producer, setup.topic, setup.queues, 300, max_body=64) for i in r.msg_ids]
    consumed_on_a = consume(src.namesrv, setup.group, setup.queues, {q: 20 + i for i, q in enumerate(setup.queues)},
                            start_from_group=False)
    acked: list[str] = []
    stop = threading.Event()

    def load() -> None:  # a producer on A until the fence refuses it
        with Producer(src.namesrv, retry_times_when_send_failed=0) as producer:
            i = 0
            while not stop.is_set():
                try:
                    acked.append(producer.send(new_message(setup.topic, f"live {i}".encode())).msg_id)
                except RocketMQError:
                    return
                i += 1

    with setup.replicating(spark):
        thread = threading.Thread(target=load, daemon=True)
        thread.start()
        wait_for(lambda: len(acked) >= 50, 30, "the live producer's first sends")
        rc, out = setup.dr_done("switchover", "--json", "--max-lag", "100000")
        stop.set()
        thread.join(10)
    assert rc == 0, out
    document: dict[str, Any] = json.loads(out[out.index("{"):])
    assert document["state"] == "done"
    report = document["steps"][-1]["result"]
    assert report["queues"] and all(q["missing"] == 0 and q["on_a"] == q["replicated"] for q in report["queues"])
    assert sum(q["on_a"] for q in report["queues"]) == 300 + len(acked)
    assert "name server address" in report["operator"]
    group_rows = report["groups"][setup.group]
    assert {tuple(r["source"]) for r in group_rows} == {(q.topic, q.broker_name, q.queue_id) for q in setup.queues}
    for row in group_rows:
        assert row["b_offset"] == row["a_offset"] and row["exact"]  # same topic, same queues: identity here
    assert setup.perms_on_a() == {PERM_READ}
    with pytest.raises(RocketMQError):
        src.producer.send(new_message(setup.topic, b"after the fence"), MessageQueue(setup.topic,
                                                                                       setup.queues[0].broker_name, 0))
    assert_moved_exactly(setup, consumed_on_a, set(ids) | set(acked))
    # a finished switchover is not undone: producers may already write to B
    rc, out = setup.dr_done("abort", log="abort.log")
    assert rc == 1 and "is done: nothing to abort" in out
    assert setup.perms_on_a() == {PERM_READ}


def test_switchover_refuses_over_the_lag_gate_and_while_a_group_is_online_and_abort_reopens_a(
        spark: SparkSession, clusters: tuple[Cluster, Cluster], tmp_path: Path) -> None:
    src, dst = clusters
    setup = Setup(src, dst, tmp_path, "DrRefuse")
    produce_random(src.producer, setup.topic, setup.queues, 40, max_body=64)
    consume(src.namesrv, setup.group, setup.queues, {q: 3 for q in setup.queues}, start_from_group=False)
    rc, out = setup.dr_done("switchover", "--max-lag", "10", log="lag.log")  # the link has not run yet
    assert rc == 1
    lines = [line for line in out.splitlines() if line.strip()]
    assert lines[-1].startswith("refused: replication lag 40 message(s) is over the gate 10"), out
    assert "raise --max-lag" in lines[-1]
    assert setup.record().step("preflight").state is StepState.FAILED
    assert setup.perms_on_a() == {PERM_READ | PERM_WRITE}
    rc, out = setup.dr_done("status", "--json", log="status.log")
    assert rc == 0, out
    status = json.loads(out[out.index("{"):])
    assert status["rpo_messages"] == 40 and status["topics"][0]["lag"] == 40
    assert status["checkpoint_age_s"] == {setup.group: None}
    assert status["topics_missing_on_b"] == [] and status["groups_missing_on_b"] == []

    with setup.replicating(spark), PullConsumer(src.namesrv, setup.group, heartbeat_interval=1.0) as live:
        live.pull(setup.queues[0], 0, 1)
        live.heartbeat()
        rc, out = setup.dr_done("switchover", "--groups-timeout", "2", log="online.log")
    assert rc == 1
    assert f"group(s) still online on {src.name} after 2 s: {setup.group} (1 consumer(s)" in out.splitlines()[-1]
    record = setup.record()
    assert [s.state for s in record.steps[:4]] == [StepState.DONE, StepState.DONE, StepState.DONE, StepState.FAILED]
    assert setup.perms_on_a() == {PERM_READ}

    rc, out = setup.dr_done("abort", log="abort.log")
    assert rc == 0, out
    assert setup.record().state is OperationState.ABORTED
    assert setup.perms_on_a() == {PERM_READ | PERM_WRITE}
    src.admin.wait_for_route(setup.topic, timeout=15, min_queues=len(setup.queues))
    src.producer.send(new_message(setup.topic, b"A takes writes again"))


def test_kill_9_of_the_command_in_two_steps_then_the_same_command_finishes_each_step_once(
        spark: SparkSession, clusters: tuple[Cluster, Cluster], tmp_path: Path) -> None:
    src, dst = clusters
    setup = Setup(src, dst, tmp_path, "DrKill")
    ids = [i for r in produce_random(src.producer, setup.topic, setup.queues, 120, max_body=64) for i in r.msg_ids]
    consumed_on_a = consume(src.namesrv, setup.group, setup.queues, {q: 7 for q in setup.queues},
                            start_from_group=False)

    def running(step: str) -> bool:
        record = setup.journal.load()
        return record is not None and record.step(step).state is StepState.RUNNING

    # 1. the link is stopped: the command fences A, then waits in drain; kill -9 it there
    proc = setup.dr("switchover", "--max-lag", "1000", log="run1.log")
    try:
        wait_for(lambda: running("drain"), 60, "the switchover waiting in drain")
    finally:
        proc.kill()
    assert setup.perms_on_a() == {PERM_READ}
    with PullConsumer(src.namesrv, setup.group, heartbeat_interval=1.0) as live:
        live.pull(setup.queues[0], 0, 1)
        live.heartbeat()
        with setup.replicating(spark):
            # 2. the link runs, a consumer of the group is online on A: it drains, then waits in groups
            proc = setup.dr("switchover", log="run2.log")
            try:
                wait_for(lambda: running("groups"), 120, "the switchover waiting in groups")
            finally:
                proc.kill()
    # 3. the consumer left A: the same command finishes
    rc, out = setup.dr_done("switchover", log="run3.log")  # docs/operations.md shows this output
    assert rc == 0, out
    assert f"switchover {setup.record().id} of link {setup.link}: done" in out
    assert "change their name server address" in out
    record = setup.record()
    assert record.state is OperationState.DONE
    assert {s.name: s.attempts for s in record.steps} == {
        "preflight": 1, "fence": 1, "drain": 2, "groups": 2, "commit": 1, "report": 1}
    fence = record.step("fence").result
    assert set(fence["old_perms"]) == {q.broker_name for q in setup.queues}
    assert all(perms == {setup.topic: PERM_READ | PERM_WRITE} for perms in fence["old_perms"].values())
    assert all("forbidden" in text or "no writable queue" in text for text in fence["probes"].values()), fence
    assert_moved_exactly(setup, consumed_on_a, set(ids))


def messages_with(namesrv: str, queues: list[MessageQueue], msg_id: str) -> list[StoredMessage]:
    """Every message of ``queues`` whose UNIQ_KEY is ``msg_id`` (read from offset 0, no group offset moved)."""
    found: list[StoredMessage] = []
    with PullConsumer(namesrv, unique("DrDelayReader"), heartbeat_interval=None) as consumer:
        for mq in queues:
            offset = 0
            while (result := consumer.pull(mq, offset, 32)).status is PullStatus.FOUND:
                found.extend(m for m in result.messages if m.msg_id == msg_id)
                offset = result.next_begin_offset
    return found


def test_a_delayed_message_waiting_on_a_through_a_switchover_reaches_b_once_not_before_its_due_time(
        spark: SparkSession, clusters: tuple[Cluster, Cluster], tmp_path: Path) -> None:
    """A's schedule service delivers it into its fenced topic when due, the forward link copies that to B; the
    switchover's report names it as waiting and tells the operator to keep the link's job running."""
    src, dst = clusters
    setup = Setup(src, dst, tmp_path, "DrDelay")
    produce_random(src.producer, setup.topic, setup.queues, 20, max_body=64)
    consume(src.namesrv, setup.group, setup.queues, {q: 2 for q in setup.queues}, start_from_group=False)
    tables = LinkTables.for_link(load_replicator_config(setup.config).link(setup.link))

    def caught_up() -> bool:
        replicated = tables.latest_offsets()
        return all(replicated.get(q, 0) >= src.admin.max_offset(q) for q in setup.queues)

    with setup.replicating(spark):
        before_ms = int(time.time() * 1000)  # the message's born time is later (one clock on this machine)
        sent = src.producer.send(new_message(setup.topic, b"due in 30 s", properties={"DELAY": "4"}))  # level 4: 30 s
        rc, out = setup.dr_done("switchover", "--max-lag", "100000")
        assert rc == 0, out
        delayed = setup.record().step("report").result["delayed"]
        assert delayed["waiting"] >= 1, out  # read after the fence: the message was still waiting then
        assert any(w["level"] == 4 and w["broker"] == sent.message_queue.broker_name for w in delayed["levels"])
        lines = [line for line in out.splitlines() if line.strip()]
        assert lines[-1].startswith(f"{delayed['waiting']} delayed message(s) wait on A"), out
        assert f"keep the job of link {setup.link} running until" in lines[-1]
        assert delayed["latest_due_ms"] >= before_ms + 30_000  # never earlier than its due time
        assert setup.perms_on_a() == {PERM_READ}
        rc, out = setup.dr_done("status", "--json", log="status.log")
        assert rc == 0, out
        status = json.loads(out[out.index("{"):])["delayed_waiting"]
        assert status["read_at_ms"] >= delayed["read_at_ms"] and status["waiting"] <= delayed["waiting"] + 1
        wait_for(lambda: bool(messages_with(dst.namesrv, dst.queues(setup.topic), sent.msg_id)), 120,
                 "the delayed message on B")
        on_a = messages_with(src.namesrv, setup.queues, sent.msg_id)
        wait_for(caught_up, 60, "the link caught up with A")
    assert setup.perms_on_a() == {PERM_READ}  # the fence held while A delivered it
    (delivered_on_a,) = on_a
    (on_b,) = messages_with(dst.namesrv, dst.queues(setup.topic), sent.msg_id)
    assert on_b.body == b"due in 30 s" and "DELAY" not in on_b.properties
    assert delivered_on_a.store_timestamp >= delivered_on_a.born_timestamp + 30_000  # A delivered it when due
    # so B stores it no earlier (one clock on this machine; B's copy is born at the link's send)
    assert on_b.store_timestamp >= delivered_on_a.store_timestamp

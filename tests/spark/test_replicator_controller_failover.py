"""The replicator through controller-mode failovers (docs/brokers.md, "Controller mode"): ``spark-submit
jobs/run_all.py`` (replication, heartbeat, checkpoints, config sync) runs while the source's primary and then the
target's primary are killed with SIGKILL, under a steady load.

Both clusters are this module's own (``LocalCluster(controller=...)``): one broker group of three members
in controller mode each, the controller embedded in the name server (2 s heartbeat timeout), SYNC_MASTER
with ``in_sync_replicas`` 2 of 3, so every acknowledged send is on two members and survives the kill. What
must hold at the end:

* every message the test producer had acknowledged by the source is on the target, byte-exact (body and
  user properties, keys included);
* copies beyond the source's own count exist only from re-sent batches: per source queue they form runs
  of consecutive source offsets (a batch whose acknowledgement the dead primary never sent is sent again
  to the new one), and their number is printed;
* a source queue keeps its identity (topic, broker name, queue id) across the failover: the target holds
  each queue's messages in the same target queue, whatever address or broker id served it;
* config sync proposes nothing (the changed broker set is no deletion), heartbeats keep arriving, and the
  checkpoint connector translates a position the group committed after both failovers.
"""

from __future__ import annotations

import os
import signal
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest
from deltalake import DeltaTable

from broker_store.client import Admin, MessageQueue, Producer
from connectors.checkpoint.tables import CHECKPOINTS, TRANSLATED_OUTCOMES, CheckpointTables
from tests.spark.helpers import produce_random, unique
from tests.spark.spark_processes import (
    BackgroundProducer,
    compare,
    python_driver_pid,
    read_topic,
    submit_job,
    wait_for,
    write_replicator_config,
)
from tests.spark.test_checkpoint_failover import consume
from tests.support.processes import Broker, LocalCluster

pytestmark = pytest.mark.integration

HA = {"total_replicas": 3, "in_sync_replicas": 2, "min_in_sync_replicas": 2}
"""Every acknowledged send is on two members of three: a kill -9 of the primary loses none of them."""
RATE, BATCH = 100.0, 10
"""The load while the primaries die: messages per second, messages per send."""


@pytest.fixture(scope="module")
def controlled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalCluster, LocalCluster]]:
    root = tmp_path_factory.mktemp("controller-failover")
    with LocalCluster(root, "csrc", brokers=1, replicas=3, controller={}, ha=HA) as src, \
            LocalCluster(root, "cdst", brokers=1, replicas=3, controller={}, ha=HA) as dst:
        yield src, dst


def _queues(namesrv: str, topic: str) -> list[MessageQueue]:
    with Admin(namesrv) as admin:
        route = admin.wait_for_route(topic, timeout=15)
    return sorted(MessageQueue(topic, q.broker_name, i) for q in route.queue_datas for i in range(q.read_queue_nums))


def _count(namesrv: str, topic: str) -> int:
    try:
        with Admin(namesrv) as admin:
            return sum(admin.max_offset(mq) for mq in _queues(namesrv, topic))
    except Exception:  # noqa: BLE001 - no route yet, or a primary being replaced: not there yet
        return 0


def _kill_primary(cluster: LocalCluster, group: str) -> tuple[Broker, Broker, float]:
    """SIGKILL the group's primary; wait until the name server lists another member as primary. Returns
    (killed, new primary, seconds from the kill to the new primary's registration)."""
    old = cluster.primary(group)
    old.kill()
    killed = time.monotonic()
    found: list[Broker] = []

    def elected() -> bool:
        new = cluster.listed_primary(group)
        if new is not None and new is not old:
            found.append(new)
        return bool(found)
    wait_for(elected, 30, f"a new primary of {group} after kill -9 of {old.name}", interval=0.05)
    return old, found[0], time.monotonic() - killed


def _first_ack_after(producer: BackgroundProducer, moment: float, timeout: float = 30) -> float:
    """Seconds from ``moment`` to the producer's first acknowledged send after it."""
    wait_for(lambda: any(t > moment for t in producer.acked_at), timeout, "a send acknowledged after the kill")
    return min(t for t in producer.acked_at if t > moment) - moment


def _runs(offsets: list[int]) -> list[tuple[int, int]]:
    """Sorted offsets as runs of consecutive ones, (first, last) each."""
    runs: list[tuple[int, int]] = []
    for offset in sorted(offsets):
        if runs and offset == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], offset)
        else:
            runs.append((offset, offset))
    return runs


def test_run_all_keeps_replicating_through_source_and_target_primary_failovers(
        controlled: tuple[LocalCluster, LocalCluster], tmp_path: Path) -> None:
    src, dst = controlled
    topic, group = unique("Failover"), unique("GID_failover")
    with Admin(src.namesrv_addr) as admin:
        admin.create_topic(topic, 4, cluster="csrc")
        admin.wait_for_route(topic, timeout=15)
    queues = _queues(src.namesrv_addr, topic)
    with Producer(src.namesrv_addr, "PID_before") as producer:
        produce_random(producer, topic, queues, 200, max_body=64, batch=BATCH, seed=1)
    consume(src.namesrv_addr, group, queues, dict.fromkeys(queues, 20), start_from_group=False)
    config = write_replicator_config(
        tmp_path / "replicator.yaml", source=("csrc", src.namesrv_addr), target=("cdst", dst.namesrv_addr),
        heartbeat={"interval": 1.0},
        links={"l1": {"topic": topic, "trigger_interval": 1.0, "checkpoints": {"interval": 1.0},
                      "config_sync": {"interval": 1.0}, "retry_backoff_ms": 100, "retry_backoff_max_ms": 500}})
    job = submit_job("run_all.py", config, tmp_path / "console.log", job_log4j=True)
    delta = tmp_path / "delta" / "l1"
    load = BackgroundProducer(src.namesrv_addr, topic, queues, 10**9, rate=RATE, seed=2, max_body=256, batch=BATCH,
                              tolerate_failures=True, send_timeout=3)
    try:
        wait_for(lambda: _count(dst.namesrv_addr, topic) >= 200, 120, "the first 200 messages on the target",
                 alive=job)
        load.start()
        time.sleep(3)
        # -- the source's primary dies under the load ---------------------------------------------------
        killed_src, new_src, elected_src = _kill_primary(src, "csrc-a")
        moment = time.monotonic() - elected_src
        took_src = _first_ack_after(load, moment)
        time.sleep(4)
        # -- then the target's: the replication's sends must find the new primary -----------------------
        hb_before = _heartbeats(delta)
        killed_dst, new_dst, elected_dst = _kill_primary(dst, "cdst-a")
        second_kill_ms = int(time.time() * 1000)
        time.sleep(4)
        load.stop()
        produced = load.join(30)
        # -- the group moves on the (new) source primary; the checkpoint must translate that position ------
        consume(src.namesrv_addr, group, queues, dict.fromkeys(queues, 10), start_from_group=True)
        committed_ms = int(time.time() * 1000)
        acked = {p.uniq_key for p in produced}
        wait_for(lambda: _count(dst.namesrv_addr, topic) >= 200 + len(acked), 90,
                 "every acknowledged message on the target", alive=job)
        tables = CheckpointTables(delta)
        wait_for(lambda: (tables.newest_translated_ms(group) or 0) > committed_ms, 60,
                 "a checkpoint of the group translated after both failovers", alive=job)
        wait_for(lambda: _heartbeats(delta) >= hb_before + 3, 30, "heartbeats after the target's failover",
                 alive=job)
        source = read_topic(src.namesrv_addr, queues)
        target = read_topic(dst.namesrv_addr, _queues(dst.namesrv_addr, topic))
        os.kill(python_driver_pid(job, "run_all.py"), signal.SIGTERM)
        rc = job.wait(120)
    finally:
        load.stop()
        job.kill()
    console = job.log()
    assert rc == 0, console[-6000:]

    result = compare(produced, target)
    assert result.missing == [] and result.mismatched == [], (result.missing[:10], result.mismatched[:10])
    # copies beyond the source's: only whole re-sent batches, i.e. runs of consecutive source offsets
    on_source = Counter(m.msg_id for msgs in source.values() for m in msgs)
    where = {m.msg_id: (mq, m.queue_offset) for mq, msgs in source.items() for m in msgs}
    on_target = Counter(m.msg_id for msgs in target.values() for m in msgs)
    assert set(on_target) == set(on_source), "the target holds exactly the source's messages"
    extra = {k: n - on_source[k] for k, n in on_target.items() if n > on_source[k]}
    by_queue: dict[MessageQueue, list[int]] = defaultdict(list)
    for key in extra:
        by_queue[where[key][0]].append(where[key][1])
    resent_runs = {mq: _runs(offsets) for mq, offsets in by_queue.items()}
    # queue identity: each source queue's messages are in the target queue of the same id
    placed: dict[MessageQueue, set[int]] = defaultdict(set)
    for target_queue, messages in target.items():
        for m in messages:
            placed[where[m.msg_id][0]].add(target_queue.queue_id)
    assert placed == {mq: {mq.queue_id} for mq, messages in source.items() if messages}, placed
    changes = delta / "config_changes"
    rows = DeltaTable(str(changes)).to_pyarrow_table().to_pylist() if (changes / "_delta_log").exists() else []
    # nothing deleted, nothing refused or failed; a config-sync round that read the source while its group had no
    # primary (the second or so between the old primary leaving the name server and the new one registering)
    # defers its names as unknown and clears them at the next round: deferred/cleared rows, never a deletion
    # the same on the target's side: a round during the target's failover sees its group without a primary and
    # defers a creation there ("the topic may be there"), cleared at the next round
    transient = {"source_topic_unknown", "source_group_unknown"}
    def expected(r: dict[str, object]) -> bool:
        if str(r["kind"]).startswith("delete"):
            return False
        if r["status"] not in ("deferred", "cleared"):
            return r["status"] == "applied"
        return r["kind"] in transient or (str(r["kind"]).startswith("create") and "no primary" in str(r["detail"]))
    assert [r for r in rows if not expected(r)] == [], rows
    # while the target had no primary a checkpoint is a target_error (retried at the next one); every checkpoint
    # of the position the group committed after both failovers translates
    after_kill = [(r["snapshot_at"].timestamp() * 1000, r["outcome"], r["detail"])
                  for r in tables.read(CHECKPOINTS).to_pylist()
                  if r["group"] == group and r["snapshot_at"].timestamp() * 1000 > second_kill_ms]
    latest = [(at, outcome, detail) for at, outcome, detail in after_kill if at > committed_ms]
    assert latest and all(outcome in TRANSLATED_OUTCOMES for _, outcome, _ in latest), latest
    target_errors = sorted({at for at, outcome, _ in after_kill if outcome == "target_error"})
    print(f"\nsource failover: {killed_src.name} -> {new_src.name} listed after {elected_src:.2f} s, first send "
          f"acknowledged {took_src:.2f} s after the kill; target failover: {killed_dst.name} -> {new_dst.name} "
          f"after {elected_dst:.2f} s, {len(target_errors)} checkpoint(s) with target errors after it, the last "
          f"{(max(target_errors, default=second_kill_ms) - second_kill_ms) / 1000:.1f} s after the kill")
    print(f"acknowledged {len(acked)} (+200 before), {load.failed} batches not acknowledged, 0 missing, "
          f"{sum(extra.values())} duplicates from re-sent batches: "
          f"{ {mq.queue_id: runs for mq, runs in resent_runs.items()} }")
    assert all(last - first + 1 <= 1024 for runs in resent_runs.values() for first, last in runs)


def _heartbeats(delta: Path) -> int:
    table = delta / "heartbeats"
    if not (table / "_delta_log").exists():
        return 0
    rows: int = DeltaTable(str(table)).to_pyarrow_table(columns=["seq"]).num_rows  # pyarrow: untyped
    return rows

"""Fault tolerance and distribution of the replication job, with real processes on loopback.

* the spark-submit driver is SIGKILLed (whole process tree) three times mid-stream and restarted from
  its checkpoint while a producer keeps writing: nothing is lost and nothing is on the target twice (the
  re-run batches check the target first: connectors.replication.resend_check);
* every target broker is SIGKILLed for 15 s under a running job: the sink blocks and retries, the job
  survives and catches up; messages the target *refuses* still go through the failure policy
  (dismiss and custom, one link each);
* the job on a Spark standalone master + worker (executors in their own processes) gives the same
  result as local mode, and nothing listens on a non-loopback address;
* 100k random messages replicate byte-exact, queue-preserving, with a right offset map.

Every process a test starts is killed in a ``finally`` (spark-submit trees by their environment tag,
see ``spark_processes``). Durations are printed (``pytest -s``) and asserted loosely.
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from broker_store.client import Admin, MessageQueue, StoredMessage
from connectors.replication.tables import LinkTables
from tests.spark.conftest import Cluster
from tests.spark.helpers import produce_random, run_job_links, run_link, unique
from tests.spark.spark_processes import (
    BackgroundProducer,
    Produced,
    StandaloneCluster,
    TaggedProcess,
    committed_batches,
    compare,
    in_flight_ranges,
    listening_addresses,
    non_loopback,
    read_topic,
    submit_replicate,
    wait_for,
    write_replicator_config,
)
from tests.support.processes import LocalCluster

pytestmark = pytest.mark.integration

IGNORED = {"CLUSTER", "ROCKETMQ_REPLICATOR_SOURCE", "ROCKETMQ_REPLICATOR_POSITION"}
OUTAGE_SECONDS = 15
"""How long every target broker stays down in the outage test."""


def _caught_up(tables: LinkTables, admin: Admin, queues: Sequence[MessageQueue]) -> bool:
    latest = tables.latest_offsets()
    return all(latest.get(mq) == admin.max_offset(mq) for mq in queues)


def _assert_offset_map(tables: LinkTables, by_source: Mapping[tuple[str, int, int], str],
                       target: Mapping[MessageQueue, list[StoredMessage]]) -> int:
    """Every offset_map row maps a source range onto target offsets holding the same messages (by
    UNIQ_KEY). ``by_source``: (broker, queue id, offset) -> UNIQ_KEY. Returns the messages mapped."""
    at = {(mq.broker_name, mq.queue_id): {m.queue_offset: m for m in msgs} for mq, msgs in target.items()}
    mapped = 0
    for row in tables.read("offset_map").to_pylist():
        n = row["messages"]
        assert row["source_last_offset"] - row["source_first_offset"] + 1 == n, row
        assert row["target_last_offset"] - row["target_first_offset"] + 1 == n, row
        assert row["source_queue_id"] == row["target_queue_id"], row
        stored = at[(row["target_broker"], row["target_queue_id"])]
        for k in range(n):
            source_id = by_source[(row["source_broker"], row["source_queue_id"], row["source_first_offset"] + k)]
            assert stored[row["target_first_offset"] + k].msg_id == source_id, row
        mapped += n
    return mapped


def _source_ids(sent: Sequence[Produced]) -> dict[tuple[str, int, int], str]:
    return {(p.queue.broker_name, p.queue.queue_id, p.offset): p.uniq_key for p in sent}


def _assert_same_queue(sent: Sequence[Produced], target: Mapping[MessageQueue, list[StoredMessage]]) -> None:
    """Queue preservation: each copy sits in the target queue of the same position as its source queue."""
    where = {p.uniq_key: p.queue for p in sent}
    for mq, msgs in target.items():
        for m in msgs:
            source = where.get(m.msg_id)
            if source is not None:
                assert (source.broker_name[-1], source.queue_id) == (mq.broker_name[-1], mq.queue_id), (m.msg_id, mq)


def test_driver_killed_three_times_mid_stream(spark: SparkSession, clusters: tuple[Cluster, Cluster],
                                              tmp_path: Path) -> None:
    """spark-submit driver SIGKILLed (process group + every process it spawned) at three random moments
    while batches run and a producer writes; restarted each time from the same checkpoint (the last time as
    an available-now run of the job's query on the test session, which must finish the topic)."""
    started = time.monotonic()
    src, dst = clusters
    topic = unique("Kill")
    src.create_topic(topic, 4)
    dst.create_topic(topic, 4)
    max_per_trigger = 2000
    config = write_replicator_config(
        tmp_path / "replicator.yaml", source=("src", src.namesrv), target=("dst", dst.namesrv),
        links={"kill": {"topic": topic, "trigger_interval": "200 milliseconds", "retry_backoff_ms": 50,
                        "max_messages_per_trigger": max_per_trigger}})
    checkpoint = tmp_path / "checkpoints" / "kill"
    rng = random.Random(20261121)
    # ends after the third kill (``stop`` below) or at its total (80 s), whichever comes first
    producer = BackgroundProducer(src.namesrv, topic, src.queues(topic), 20_000, rate=250, seed=11).start()
    jobs: list[TaggedProcess] = []
    in_flight: list[dict[MessageQueue, tuple[int, int]]] = []
    try:
        for kill in range(3):
            job = submit_replicate(config, ["kill"], tmp_path / f"driver-{kill}.log")
            jobs.append(job)
            before = len(committed_batches(checkpoint))

            def committed_another(before: int = before) -> bool:
                return len(committed_batches(checkpoint)) > before

            wait_for(committed_another, 180, f"run {kill}: a batch committed", alive=job)
            time.sleep(rng.uniform(0.1, 2.0))
            job.kill()
            ranges = in_flight_ranges(checkpoint)
            in_flight.append(ranges)
            print(f"kill {kill + 1}: {len(committed_batches(checkpoint))} batches committed, "
                  f"{sum(e - s for s, e in ranges.values())} messages in flight")
        # The load has run through the kills; the rest of its total only made the test wait (the three kills
        # take ~60 s on CI, the 20,000 messages 80 s).
        producer.stop()
        sent = producer.join(180)
        # The last restart, from the third kill's checkpoint, runs the job's own query (jobs.replicate.start_link)
        # on the test session: a fourth spark-submit start-up only made the test wait (each killed driver was
        # already restarted from the checkpoint by a spark-submit).
        run_job_links(spark, config, ["kill"])
    finally:
        for job in jobs:
            job.kill()
    assert all(not job.pids() for job in jobs)
    target = read_topic(dst.namesrv, dst.queues(topic))
    result = compare(sent, target)
    assert not result.missing, f"{len(result.missing)} messages missing, e.g. {result.missing[:5]}"
    assert not result.mismatched and not result.unexpected
    # the batches running when the driver died were re-run and sent nothing twice
    bound = sum(hi - lo for ranges in in_flight for lo, hi in ranges.values())
    assert result.duplicate_count == 0, f"{result.duplicate_count} duplicates, e.g. {list(result.duplicates)[:5]}"
    tables = LinkTables(tmp_path / "delta" / "kill", source_cluster="src")
    with Admin(src.namesrv) as admin:
        assert _caught_up(tables, admin, src.queues(topic))
    assert _assert_offset_map(tables, _source_ids(sent), target) == len(sent)
    avoided = sum(r["duplicates_avoided"] or 0 for r in tables.read("metrics").to_pylist())
    print(f"driver kill test: {len(sent)} messages, {result.duplicate_count} duplicates "
          f"(re-run batches held {bound}, {avoided} found on the target and not sent again), "
          f"{time.monotonic() - started:.1f}s")
    assert bound <= 3 * max_per_trigger


@pytest.fixture
def outage_target(tmp_path: Path) -> Iterator[LocalCluster]:
    """A target cluster of its own (fixed ports, so restarted brokers come back at the same address)
    that refuses bodies over 64 KiB."""
    with LocalCluster(tmp_path, "out", brokers=2, max_message_size=64 * 1024) as cluster:
        yield cluster


def test_target_outage_blocks_and_retries(clusters: tuple[Cluster, Cluster], outage_target: LocalCluster,
                                          tmp_path: Path) -> None:
    """Every target broker SIGKILLed for 15 s while the job runs and the producers write. The sink
    blocks and retries (not counted against max_retries, nothing recorded as failed); the job does not
    fail and catches up. Messages the target refuses (too big) go through each link's failure policy:
    dismiss on one link, a custom hook that dismisses on the other."""
    started = time.monotonic()
    src, _ = clusters
    target = outage_target
    topics = {"dismiss": unique("OutDismiss"), "custom": unique("OutCustom")}
    hook_log = tmp_path / "hook.log"
    with Admin(target.namesrv_addr) as admin:
        for topic in topics.values():
            src.create_topic(topic, 4)
            admin.create_topic(topic, 4, 6, cluster="out")
            admin.wait_for_route(topic, timeout=15)
    common = {"trigger_interval": "300 milliseconds", "max_messages_per_trigger": 1000, "max_retries": 2,
              "retry_backoff_ms": 100, "retry_backoff_max_ms": 1000}
    config = write_replicator_config(
        tmp_path / "replicator.yaml", source=("src", src.namesrv), target=("out", target.namesrv_addr),
        links={"dismiss": {"topic": topics["dismiss"], **common},
               "custom": {"topic": topics["custom"], "failure_policy": "custom",
                          "failure_hook": "tests.spark.hooks:dismiss_all", **common}})
    oversize = {150: 100_000, 3500: 200_000}  # before and during the outage; the target takes <= 64 KiB
    # 30 s of load at 150 msg/s: from before the job starts (its first batches take ~20 s) into the outage
    producers = {link: BackgroundProducer(src.namesrv, topic, src.queues(topic), 4500, rate=150, seed=seed,
                                          oversize=oversize).start()
                 for seed, (link, topic) in enumerate(topics.items())}
    tables = {link: LinkTables(tmp_path / "delta" / link, source_cluster="src") for link in topics}
    job = submit_replicate(config, list(topics), tmp_path / "driver.log", env={"RMQ_TEST_HOOK_LOG": str(hook_log)})
    try:
        for link in topics:
            def committed_one(link: str = link) -> bool:
                return tables[link].latest_offsets() != {}

            wait_for(committed_one, 180, f"{link}: first batch", alive=job)
        down_at = time.monotonic()
        for broker in target.brokers:
            broker.kill()
        # Long enough for the name server to drop the brokers from the routes (3 s) and for the blocked batch to
        # stand out from any retry schedule (max_retries 2 at a 100-1000 ms backoff gives up within ~2 s); the
        # 30 s it used to be only made the test longer.
        time.sleep(OUTAGE_SECONDS)
        with ThreadPoolExecutor(len(target.brokers)) as pool:  # together, as after a power cut
            list(pool.map(lambda broker: broker.start(), target.brokers))
        print(f"target down for {time.monotonic() - down_at:.1f}s")
        sent = {link: p.join(120) for link, p in producers.items()}
        with Admin(src.namesrv) as admin:
            for link, topic in topics.items():
                def caught_up(link: str = link, topic: str = topic) -> bool:
                    return _caught_up(tables[link], admin, src.queues(topic))

                wait_for(caught_up, 180, f"{link}: caught up", alive=job)
        assert job.alive(), "the job died during the outage"
        log = job.log()
    finally:
        job.kill()
    assert "terminated with an error" not in log and "TargetUnavailableError" not in log
    assert re.search(r"target cluster \S+ \(namesrv [^)]*\) unavailable while sending", log), (
        "no retry while the target was down was logged")
    retries = [int(n) for n in re.findall(r"(\d+) retries while the target was unavailable", log)]
    assert sum(retries) > 0, "no batch reported retries while the target was down"
    for link, topic in topics.items():
        queues = [MessageQueue(topic, b, q) for b in ("out-a", "out-b") for q in range(4)]
        copies = read_topic(target.namesrv_addr, queues)
        refused = {p.uniq_key for p in sent[link] if len(p.body) > 64 * 1024}
        assert len(refused) == 2

        def was_refused(p: Produced, refused: set[str] = refused) -> bool:
            return p.uniq_key in refused

        result = compare(sent[link], copies, skip=was_refused)
        assert not result.missing and not result.mismatched and not result.unexpected, link
        _assert_same_queue(sent[link], copies)
        failures = tables[link].unreplayed_failures()
        assert {f.message.properties.get("UNIQ_KEY") for f in failures} == refused, link
        assert all("MessageIllegal" in f.message.error and f.outcome.value == "DISMISSED" for f in failures)
        assert {f.policy for f in failures} == {link}
        # the query's batch that spanned the outage blocked (its tasks either retried or waited for a
        # slot held by the other link's blocked tasks: local[2]) instead of failing or moving on
        longest = max(int(ms) for ms in re.findall(rf"link {link} batch \d+: source offsets .*? in (\d+) ms", log))
        assert longest >= OUTAGE_SECONDS * 2 / 3 * 1000, f"{link}: no batch waited out the outage ({longest} ms)"
        print(f"{link}: {len(sent[link])} sent, {len(failures)} refused and recorded, "
              f"{result.duplicate_count} duplicates, longest batch {longest / 1000:.1f}s")
    hooked = hook_log.read_text().splitlines()
    assert sum(topics["custom"] in line for line in hooked) >= 2  # the hook saw both refused messages
    assert not any(topics["dismiss"] in line for line in hooked)
    print(f"target outage test: {time.monotonic() - started:.1f}s")


def _assert_byte_exact(source: Mapping[MessageQueue, list[StoredMessage]],
                       target: Mapping[MessageQueue, list[StoredMessage]]) -> int:
    """Same queue position, same messages in the same order, byte-exact with every property."""
    total = 0
    for smq, tmq in zip(sorted(source), sorted(target), strict=True):
        assert (smq.broker_name[-1], smq.queue_id) == (tmq.broker_name[-1], tmq.queue_id)
        s_msgs, t_msgs = source[smq], target[tmq]
        assert len(s_msgs) == len(t_msgs), smq
        for s, t in zip(s_msgs, t_msgs, strict=True):
            assert t.body == s.body and t.flag == s.flag and t.msg_id == s.msg_id, (smq, s.queue_offset)
            assert ({k: v for k, v in t.properties.items() if k not in IGNORED}
                    == {k: v for k, v in s.properties.items() if k not in IGNORED}), (smq, s.queue_offset)
        total += len(t_msgs)
    return total


def _assert_replicated(src: Cluster, dst: Cluster, topic: str, tables: LinkTables, expected: int) -> None:
    """After a finished run: ``expected`` messages byte-exact in the same queue positions, the offsets
    table at the source's max offsets, and an offset map covering every message."""
    source, target = src.read_all(topic), dst.read_all(topic)
    assert _assert_byte_exact(source, target) == expected
    with Admin(src.namesrv) as admin:
        assert _caught_up(tables, admin, src.queues(topic))
    assert _assert_offset_map(tables, _by_source(source), target) == expected


def _by_source(source: Mapping[MessageQueue, list[StoredMessage]]) -> dict[tuple[str, int, int], str]:
    return {(mq.broker_name, mq.queue_id, m.queue_offset): m.msg_id for mq, msgs in source.items() for m in msgs}


def test_standalone_cluster_executors_in_their_own_processes(clusters: tuple[Cluster, Cluster],
                                                             tmp_path: Path) -> None:
    """spark-submit --master spark://127.0.0.1:P against a standalone master and worker started from
    pyspark's own launcher: same result as local mode, and no process binds a non-loopback address."""
    started = time.monotonic()
    src, dst = clusters
    topic = unique("Standalone")
    src.create_topic(topic, 4)
    dst.create_topic(topic, 4)
    produce_random(src.producer, topic, src.queues(topic), 4000, seed=31, max_body=1024)
    config = write_replicator_config(
        tmp_path / "replicator.yaml", source=("src", src.namesrv), target=("dst", dst.namesrv),
        links={"standalone": {"topic": topic, "trigger_interval": "200 milliseconds", "retry_backoff_ms": 50,
                              "max_messages_per_trigger": 2000}})
    spark = StandaloneCluster(tmp_path / "spark")
    job: TaggedProcess | None = None
    listening: set[str] = set()
    try:
        spark.start()
        job = submit_replicate(config, ["standalone"], tmp_path / "driver.log", master=spark.url,
                               available_now=True,
                               conf={"spark.cores.max": "1", "spark.executor.cores": "1",
                                     "spark.executor.memory": "512m"})
        deadline = time.monotonic() + 300
        while job.alive() and time.monotonic() < deadline:
            listening |= listening_addresses([*job.pids(), *spark.pids()])
            time.sleep(0.5)
        executors = list((tmp_path / "spark" / "worker").glob("app-*/*/stderr"))
        assert job.wait(5) == 0, job.log()[-4000:] + "".join(p.read_text()[-2000:] for p in executors)
        assert executors, "no executor ran under the worker"
        assert any("Starting Python task execution" in p.read_text() for p in executors)
        assert "executor driver" not in job.log()  # no task ran in the driver (spark-submit --master honoured)
    finally:
        if job is not None:
            job.kill()
        spark.stop()
    assert not spark.pids() and (job is None or not job.pids())
    assert listening and not non_loopback(listening), f"non-loopback listeners: {non_loopback(listening)}"
    _assert_replicated(src, dst, topic, LinkTables(tmp_path / "delta" / "standalone", source_cluster="src"), 4000)
    print(f"standalone test: 4000 messages, listeners {sorted(listening)}, {time.monotonic() - started:.1f}s")


@pytest.mark.slow
def test_100k_messages_byte_exact_queue_preserving(spark: SparkSession, clusters: tuple[Cluster, Cluster],
                                                   tmp_path: Path) -> None:
    started = time.monotonic()
    src, dst = clusters
    topic = unique("Large")
    src.create_topic(topic, 4)
    dst.create_topic(topic, 4)
    produce_random(src.producer, topic, src.queues(topic), 100_000, seed=41, max_body=256, batch=128)
    produced = time.monotonic()
    query = run_link(spark, source_namesrv=src.namesrv, source_cluster="src", target_namesrv=dst.namesrv,
                     target_cluster="dst", topics=topic, work=tmp_path, link="large",
                     reader={"maxMessagesPerTrigger": "25000"}, timeout=600)
    replicated = time.monotonic()
    assert query.exception() is None and not query.isActive
    tables = LinkTables(tmp_path / "delta" / "large", source_cluster="src")
    _assert_replicated(src, dst, topic, tables, 100_000)
    assert tables.unreplayed_failures() == []
    print(f"100k test: produced in {produced - started:.1f}s, replicated in {replicated - produced:.1f}s, "
          f"checked in {time.monotonic() - replicated:.1f}s")

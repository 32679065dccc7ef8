"""The replication job against a misbehaving source cluster, with real processes on loopback (docs/replicator.md, "How a
link replicates"):

* each source broker in turn frozen for 1 s, SIGKILLed and restarted 3 s later under a running job (a rolling
  restart): the pulls and the driver's admin calls block and retry, the job stays alive, nothing is missing;
* retention removes offsets a link has not read: the job fails with a ``DataLossError`` naming the
  reset command, ``jobs.reset_offsets`` moves the link past the gap and the job resumes; with
  ``fail_on_data_loss: false`` the lost range is skipped with a WARNING naming it.

Each test has a source cluster of its own (its brokers are killed or have tiny segments); the target is
the session's ``dst``. Every process a test starts is killed in a ``finally``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from broker_store.client import Admin, MessageQueue, Producer, new_message
from connectors.replication.tables import LinkTables
from tests.spark.conftest import PROJECT_ROOT, Cluster
from tests.spark.helpers import run_job_links, unique
from tests.spark.spark_processes import (
    BackgroundProducer,
    compare,
    read_topic,
    submit_replicate,
    wait_for,
    write_replicator_config,
)
from tests.support.processes import LocalCluster

pytestmark = pytest.mark.integration


def _queues(admin: Admin, topic: str) -> list[MessageQueue]:
    route = admin.topic_route(topic)
    return sorted(MessageQueue(topic, q.broker_name, i) for q in route.queue_datas for i in range(q.read_queue_nums))


def _caught_up(tables: LinkTables, admin: Admin, queues: Sequence[MessageQueue]) -> bool:
    latest = tables.latest_offsets()
    return all(latest.get(mq) == admin.max_offset(mq) for mq in queues)


@pytest.fixture
def outage_source(tmp_path: Path) -> Iterator[LocalCluster]:
    """A source cluster of its own: two broker groups whose members restart at the same address."""
    with LocalCluster(tmp_path, "so", brokers=2) as cluster:
        yield cluster


def test_source_broker_restart_keeps_the_job_alive(clusters: tuple[Cluster, Cluster], outage_source: LocalCluster,
                                                   tmp_path: Path) -> None:
    started = time.monotonic()
    _, dst = clusters
    src = outage_source
    topic = unique("SrcOut")
    with Admin(src.namesrv_addr) as admin:
        admin.create_topic(topic, 4, 6, cluster="so")
        admin.wait_for_route(topic, timeout=15)
        queues = _queues(admin, topic)
    dst.create_topic(topic, 4)
    config = write_replicator_config(
        tmp_path / "replicator.yaml", source=("so", src.namesrv_addr), target=("dst", dst.namesrv),
        links={"so": {"topic": topic, "trigger_interval": "300 milliseconds", "max_messages_per_trigger": 400,
                      "retry_backoff_ms": 100, "retry_backoff_max_ms": 1000, "retry_timeout_ms": 60_000}})
    sent = BackgroundProducer(src.namesrv_addr, topic, queues, 6000, rate=6000, seed=3).start().join(60)
    tables = LinkTables(tmp_path / "delta" / "so", source_cluster="so")
    job = submit_replicate(config, ["so"], tmp_path / "driver.log")
    try:
        wait_for(lambda: tables.latest_offsets() != {}, 180, "first batch", alive=job)
        for seed, victim in enumerate(src.brokers, start=4):  # a rolling restart: each source broker in turn
            # Frozen for a second first, so requests to it are in flight (a batch's pulls, the driver's offset
            # look-ups) when it dies: a broker that just disappears is also dropped from the route at once,
            # and the reader would plan around it without ever calling it.
            victim.pause()
            down_at = time.monotonic()
            time.sleep(1)
            victim.kill()
            # Down for 3 s more: ten triggers (300 ms) and three times the 1 s maximum back-off, so the job's
            # pulls and look-ups fail and are retried several times before the broker is back.
            time.sleep(3)
            victim.start()
            print(f"source broker {victim.broker_name} down for {time.monotonic() - down_at:.1f}s")
            sent += BackgroundProducer(src.namesrv_addr, topic, queues, 1000, rate=2000, seed=seed).start().join(60)
            assert job.alive(), f"the job died during the outage of {victim.broker_name}"
        with Admin(src.namesrv_addr) as admin:
            wait_for(lambda: _caught_up(tables, admin, queues), 180, "caught up", alive=job)
        assert job.alive(), "the job died during the source outage"
        log = job.log()
    finally:
        job.kill()
    assert "terminated with an error" not in log and "SourceUnavailableError" not in log
    assert re.search(r"source cluster so \(namesrv [\d.:]+\) unavailable while", log), \
        "no retry while the source was down was logged"
    copies = read_topic(dst.namesrv, dst.queues(topic))
    result = compare(sent, copies)
    assert not result.missing, f"{len(result.missing)} messages missing, e.g. {result.missing[:5]}"
    assert not result.mismatched and not result.unexpected
    retries = sum(int(n) for n in re.findall(r"(\d+) while the source was", log))
    print(f"source outage test: {len(sent)} messages, {result.duplicate_count} duplicates, {retries} pull "
          f"retries counted by the sink, {time.monotonic() - started:.1f}s")


RETAINED_BYTES = 256 * 1024
"""The retention source's CommitLog cap."""


@pytest.fixture
def retention_source(tmp_path: Path) -> Iterator[LocalCluster]:
    """A source cluster that keeps at most ~256 KiB of CommitLog (64 KiB segments), so a few hundred
    KiB produced after a run delete offsets the links have not read. Retention runs every 500 ms (the
    store's default, 10 s, only made the test wait for it)."""
    with LocalCluster(tmp_path, "dl", brokers=1, commit_log_segment_size=64 * 1024,
                      max_commit_log_bytes=RETAINED_BYTES, retention_interval_ms=500,
                      max_message_size=32 * 1024) as cluster:
        yield cluster


def _produce(namesrv: str, mq: MessageQueue, count: int, tag: str) -> list[str]:
    """``count`` 1 KiB messages to ``mq``; their UNIQ_KEYs in order."""
    with Producer(namesrv, f"PID_TEST_{tag}") as producer:
        keys: list[str] = []
        for start in range(0, count, 10):
            indexes = range(start, min(count, start + 10))
            batch = [new_message(mq.topic, f"{tag}-{i}".encode().ljust(1024, b".")) for i in indexes]
            keys += producer.send_batch(batch, mq).msg_ids
        return keys


def _retention_done(admin: Admin, mqs: Sequence[MessageQueue]) -> dict[MessageQueue, int] | None:
    """The queues' min offsets once retention has finished with what was produced (the CommitLog within
    its cap, so no later pass deletes more, and each min offset past 40), else None. A pass that ran while
    the test still produced may already have moved the min offsets past 40: those are not the final ones."""
    (broker,) = admin.primary_addrs("dl").values()
    status = admin.ha_status(broker)
    if status.max_offset - status.min_offset > RETAINED_BYTES:
        return None
    mins = {mq: admin.min_offset(mq) for mq in mqs}
    return mins if all(offset > 40 for offset in mins.values()) else None


def _run_both(config: Path, dl_log: Path, skip_log: Path) -> tuple[tuple[int, str], tuple[int, str]]:
    """One available-now run of each link, as two jobs at once: (exit code, log) of ``dl`` and of ``skip``."""
    with ThreadPoolExecutor(2) as pool:
        dl = pool.submit(_run, config, ["dl"], dl_log)
        skip = pool.submit(_run, config, ["skip"], skip_log)
        return dl.result(), skip.result()


def _run(config: Path, links: Sequence[str], log_file: Path) -> tuple[int, str]:
    job = submit_replicate(config, links, log_file, available_now=True)
    try:
        code = job.wait(240)
        return code, job.log()
    finally:
        job.kill()


def test_data_loss_error_reset_and_skip(spark: SparkSession, clusters: tuple[Cluster, Cluster],
                                        retention_source: LocalCluster, tmp_path: Path) -> None:
    """Retention deletes offsets two links have not read. ``dl`` (fail_on_data_loss default true) fails
    with the error naming the reset command; the command moves it to the earliest offset left and says to
    move the checkpoint away; the job then resumes. ``skip`` (fail_on_data_loss: false) goes on with a
    WARNING naming the lost range."""
    started = time.monotonic()
    _, dst = clusters
    src = retention_source
    topics = {"dl": unique("DataLoss"), "skip": unique("DataSkip")}
    with Admin(src.namesrv_addr) as admin:
        for topic in topics.values():
            admin.create_topic(topic, 1, 6, cluster="dl")
            admin.wait_for_route(topic, timeout=15)
        mqs = {link: _queues(admin, topic)[0] for link, topic in topics.items()}
    for topic in topics.values():
        dst.create_topic(topic, 1)
    config = write_replicator_config(
        tmp_path / "replicator.yaml", source=("dl", src.namesrv_addr), target=("dst", dst.namesrv),
        links={"dl": {"topic": topics["dl"], "trigger_interval": "200 milliseconds"},
               "skip": {"topic": topics["skip"], "trigger_interval": "200 milliseconds", "fail_on_data_loss": False}})
    first = {link: _produce(src.namesrv_addr, mq, 40, f"{link}-a") for link, mq in mqs.items()}
    # the first runs only read the 40 messages of each link and leave a checkpoint: both links as the job's own
    # queries on the test session (a spark-submit start-up less; two JVMs side by side on CI's two cores took
    # ~10 s longer still); the runs whose console the test reads below are spark-submit jobs
    run_job_links(spark, config, list(topics))
    later = {link: _produce(src.namesrv_addr, mq, 400, f"{link}-b") for link, mq in mqs.items()}
    seen: list[dict[MessageQueue, int] | None] = [None]
    with Admin(src.namesrv_addr) as admin:
        def settled() -> bool:  # the same final min offsets twice, a retention interval apart
            previous, seen[0] = seen[0], _retention_done(admin, list(mqs.values()))
            return seen[0] is not None and seen[0] == previous

        wait_for(settled, 60, "retention deleted unread offsets", interval=0.5)
    final = seen[0]
    assert final is not None
    mins = {link: final[mq] for link, mq in mqs.items()}

    # the two links' second runs side by side (independent links and topics): dl fails, skip goes on
    (code, log), (skip_code, skip_log) = _run_both(config, tmp_path / "run-2.log", tmp_path / "run-2-skip.log")
    assert code == 1, log[-4000:]
    command = f"python -m jobs.reset_offsets --config {config.resolve()} --link dl --to earliest"
    assert "DataLossError" in log and command in log and "fail_on_data_loss: false" in log, log[-4000:]

    reset = subprocess.run([sys.executable, "-m", "jobs.reset_offsets", "--config", str(config), "--link", "dl",
                            "--to", "earliest"], capture_output=True, text=True, timeout=60,
                           env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}, cwd=PROJECT_ROOT)
    assert reset.returncode == 0, reset.stderr
    row = next(line.split() for line in reset.stdout.splitlines() if line.startswith(topics["dl"]))
    assert row[1:3] == ["40", str(mins["dl"])], reset.stdout
    checkpoint = tmp_path / "checkpoints" / "dl"
    move = re.search(rf"mv {re.escape(str(checkpoint))} (\S+)", reset.stdout)
    assert move is not None, reset.stdout
    checkpoint.rename(move.group(1))
    later["dl"] += _produce(src.namesrv_addr, mqs["dl"], 20, "dl-c")  # read from the new resume point on
    code, log = _run(config, ["dl"], tmp_path / "run-3.log")
    assert code == 0, log[-4000:]
    assert "resuming 1 queue(s) from the Delta offsets table of link dl" in log

    assert skip_code == 0, skip_log[-4000:]
    assert re.search(rf"data loss on {topics['skip']}/dl-a/0 of source cluster dl while reading \[40, \d+\): "
                     rf"offsets \[40, {mins['skip']}\) were deleted .*; fail_on_data_loss is false: the lost range "
                     rf"is skipped", skip_log), skip_log[-4000:]

    for link, topic in topics.items():
        copies = {m.msg_id for msgs in read_topic(dst.namesrv, dst.queues(topic)).values() for m in msgs}
        kept = first[link] + later[link][mins[link] - 40:]
        assert set(kept) <= copies, f"{link}: {len(set(kept) - copies)} messages missing"
        assert not copies & set(later[link][:mins[link] - 40]), f"{link}: a lost message reached the target?"
    print(f"data loss test: lost {mins['dl'] - 40} / {mins['skip'] - 40} offsets, "
          f"{time.monotonic() - started:.1f}s")

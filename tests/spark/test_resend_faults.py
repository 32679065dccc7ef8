"""Sends whose outcome the sink cannot know, end to end (spark-submit jobs/replicate.py, real brokers on loopback):
nothing reaches the target twice (connectors.replication.resend_check).

* Python workers SIGKILLed while their tasks send: Spark retries the tasks (``local[2,4]``: up to four attempts),
  the retried attempt checks the target's tail first and sends only what the killed one did not store;
* a send whose answer never comes although the target stored it: every target broker is SIGSTOPped while the
  batch goes out, so the send times out (3 s), and SIGCONTed at the sink's first timeout warning (the retry waits
  ``retry_backoff_ms`` before it goes out again); the broker then stores the request it had buffered, the retry
  checks the tail and finds it there. The target's own producer writes into the same queues meanwhile: its
  messages stay untouched, and the recovery check counts them as foreign.
"""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import pytest

from broker_store.client import new_message
from connectors.replication.tables import LinkTables
from tests.spark.conftest import Cluster
from tests.spark.helpers import unique
from tests.spark.spark_processes import (
    BackgroundProducer,
    TaggedProcess,
    committed_batches,
    compare,
    read_topic,
    submit_replicate,
    wait_for,
    write_replicator_config,
)

pytestmark = pytest.mark.integration


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def python_workers(job: TaggedProcess) -> list[int]:
    """The job's Python workers: the children pyspark's daemon forked (same command line as their parent)."""
    pids = set(job.pids())
    return [pid for pid in pids if "daemon" in _cmdline(pid) and _parent(pid) in pids
            and _cmdline(_parent(pid)) == _cmdline(pid)]


def _avoided(tables: LinkTables) -> int:
    return sum(r["duplicates_avoided"] or 0 for r in tables.read("metrics").to_pylist())


def _logs(job: TaggedProcess) -> str:
    """The driver's console and every file under its ``--log-dir`` (executor warnings reach the console)."""
    logs = job.log_file.with_suffix(".logs")
    return job.log() + "".join(p.read_text(errors="replace") for p in sorted(logs.rglob("*")) if p.is_file())


def test_python_workers_killed_mid_send(clusters: tuple[Cluster, Cluster], tmp_path: Path) -> None:
    """The topic's 60,000 messages in one batch; the Python workers are SIGKILLed mid-send (the target frozen
    meanwhile) as soon as the target holds a message of it, and again once it holds half: every message on the
    target once, the killed attempts' messages found there by the retried tasks and counted."""
    started = time.monotonic()
    src, dst = clusters
    topic = unique("WorkerKill")
    src.create_topic(topic, 4)
    dst.create_topic(topic, 4)
    sent = BackgroundProducer(src.namesrv, topic, src.queues(topic), 60_000, rate=1e9, seed=41, max_body=256,
                              batch=200).start().join(120)
    config = write_replicator_config(
        tmp_path / "replicator.yaml", source=("src", src.namesrv), target=("dst", dst.namesrv),
        links={"wkill": {"topic": topic, "trigger_interval": "200 milliseconds", "retry_backoff_ms": 50,
                         "max_messages_per_trigger": 60_000}})
    job = submit_replicate(config, ["wkill"], tmp_path / "driver.log", master="local[2,4]", available_now=True)
    killed: list[int] = []
    try:
        on_target = 0
        checkpoint = tmp_path / "checkpoints" / "wkill"
        for kill in ("first", "second"):
            if kill == "second" and on_target == len(sent):
                # every send of the first attempts was in flight when they were killed (sent, never answered):
                # the retried tasks have nothing left to send, only to find
                print("\nno second kill: the killed attempts had sent every message")
                break
            # each kill as soon as the target holds more than before it (the first attempts' first sends, then the
            # retried tasks'): a later threshold can be passed by what is in flight in the socket buffers
            wait_for(lambda before=on_target: dst.count(topic) > before, 240,  # type: ignore[misc]
                     f"{kill} kill: over {on_target} messages on the target", alive=job, interval=0.02)
            # the target frozen at once (finding the workers walks /proc: under load long enough for them to send
            # the rest), the workers killed mid-task, the target resumed: it stores what they had sent, their
            # answers go nowhere
            for broker in dst.processes.brokers:
                broker.pause()
            try:
                uncommitted = not committed_batches(checkpoint)
                workers = python_workers(job)
                assert workers, [(pid, _parent(pid), _cmdline(pid)[:200]) for pid in job.pids()]
                _signal(workers, signal.SIGKILL)
            finally:
                for broker in dst.processes.brokers:
                    broker.resume()
            on_target = dst.count(topic)
            killed += workers
            print(f"\n{len(workers)} Python worker(s) killed with {on_target} of {len(sent)} messages on the target")
            assert uncommitted, f"{kill} kill: the batch was committed before its workers were killed"
        assert job.wait(240) == 0, job.log()[-4000:]
    finally:
        job.kill()
    log = job.log()
    assert re.search(r"Python worker exited unexpectedly|crashed", log), "no task failed with its worker"
    result = compare(sent, read_topic(dst.namesrv, dst.queues(topic)))
    assert not result.missing and not result.mismatched and not result.unexpected, result.missing[:5]
    assert result.duplicate_count == 0, f"{result.duplicate_count} duplicates, e.g. {list(result.duplicates)[:5]}"
    avoided = _avoided(LinkTables(tmp_path / "delta" / "wkill", source_cluster="src"))
    assert avoided > 0, "no retried task found the killed attempt's messages on the target"
    print(f"\nworkers killed mid-send: {len(killed)} killed, {len(sent)} messages, 0 duplicates, {avoided} found on "
          f"the target and not sent again, {time.monotonic() - started:.1f}s")


def _signal(pids: list[int], signum: signal.Signals) -> None:
    for pid in pids:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass


def test_lost_answer_with_the_targets_own_producer(clusters: tuple[Cluster, Cluster], tmp_path: Path) -> None:
    """A running job's batch is sent to a SIGSTOPped target (the send is stored when the target resumes, its
    answer never reaches the sink), while the target's own producer writes into the same queues before the
    stop and after the resume. The retry finds the batch on the target: sent once, counted as avoided; the
    foreign messages are all there once, untouched, and the recovery check counted them as foreign."""
    started = time.monotonic()
    src, dst = clusters
    topic = unique("LostAnswer")
    src.create_topic(topic, 2)
    dst.create_topic(topic, 2)
    config = write_replicator_config(
        tmp_path / "replicator.yaml", source=("src", src.namesrv), target=("dst", dst.namesrv),
        links={"lost": {"topic": topic, "trigger_interval": "200 milliseconds", "retry_backoff_ms": 3000,
                        "max_messages_per_trigger": 10_000}})
    checkpoint = tmp_path / "checkpoints" / "lost"
    first = BackgroundProducer(src.namesrv, topic, src.queues(topic), 200, rate=1e9, seed=51, max_body=64,
                               batch=50).start().join(60)
    job = submit_replicate(config, ["lost"], tmp_path / "driver.log")
    brokers = list(dst.processes.brokers)
    foreign: list[bytes] = []

    def write_foreign(count: int) -> None:
        for mq in dst.queues(topic):
            for _ in range(count):
                body = f"foreign-{len(foreign)}".encode()
                dst.producer.send(new_message(topic, body), mq)
                foreign.append(body)

    try:
        wait_for(lambda: dst.count(topic) == len(first) and len(committed_batches(checkpoint)) > 0, 240,
                 "the first messages replicated and committed", alive=job)
        write_foreign(3)  # after the last commit: in the tail the recovery check reads
        foreign_before = len(foreign)
        for broker in brokers:
            broker.pause()
        try:
            second = BackgroundProducer(src.namesrv, topic, src.queues(topic), 300, rate=1e9, seed=52,
                                        max_body=64, batch=50).start().join(60)
            wait_for(lambda: "unavailable while sending to" in _logs(job), 120, "the sink's send timing out",
                     alive=job)
        finally:
            for broker in brokers:
                broker.resume()
        write_foreign(2)  # the target's own producer goes on while the sink waits to retry
        total = len(first) + len(second)
        wait_for(lambda: "duplicate(s) avoided" in _logs(job) and dst.count(topic) >= total + len(foreign), 120,
                 "the retried batch checked and committed", alive=job)
        wait_for(lambda: _avoided(LinkTables(tmp_path / "delta" / "lost", source_cluster="src")) > 0, 60,
                 "duplicates_avoided committed", alive=job)
    finally:
        job.kill()
    target = read_topic(dst.namesrv, dst.queues(topic))
    result = compare([*first, *second], target)
    assert not result.missing and not result.mismatched, result.missing[:5]
    assert result.duplicate_count == 0, f"{result.duplicate_count} duplicates, e.g. {list(result.duplicates)[:5]}"
    stored_foreign = sorted(m.body for msgs in target.values() for m in msgs if m.body.startswith(b"foreign-"))
    assert stored_foreign == sorted(foreign), "the target's own messages were touched"
    assert len(result.unexpected) == len(foreign)
    avoided = _avoided(LinkTables(tmp_path / "delta" / "lost", source_cluster="src"))
    assert 0 < avoided <= len(second)
    counted = [int(n) for n in re.findall(r"target message\(s\) read, (\d+) of them foreign", _logs(job))]
    # one line per retried batch, counting the foreign messages in the tails of the queues it wrote to: which
    # queues the batch in flight at the stop covered depends on the trigger's timing, but every target queue holds
    # 3 foreign messages beyond its last commit (write_foreign(3)), so each line counts at least 3
    assert counted and min(counted) >= foreign_before // len(dst.queues(topic)), \
        f"foreign messages not counted: {counted} (foreign in the tails: {foreign_before})"
    print(f"\nlost answer: {len(second)} sent while the target was stopped, {avoided} found there and not sent "
          f"again, 0 duplicates, {len(foreign)} foreign messages untouched (counted {counted}), "
          f"{time.monotonic() - started:.1f}s")

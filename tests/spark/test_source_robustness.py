"""The replication job against a misbehaving source cluster, with real processes on loopback (issue 8):

* a source broker SIGKILLed and restarted ~5 s later under a running job (a rolling restart): the pulls
  and the driver's admin calls block and retry, the job stays alive, nothing is missing;
* retention removes offsets a link has not read: the job fails with a ``DataLossError`` naming the
  reset command, ``jobs.reset_offsets`` moves the link past the gap and the job resumes; with
  ``fail_on_data_loss: false`` the lost range is skipped with a WARNING naming it.

Each test has a source cluster of its own (its brokers are killed or have tiny segments); the target is
the session's ``dst``. Every process a test starts is killed in a ``finally``.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from broker_store.client import Admin, MessageQueue
from connectors.core.offsets import QueueKey
from connectors.replication.tables import LinkTables
from tests.spark.conftest import Cluster
from tests.spark.helpers import unique
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
    return all(latest.get(QueueKey(mq.topic, mq.broker_name, mq.queue_id)) == admin.max_offset(mq) for mq in queues)


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
        victim = src.brokers[0]
        # Frozen for a second first, so requests to it are in flight (a batch's pulls, the driver's offset
        # look-ups) when it dies: a broker that just disappears is also dropped from the route at once,
        # and the reader would plan around it without ever calling it.
        victim.pause()
        down_at = time.monotonic()
        time.sleep(1)
        victim.kill()
        time.sleep(5)
        victim.start()
        print(f"source broker {victim.broker_name} down for {time.monotonic() - down_at:.1f}s")
        sent += BackgroundProducer(src.namesrv_addr, topic, queues, 1000, rate=2000, seed=4).start().join(60)
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

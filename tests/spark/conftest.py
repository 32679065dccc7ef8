"""Spark end-to-end fixtures: ONE SparkSession (local[2]) and ONE pair of real clusters per session.

The clusters are real name-server and broker processes started by the tests/support harness:
``src`` and ``dst``, two broker groups each. The target brokers accept smaller
messages than the source ones (``DST_MAX_MESSAGE_SIZE``) so "message too big for the target" can be
provoked. Tests isolate themselves by topic name and per-test checkpoint / Delta directories.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from broker_store.client import Admin, MessageQueue, Producer, StoredMessage
from jobs import worker_zygote
from jobs.worker_python import bytecode_worker_environment
from tests.spark.spark_processes import read_topic
from tests.support.processes import LocalCluster

if TYPE_CHECKING:  # imported inside the fixture, after the environment Spark reads is set
    from pyspark.sql import SparkSession

DST_MAX_MESSAGE_SIZE = 2 * 1024 * 1024
SRC_MAX_MESSAGE_SIZE = 4 * 1024 * 1024
PROJECT_ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Cluster:
    name: str
    namesrv: str
    processes: LocalCluster
    admin: Admin
    producer: Producer

    def create_topic(self, topic: str, queues: int = 4, perm: int = 6) -> None:
        """Create ``topic`` with ``queues`` queues on every broker group of the cluster and wait until the
        route lists all of them (not just the first group to register it: a test that counts queues
        right after would otherwise see half the topic)."""
        created_on = self.admin.create_topic(topic, queues, perm, cluster=self.name)
        self.admin.wait_for_route(topic, timeout=15, writable=bool(perm & 2),
                                  min_queues=queues * max(1, len(created_on)))

    def queues(self, topic: str) -> list[MessageQueue]:
        route = self.admin.topic_route(topic)
        return sorted(MessageQueue(topic, q.broker_name, i) for q in route.queue_datas
                      for i in range(q.read_queue_nums))

    def read_all(self, topic: str) -> dict[MessageQueue, list[StoredMessage]]:
        """Every message of every queue of ``topic``, in queue order."""
        return read_topic(self.namesrv, self.queues(topic))

    def count(self, topic: str) -> int:
        return sum(self.admin.max_offset(mq) - self.admin.min_offset(mq) for mq in self.queues(topic))


def _start_cluster(name: str, root: Path, max_message_size: int) -> Cluster:
    # the name server's own broker expiry (5 s): these brokers are never killed, and a heartbeat
    # late under Spark's load must not drop them from routes
    processes = LocalCluster(root, name, brokers=2, namesrv={"broker_expiry_seconds": 5.0},
                             commit_log_segment_size=64 * 1024 * 1024, max_message_size=max_message_size).start()
    addr = processes.namesrv_addr
    return Cluster(name, addr, processes, Admin(addr), Producer(addr, max_message_size=64 * 1024 * 1024))


@pytest.fixture(scope="session")
def clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, Cluster]]:
    root = tmp_path_factory.mktemp("spark-clusters")
    started: list[Cluster] = []
    try:
        started.append(_start_cluster("src", root, SRC_MAX_MESSAGE_SIZE))
        started.append(_start_cluster("dst", root, DST_MAX_MESSAGE_SIZE))
        yield started[0], started[1]
    finally:
        for cluster in started:
            cluster.producer.close()
            cluster.admin.close()
            cluster.processes.stop()


@pytest.fixture(scope="session")
def hook_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """File the failure hooks of tests/spark/hooks.py append to (set before Spark starts its workers)."""
    return tmp_path_factory.mktemp("hooks") / "hook.log"


@pytest.fixture(scope="session")
def hold_marker(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The marker file of ``tests.spark.hooks.hold_first_call`` (set before Spark starts its workers, so a run of
    the session's own queries finds the batch a killed spark-submit driver held, and dismisses)."""
    return tmp_path_factory.mktemp("hold") / "held.json"


@pytest.fixture(scope="session")
def spark(hook_log: Path, hold_marker: Path) -> Iterator[SparkSession]:
    os.environ["RMQ_TEST_HOOK_LOG"] = str(hook_log)
    os.environ["RMQ_TEST_HOLD_MARKER"] = str(hold_marker)
    # Spark's Python workers must run this interpreter (pyspark, the project) and find the tests
    # package (failure hooks live in tests/spark/hooks.py).
    # Local workers import pyspark from bytecode rather than Spark's pyspark.zip, as the jobs do
    # (jobs/worker_python.py): ~0.4 s less per Python worker Spark starts.
    workers = bytecode_worker_environment("local[2]", launching_jvm=True)
    if workers:  # and they start forked from a zygote holding the imports, as the jobs' do (jobs/worker_zygote.py)
        workers.update(worker_zygote.environment())
    os.environ.update(workers)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    paths = [str(PROJECT_ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    from pyspark.sql import SparkSession

    from connectors.replication.data_source import RocketMQDataSource
    from tests.spark.spark_processes import driver_archive_options

    builder = SparkSession.builder
    archive = driver_archive_options()  # the JVM class-data archive (jobs/jvm_archive.py): a faster JVM start
    if archive:
        builder = builder.config("spark.driver.extraJavaOptions", archive)
    session = (builder.master("local[2]").appName("rocketmq-replicator-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.streaming.stopTimeout", "20s")
               .config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.driver.host", "127.0.0.1")
               .config("spark.sql.execution.pyspark.udf.faulthandler.enabled", "true")
               .getOrCreate())
    session.sparkContext.setLogLevel("WARN")
    session.dataSource.register(RocketMQDataSource)
    yield session
    session.stop()

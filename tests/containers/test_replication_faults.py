"""The main job with its Spark driver and its executors in separate containers (a standalone master and worker in
one, the driver, ``python -m jobs.run_all --master spark://...``, in another), replicating from a source of two
broker groups to a target of one, every name server and broker in its own container. Faults the whole-container
test (test_replication_job.py: driver and executors frozen or killed together, local mode) cannot make:

- only the driver frozen (``docker pause`` of its container) while the executors' container keeps running;
- a source broker ``docker kill``-ed, then started again (same store);
- a source broker frozen, then thawed.

Each time messages are produced during the fault (to whichever source broker takes them); afterwards everything
the source acknowledged must be in the target broker's CommitLog, with the same job still running. One
deployment and one job serve the module, the tests run in order on it.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from broker_store.client import Admin, Producer, SendStatus, new_message
from broker_store.deploy.launcher import free_port
from broker_store.protocol.errors import RocketMQError
from tests.spark.spark_processes import write_replicator_config
from tests.support.containers import ContainerProcess
from tests.support.log_check import commitlog_image, stored_keys
from tests.support.processes import LocalCluster
from tests.support.waiting import eventually

TOPIC = "ContainerSourceFaults"
SPARK_CLASS = "/opt/venv/bin/spark-class"
"""pyspark's launcher in the image's venv."""
SPARK_ENV = {"SPARK_LOCAL_IP": "127.0.0.1", "SPARK_LOCAL_HOSTNAME": "localhost"}
FROZEN_S = 6.0
"""Longer than the job's trigger interval and the producer's send timeout: batches are due while frozen."""


def _servers(image: str, cluster: LocalCluster) -> list[ContainerProcess]:
    """``cluster``'s name server and brokers (their configs, ports and stores) as containers."""
    return [ContainerProcess.server(image, kind, proc.config, cluster.root, proc.name, memory="256m")
            for kind, proc in (("namesrv", cluster.namesrv), *(("broker", b) for b in cluster.brokers))]


@dataclass
class Deployment:
    image: str
    root: Path
    source: list[ContainerProcess] = field(default_factory=list)
    target: list[ContainerProcess] = field(default_factory=list)
    spark: ContainerProcess | None = None
    driver: ContainerProcess | None = None
    acked: list[str] = field(default_factory=list)
    """Every key the source acknowledged so far."""

    def __post_init__(self) -> None:
        src, dst = LocalCluster(self.root, "fsrc", brokers=2), LocalCluster(self.root, "fdst", brokers=1)
        self.source_namesrv, self.target_namesrv = src.namesrv_addr, dst.namesrv_addr
        self.source, self.target = _servers(self.image, src), _servers(self.image, dst)
        self.target_store = self.target[1].store_dir
        self.master_url = f"spark://127.0.0.1:{free_port()}"

    def all(self) -> list[ContainerProcess]:
        return [p for p in (*self.source, *self.target, self.spark, self.driver) if p is not None]

    def start(self) -> None:
        for proc in (*self.source, *self.target):
            proc.start()
        with Admin(self.source_namesrv) as admin:
            admin.create_topic(TOPIC, 2)
            admin.wait_for_route(TOPIC)
        port = self.master_url.rsplit(":", 1)[1]
        work = self.root / "spark"
        # The master and the worker (whose children are the executors) in one container, the driver in another.
        self.spark = ContainerProcess(self.image, ["sh", "-c", (
            f"{SPARK_CLASS} org.apache.spark.deploy.master.Master --host 127.0.0.1 --port {port} "
            f"--webui-port {free_port()} & "
            f"exec {SPARK_CLASS} org.apache.spark.deploy.worker.Worker {self.master_url} --host 127.0.0.1 "
            f"--port {free_port()} --webui-port {free_port()} --cores 2 --memory 1g --work-dir {work}")],
            self.root, "spark", memory="2g",
            env={**SPARK_ENV, "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false"}).start(wait_ready=False)
        eventually(lambda: "Successfully registered with master" in self.spark_logs(), 120,
                   lambda: f"the worker registered:\n{self.spark_logs()[-3000:]}", interval=0.5)
        config = write_replicator_config(
            self.root / "replicator.yaml", source=("fsrc", self.source_namesrv),
            target=("fdst", self.target_namesrv),
            links={"l1": {"topic": TOPIC, "trigger_interval": 1.0, "checkpoints": {"enabled": False},
                          "config_sync": {"enabled": False}}})
        self.driver = ContainerProcess(
            self.image, ["python", "-m", "jobs.run_all", "--config", str(config), "--link", "l1", "--log-dir",
                         str(self.root / "driver.logs")], self.root, "driver", memory="2g",
            env={**SPARK_ENV, "SPARK_MASTER": self.master_url}).start(wait_ready=False)

    def spark_logs(self) -> str:
        return "" if self.spark is None else self.spark.logs()

    def produce(self, n: int, *, during: Callable[[], None] | None = None) -> None:
        """``n`` sends, one after another, failures skipped (a broker may be down); ``during`` runs after the
        first fifth. Only what the source acknowledged is added to ``acked``."""
        with Producer(self.source_namesrv, "PID_container_faults", send_timeout=3.0, attempt_timeout=0.5) as producer:
            for i in range(n):
                if during is not None and i == n // 5:
                    during()
                key = f"k-{uuid.uuid4().hex[:12]}"
                try:
                    result = producer.send(new_message(TOPIC, key.encode(), keys=key))
                except RocketMQError:
                    continue
                if result.status is SendStatus.SEND_OK:
                    self.acked.append(key)

    def missing(self) -> list[str]:
        stored = stored_keys(commitlog_image(self.target_store), TOPIC)
        return [k for k in self.acked if k not in stored]

    def wait_replicated(self, timeout: float) -> None:
        eventually(lambda: not self.missing(), timeout,
                   lambda: f"{len(self.missing())} of {len(self.acked)} acknowledged keys missing on the target\n"
                           f"{self.logs()}", interval=0.5)
        assert self.driver is not None and self.driver.state()["Status"] == "running", self.logs()

    def remove(self) -> None:
        for proc in reversed(self.all()):
            proc.remove()

    def logs(self) -> str:
        return "\n".join(f"--- {p.name} ({p.container_name}):\n{p.log_tail()}" for p in self.all())


@pytest.fixture(scope="module")
def deployment(tier_image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    dep = Deployment(tier_image, tmp_path_factory.mktemp("replication-faults"))
    try:
        dep.start()
        dep.produce(100)
        dep.wait_replicated(240)  # the job's start: the driver's and the executors' JVMs, the first batches
        executors = list((dep.root / "spark").glob("app-*/*/stderr"))
        assert any("Starting Python task execution" in p.read_text() for p in executors), \
            f"no executor of the worker's container ran a Python task: {executors}"
        yield dep
    except BaseException:
        print(dep.logs())
        raise
    finally:
        dep.remove()


def test_the_driver_alone_frozen(deployment: Deployment) -> None:
    driver, spark = deployment.driver, deployment.spark
    assert driver is not None and spark is not None
    driver.pause()
    try:
        deployment.produce(150)
        time.sleep(FROZEN_S)
        assert (driver.state()["Status"], spark.state()["Status"]) == ("paused", "running")
    finally:
        driver.unpause()
    deployment.wait_replicated(120)
    print(f"driver frozen {FROZEN_S:g} s: {len(deployment.acked)} acknowledged so far, all on the target")


def test_a_source_broker_killed_and_started_again(deployment: Deployment) -> None:
    broker = deployment.source[1]
    deployment.produce(200, during=broker.kill)
    assert broker.state()["ExitCode"] == 137
    deployment.produce(50)  # to the other group only
    broker.restart()
    deployment.produce(50)
    deployment.wait_replicated(120)
    print(f"source broker killed: {len(deployment.acked)} acknowledged so far, all on the target")


def test_a_source_broker_frozen_and_thawed(deployment: Deployment) -> None:
    broker = deployment.source[2]
    deployment.produce(200, during=broker.pause)
    try:
        time.sleep(max(0.0, FROZEN_S - 2))
    finally:
        broker.unpause()
    deployment.produce(50)
    deployment.wait_replicated(120)
    print(f"source broker frozen: {len(deployment.acked)} acknowledged so far, all on the target")

"""The main job (``jobs/run_all.py``, the image's installed ``jobs`` package) in its own container with a memory
limit, replicating between two local clusters (processes on loopback; the job reaches them over the host
network), through a ``docker pause`` / ``unpause`` of its container (driver and executors frozen, the shape of
a long GC pause) and a ``docker kill`` followed by a new container on the same checkpoints: nothing the source
acknowledged is missing on the target (its CommitLog read from the target broker's store). The driver frozen
alone, its executors running in another container, and source brokers killed or frozen are
test_replication_faults.py's.
"""

from __future__ import annotations

import time
from pathlib import Path

from broker_store.client import Admin, Producer, SendStatus, new_message
from tests.spark.spark_processes import write_replicator_config
from tests.support.containers import ContainerProcess
from tests.support.log_check import commitlog_image, stored_keys
from tests.support.processes import LocalCluster
from tests.support.waiting import eventually

TOPIC = "ContainerJob"
JOB_MEMORY = "2g"
"""The JVM sizes its default heap from the container's limit (a quarter); local[2] with PySpark workers fits."""


def _produce(namesrv: str, start: int, n: int) -> list[str]:
    keys = []
    with Producer(namesrv, "PID_container_job") as producer:
        for i in range(start, start + n):
            result = producer.send(new_message(TOPIC, f"m{i}".encode(), keys=f"k-{i}"))
            assert result.status is SendStatus.SEND_OK, result
            keys.append(f"k-{i}")
    return keys


def _job(image: str, config: Path, root: Path, name: str) -> ContainerProcess:
    return ContainerProcess(image, ["python", "-m", "jobs.run_all", "--config", str(config), "--link", "l1",
                                    "--log-dir", str(root / f"{name}.logs")], root, name, memory=JOB_MEMORY,
                            env={"SPARK_MASTER": "local[2]", "SPARK_LOCAL_IP": "127.0.0.1",
                                 "SPARK_LOCAL_HOSTNAME": "localhost"})


def test_the_job_in_a_container_rides_out_pause_and_kill(tier_image: str, tmp_path: Path) -> None:
    with LocalCluster(tmp_path, "jsrc", brokers=1) as src, LocalCluster(tmp_path, "jdst", brokers=1) as dst:
        with Admin(src.namesrv_addr) as admin:
            admin.create_topic(TOPIC, 2)
            admin.wait_for_route(TOPIC)
        config = write_replicator_config(
            tmp_path / "replicator.yaml", source=("jsrc", src.namesrv_addr), target=("jdst", dst.namesrv_addr),
            links={"l1": {"topic": TOPIC, "trigger_interval": 1.0, "checkpoints": {"enabled": False},
                          "config_sync": {"enabled": False}}})
        target_store = dst.brokers[0].store_dir
        acked = _produce(src.namesrv_addr, 0, 200)
        jobs: list[ContainerProcess] = []

        def missing() -> list[str]:
            stored = stored_keys(commitlog_image(target_store), TOPIC)
            return [k for k in acked if k not in stored]

        def report() -> str:
            return f"{len(missing())} of {len(acked)} missing on the target\n" + "\n".join(
                f"--- {j.container_name}:\n{j.log_tail()}" for j in jobs)

        try:
            jobs.append(_job(tier_image, config, tmp_path, "job-1").start(wait_ready=False))
            eventually(lambda: not missing(), 240, report, interval=0.5)
            jobs[0].pause()
            acked += _produce(src.namesrv_addr, 200, 100)
            time.sleep(5.0)
            jobs[0].unpause()
            eventually(lambda: not missing(), 120, report, interval=0.5)
            jobs[0].kill()
            assert jobs[0].state()["ExitCode"] == 137
            acked += _produce(src.namesrv_addr, 300, 100)  # only a new job can copy these
            assert missing(), "the killed job's container still replicating"
            jobs.append(_job(tier_image, config, tmp_path, "job-2").start(wait_ready=False))
            eventually(lambda: not missing(), 240, report, interval=0.5)
            assert jobs[1].state()["Status"] == "running", report()
        finally:
            for job in jobs:
                job.remove()

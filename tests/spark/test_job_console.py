"""The replicate job's console as an operator sees it (docs/replicator.md, "Running the jobs"): a failure is one line
naming the link and the address, a clean stop is quiet; the details are in the log dir. Real processes: the job is
``python jobs/replicate.py`` (it launches its own Spark), the clusters are the session's."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from broker_store.client import new_message
from tests.spark.conftest import PROJECT_ROOT, Cluster
from tests.spark.helpers import unique
from tests.spark.spark_processes import (
    TaggedProcess,
    assert_failed_in_one_line,
    console_noise,
    spark_env,
    wait_for,
    write_replicator_config,
)
from tests.support.processes import free_port


def _job(config: Path, tmp_path: Path, *extra: str) -> TaggedProcess:
    argv = [sys.executable, str(PROJECT_ROOT / "jobs" / "replicate.py"), "--config", str(config),
            "--log-dir", str(tmp_path / "logs"), *extra]
    return TaggedProcess(argv, tmp_path / "console.log", spark_env())


def test_unreachable_source_is_one_line_and_exit_1(clusters: tuple[Cluster, Cluster], tmp_path: Path) -> None:
    _, dst = clusters
    dead = f"127.0.0.1:{free_port()}"
    config = write_replicator_config(tmp_path / "replicator.yaml", source=("src", dead),
                                     target=(dst.name, dst.namesrv),
                                     links={"l1": {"topic": unique("Gone"), "retry_timeout_ms": 2000,
                                                   "retry_backoff_max_ms": 500}})
    job = _job(config, tmp_path, "--available-now")
    try:
        rc = job.wait(240)
    finally:
        job.kill()
    assert_failed_in_one_line(rc, job.log(), f"link l1 failed: source cluster src (namesrv {dead}) unavailable")
    details = (tmp_path / "logs" / "replicator.log").read_text()
    assert "link l1 failed; the query's exception" in details and dead in details


def test_clean_stop_of_the_process_group_is_quiet(clusters: tuple[Cluster, Cluster], tmp_path: Path) -> None:
    src, dst = clusters
    topic = unique("Quiet")
    src.create_topic(topic, queues=2)
    dst.create_topic(topic, queues=2)
    for i in range(200):
        src.producer.send(new_message(topic, f"m{i}".encode()))
    config = write_replicator_config(tmp_path / "replicator.yaml", source=(src.name, src.namesrv),
                                     target=(dst.name, dst.namesrv),
                                     links={"l1": {"topic": topic, "trigger_interval": 1.0}})
    job = _job(config, tmp_path)
    try:
        wait_for(lambda: dst.count(topic) >= 200, 180, "the 200 messages on the target")
        wait_for(lambda: "link l1 batch 0: 200 delivered" in job.log(), 60, "the batch's commit")
        os.killpg(job.pid, signal.SIGTERM)  # the whole process group, as systemd and `timeout` do
        rc = job.wait(90)
    finally:
        job.kill()
    console = job.log()
    assert rc == 0, console
    assert console_noise(console) == [], console
    assert [line for line in console.splitlines() if " ERROR " in line] == [], console
    assert "SIGTERM: stopping the queries" in console
    # stopped between two triggers (jobs.query_supervisor.stop_queries): Spark had no batch to abort
    assert "failed to abort" not in (tmp_path / "logs" / "spark.log").read_text()
    assert "link l1 done: 200 messages" in console, console
    # Spark asks a new query's reader for its initial offset twice; the reader decides (and says) it once
    assert console.count("no checkpoint and no Delta resume point") == 1, console

"""A replicator job whose checkpoint and Delta tables fill their disk (docs/operations.md, "Damaged files and a full
disk"): the job stops with one console line naming the path and "disk full", exit 1; once space is freed, its restart
resumes from the checkpoint and every message reaches the target (at-least-once: duplicates allowed). The checkpoint and
the tables are on a small tmpfs in a private mount namespace (tests/support/private_tmpfs.py) that the job's process
enters with ``nsenter`` (its Spark JVM and Python workers inherit the namespace); the test fills and frees it through
``/proc/<holder>/root``. The clusters are the session's. Which text counts as a full disk is
tests/unit/test_disk_full_classifier.py. """

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from broker_store.client import new_message
from tests.spark.conftest import PROJECT_ROOT, Cluster
from tests.spark.helpers import unique
from tests.spark.spark_processes import (
    TaggedProcess,
    assert_failed_in_one_line,
    spark_env,
    wait_for,
    write_replicator_config,
)
from tests.support.private_tmpfs import PrivateTmpfs, fill, private_tmpfs

pytestmark = pytest.mark.integration

TMPFS_SIZE = "8m"


def _job(tmpfs: PrivateTmpfs, config: Path, tmp_path: Path, *extra: str) -> TaggedProcess:
    argv = [*tmpfs.nsenter_argv(PROJECT_ROOT), sys.executable, str(PROJECT_ROOT / "jobs" / "replicate.py"),
            "--config", str(config), "--log-dir", str(tmp_path / "logs"), *extra]
    return TaggedProcess(argv, tmp_path / "console.log", spark_env(SPARK_MASTER="local[2]"))


def _send(src: Cluster, topic: str, indexes: range) -> set[bytes]:
    bodies = {f"df-{i}".encode() for i in indexes}
    for body in sorted(bodies):
        src.producer.send(new_message(topic, body))
    return bodies


def _on_target(dst: Cluster, topic: str) -> set[bytes]:
    return {m.body for messages in dst.read_all(topic).values() for m in messages}


def test_full_disk_stops_the_job_in_one_line_and_its_restart_loses_nothing(
        clusters: tuple[Cluster, Cluster], tmp_path: Path) -> None:
    src, dst = clusters
    topic = unique("DiskFull")
    src.create_topic(topic, queues=2)
    dst.create_topic(topic, queues=2)
    with private_tmpfs(tmp_path / "state", TMPFS_SIZE) as tmpfs:
        state = tmpfs.mountpoint
        config = write_replicator_config(
            tmp_path / "replicator.yaml", source=(src.name, src.namesrv), target=(dst.name, dst.namesrv),
            links={"l1": {"topic": topic, "trigger_interval": 0.5, "checkpoint_location": str(state / "checkpoints"),
                          "delta_location": str(state / "delta")}})
        sent = _send(src, topic, range(50))
        job = _job(tmpfs, config, tmp_path)
        try:
            wait_for(lambda: _on_target(dst, topic) >= sent, 120, "the first messages on the target")
            # committed: the next batch meets the full disk in Spark's own checkpoint writer (the offset log,
            # before any send), the way the Delta commits of the sink meet it is the unit test's
            wait_for(lambda: "link l1 batch 0: 50 delivered" in job.log(), 60, "batch 0's commit")
            fill(tmpfs.inside() / "filler")
            sent |= _send(src, topic, range(50, 100))
            rc = job.wait(120)
        finally:
            job.kill()
        assert_failed_in_one_line(rc, job.log(), "link l1 failed: disk full: no space left on device for "
                                  + str(state))

        (tmpfs.inside() / "filler").unlink()
        job = _job(tmpfs, config, tmp_path, "--available-now")
        try:
            rc = job.wait(120)
        finally:
            job.kill()
        console = job.log()
        assert rc == 0, console
        assert _on_target(dst, topic) >= sent, console
        assert "link l1 done:" in console.split("link l1 failed")[-1], console  # its tables read back whole

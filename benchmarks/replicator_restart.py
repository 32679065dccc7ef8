"""(f) of ``benchmarks/replicator.py``: a replicator restart's own RTO. ``spark-submit jobs/replicate.py`` runs a
link while a producer sends at a steady rate; once batches flow, the job is killed with kill -9 (driver JVM, Python
driver and workers at once) and submitted again at once on the same checkpoints, as a supervisor (systemd,
Kubernetes) restarts it. The RTO is the kill -> the first message the new job stores on the target (its store
timestamp). What the killed job had in flight lands within milliseconds of the kill; the target's queue ends are
read 1 s after it, and only messages past them count. Each run's job logs (both launches' console, replicator.log
and spark.log) are kept in ``run/logs/replicator-restart/<link>``."""

from __future__ import annotations

import os
import shutil
import signal
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.replicator_children import start_child
from benchmarks.replicator_cluster import (
    PROJECT,
    TOPIC_FIRST,
    Cluster,
    config_yaml,
    create_topic,
    link_yaml,
)
from benchmarks.replicator_first import log_time
from broker_store.client import Admin, MessageQueue, PullConsumer, PullStatus

RESTART_TARGET_S = 15.0
"""Target of (f): kill -9 and resubmission -> the first replicated message."""

SETTLE_S = 1.0
"""After the kill, the target's queue ends are read this late: the killed job's sends in flight have landed."""


@dataclass
class Restart:
    """One kill -9 and resubmission (seconds from the kill)."""

    session_s: float
    """kill -> the resubmitted job's "Spark session up" log line"""
    first_s: float
    """kill -> the first message the resubmitted job stored on the target"""


def restart_run(run: int, work: Path, src: Cluster, dst: Cluster, queues: int, body: int, trigger: float,
                rate: float = 500.0, script: str = "replicate.py", flow_s: float = 8.0,
                timeout: float = 120.0) -> Restart:
    """(f): a link under a steady ``rate`` (msg/s) replicated by a spark-submitted ``jobs/<script>``
    (``replicate.py``, or ``run_all.py``: with the link's checkpoints and config sync and the heartbeat, at their
    defaults); after ``flow_s`` of replication kill -9 it, submit it again at once, time the first new message on
    the target."""
    from jobs.spark_session import SESSION_UP
    from tests.spark.spark_processes import python_driver_pid, submit_job

    topic, name = f"{TOPIC_FIRST}R{run}", f"bench-restart-{run}"
    source_queues = create_topic(src.addr, src.name, topic, queues)
    target_queues = create_topic(dst.addr, dst.name, topic, queues)
    run_dir = work / name
    run_dir.mkdir(parents=True)
    config = run_dir / "replicator.yaml"
    config.write_text(config_yaml(src, dst, [link_yaml(name, topic, trigger, run_dir, 20_000, 4)]))
    producer, _ = start_child("paced", namesrv=src.addr, topic=topic, rate=rate, seconds=timeout + 60, body=body,
                              batch=16, queues=[(mq.broker_name, mq.queue_id) for mq in source_queues])
    job = second = None
    try:
        with Admin(dst.addr) as admin:
            job = submit_job(script, config, run_dir / "first.log", args=["--metrics-port", "0"])
            _wait_past(admin, target_queues, {mq: 0 for mq in target_queues}, timeout)
            time.sleep(flow_s)
            killed = time.time()
            job.kill()
            second = submit_job(script, config, run_dir / "second.log", args=["--metrics-port", "0"])
        first_s = first_message_after(dst.addr, target_queues, killed, timeout)
        kept = PROJECT / "run" / "logs" / "replicator-restart" / name  # kept after the run (its data root is removed)
        shutil.rmtree(kept, ignore_errors=True)
        shutil.copytree(run_dir, kept, ignore=shutil.ignore_patterns("checkpoints", "delta"))
        log = second.log_file.with_suffix(".logs") / "replicator.log"
        up = next(log_time(line) for line in log.read_text().splitlines()
                  if f"jobs.query_supervisor: {SESSION_UP} up" in line)
        return Restart(session_s=up - killed, first_s=first_s)
    finally:
        producer.terminate()
        producer.join(10)
        for proc in (second, job):
            if proc is not None and proc.alive():
                try:
                    os.kill(python_driver_pid(proc, script), signal.SIGTERM)
                    proc.wait(60)
                except Exception:  # noqa: BLE001 - whatever is left is killed below
                    pass
                proc.kill()


def first_message_after(namesrv: str, queues: list[MessageQueue], killed: float, timeout: float) -> float:
    """Seconds from ``killed`` (the epoch time of a job's kill -9) to the first message stored on ``queues`` past
    their ends as read ``SETTLE_S`` after the kill (waits up to ``timeout`` for it)."""
    time.sleep(max(0.0, killed + SETTLE_S - time.time()))
    with Admin(namesrv) as admin:
        ends = {mq: admin.max_offset(mq) for mq in queues}
        _wait_past(admin, queues, ends, timeout)
        return _first_store_ms(namesrv, ends, admin) / 1000 - killed


def _wait_past(admin: Admin, queues: list[MessageQueue], ends: dict[MessageQueue, int], timeout: float) -> None:
    """Until one of ``queues`` holds a message past its end in ``ends`` (polled every 50 ms)."""
    deadline = time.monotonic() + timeout
    while not any(admin.max_offset(mq) > ends[mq] for mq in queues):
        if time.monotonic() > deadline:
            raise RuntimeError(f"no new message on the target within {timeout:g} s")
        time.sleep(0.05)


def _first_store_ms(namesrv: str, ends: dict[MessageQueue, int], admin: Admin) -> int:
    """The earliest store timestamp among the messages past ``ends`` (the first of each queue that has one)."""
    stamps = []
    with PullConsumer(namesrv, "CID_BENCH_RESTART", heartbeat_interval=None) as consumer:
        for mq, end in ends.items():
            if admin.max_offset(mq) > end:
                found = consumer.pull(mq, end, 1)
                if found.status is PullStatus.FOUND:
                    stamps.append(found.messages[0].store_timestamp)
    if not stamps:
        raise RuntimeError("the target's new messages could not be read back")
    return min(stamps)


def print_restarts(runs: list[Restart], rate: float, script: str) -> None:
    def spread(values: list[float]) -> str:
        return f"{statistics.median(values):.2f} s (min {min(values):.2f}, max {max(values):.2f})"

    print(f"(f) restart, {len(runs)} kill -9 + resubmission(s) of spark-submit jobs/{script} under {rate:g} msg/s: "
          f"kill -> first replicated message {spread([r.first_s for r in runs])}; kill -> session up "
          f"{spread([r.session_s for r in runs])}", flush=True)


def restart_summary(runs: list[Restart]) -> str:
    """(f)'s line of the summary: the median, and the target."""
    if not runs:
        return "  (f) restart RTO         not measured (--restart-runs 0)"
    first = statistics.median([r.first_s for r in runs])
    return (f"  (f) restart RTO         {first:>7.2f} s kill -9 -> first replicated message  target <= "
            f"{RESTART_TARGET_S:g} s: {'MET' if first <= RESTART_TARGET_S else 'NOT MET'}")

"""(d) of ``benchmarks/replicator.py``: time to the first replicated message of ``jobs/replicate.py`` launched as
an operator does (its own process and JVM), and the launch and stop of such a job."""

from __future__ import annotations

import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from benchmarks.replicator_children import run_child
from benchmarks.replicator_cluster import (
    PROJECT,
    TOPIC_FIRST,
    Cluster,
    config_yaml,
    create_topic,
    link_yaml,
    read_timestamps,
    wait_for,
)
from broker_store.client import Admin

FIRST_MESSAGE_TARGET_S = 3.0
"""Target of (d): the first message on the target at most this long after the Spark session is up."""


@dataclass
class FirstMessage:
    """One launch of ``jobs/replicate.py`` until the first replicated message (seconds)."""

    session_s: float
    """launch -> the job's "Spark session up" log line"""
    first_s: float
    """launch -> the first message's store timestamp on the target"""

    @property
    def after_session_s(self) -> float:
        return self.first_s - self.session_s


def log_time(line: str) -> float:
    """Seconds since the epoch of a ``connectors.core.driver_log.LOG_FORMAT`` line (local time, ms)."""
    stamp, millis = line[:23].split(",")
    return time.mktime(time.strptime(stamp, "%Y-%m-%d %H:%M:%S")) + int(millis) / 1000


def first_message_run(run: int, work: Path, src: Cluster, dst: Cluster, queues: int, body: int,
                      messages: int, trigger: float, timeout: float = 120.0,
                      script: str = "replicate.py") -> FirstMessage:
    """(d): launch ``python jobs/<script>`` (replicate.py, or run_all.py: every connector) as an operator does (its
    own process, JVM and all) on a new link whose source topic already holds ``messages``; time the launch, the
    job's session-up log line and the first message's store timestamp on the target; then SIGTERM the job."""
    from jobs.spark_session import SESSION_UP

    topic, name = f"{TOPIC_FIRST}{run}", f"bench-first-{run}"
    source_queues = create_topic(src.addr, src.name, topic, queues)
    target_queues = create_topic(dst.addr, dst.name, topic, queues)
    run_child("preload", namesrv=src.addr, topic=topic,
              queues=[(mq.broker_name, mq.queue_id) for mq in source_queues], count=messages, body=body)
    run_dir = work / name
    run_dir.mkdir(parents=True)
    config = run_dir / "replicator.yaml"
    config.write_text(config_yaml(src, dst, [link_yaml(name, topic, trigger, run_dir, messages, 4)]))
    log_dir = run_dir / "logs"
    with Admin(dst.addr) as admin, open(run_dir / "console.txt", "wb") as console:
        launched = time.time()
        job = launch_job(script, config, log_dir, console)
        try:
            wait_for(admin, target_queues, 1, timeout, None)
            first_ms = min(read_timestamps(dst.addr, target_queues, "store_timestamp").values())
        finally:
            stop_job(job)
    kept = PROJECT / "run" / "logs" / "replicator-first" / name  # kept after the run (its data root is removed)
    shutil.rmtree(kept, ignore_errors=True)
    shutil.copytree(log_dir, kept)
    with open(log_dir / "replicator.log") as f:
        up = next(log_time(line) for line in f if f"jobs.query_supervisor: {SESSION_UP} up" in line)
    return FirstMessage(session_s=up - launched, first_s=first_ms / 1000 - launched)


def ensure_jvm_archive(timeout: float = 900.0) -> str:
    """Build the driver JVM's class-data archive now unless it exists (``jobs.jvm_archive``; a deployment has it
    from ``make`` or its first launch): (d) and (f) time launches as they run once it is there, and a launch
    without it would also start a background build competing with the job for the cores. What happened, as a
    line."""
    from jobs import jvm_archive

    if not jvm_archive.enabled():
        return "JVM class-data archive: off"
    directory = jvm_archive.archive_dir()
    key, why = jvm_archive.current_key()
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        decision = jvm_archive.decide(directory, key, why)
        if decision.options:
            return f"JVM class-data archive: ready after {time.monotonic() - started:.0f} s"
        if not decision.build:
            return decision.note
        if jvm_archive.build(directory) is None:
            time.sleep(2.0)  # another builder holds the lock
    return f"JVM class-data archive: not ready after {timeout:g} s"


def launch_job(script: str, config: Path, log_dir: Path, console: IO[bytes],
               env: Mapping[str, str] | None = None) -> subprocess.Popen[bytes]:
    """``python jobs/<script> --config <config>`` as its own process (its own JVM, as an operator starts it): logs
    to ``log_dir``, metrics on an ephemeral port, stdout and stderr to ``console``, run in the config's folder."""
    return subprocess.Popen([sys.executable, str(PROJECT / "jobs" / script), "--config", str(config), "--log-dir",
                             str(log_dir), "--metrics-port", "0"], stdout=console, stderr=subprocess.STDOUT,
                            cwd=config.parent, env=env)


def stop_job(job: subprocess.Popen[bytes], grace: float = 60.0) -> None:
    """Stop a ``launch_job`` process as an operator does: SIGTERM, ``grace`` seconds for its clean stop, then
    SIGKILL."""
    job.send_signal(signal.SIGTERM)
    try:
        job.wait(grace)
    except subprocess.TimeoutExpired:
        job.kill()
        job.wait()


def print_first_messages(runs: list[FirstMessage], messages: int, trigger: float,
                         script: str = "replicate.py") -> None:
    def spread(values: list[float]) -> str:
        return f"{statistics.median(values):.2f} s (min {min(values):.2f}, max {max(values):.2f})"

    print(f"(d) time to first message, {len(runs)} launch(es) of jobs/{script}, {messages} messages waiting, "
          f"trigger {trigger:g} s: launch -> first message {spread([r.first_s for r in runs])}; session up -> "
          f"first message {spread([r.after_session_s for r in runs])}; launch -> session up "
          f"{spread([r.session_s for r in runs])}", flush=True)
    print("    runs (launch -> session up / -> first message): "
          + ", ".join(f"{r.session_s:.2f} / {r.first_s:.2f}" for r in runs), flush=True)


def first_message_summary(runs: list[FirstMessage]) -> str:
    """(d)'s line of the summary: medians, and the target (session up -> first message)."""
    if not runs:
        return "  (d) first message       not measured (--first-runs 0)"
    after = statistics.median([r.after_session_s for r in runs])
    return (f"  (d) first message       {after:>7.2f} s after session up, "
            f"{statistics.median([r.first_s for r in runs]):.2f} s after launch  target <= "
            f"{FIRST_MESSAGE_TARGET_S:g} s: {'MET' if after <= FIRST_MESSAGE_TARGET_S else 'NOT MET'}")

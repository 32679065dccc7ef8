"""(e) of ``benchmarks/replicator.py``: per-queue costs at 8 and 512 queues, (e1) the trigger overhead of a job
on idle queues and (e2) the backlog throughput, and (e)'s summary."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.replicator_backlog import BacklogRun
from benchmarks.replicator_children import start_child
from benchmarks.replicator_cluster import SCALING_QUEUES, TOPIC_IDLE, Cluster, config_yaml, create_topic, link_yaml
from benchmarks.replicator_first import launch_job, stop_job
from benchmarks.replicator_report import pct, print_cpu

TARGET_LATEST_OFFSET_MS, TARGET_QUEUE_RATIO = 100.0, 0.8
"""Targets of (e): latestOffset p50 at 512 idle queues, and 512-queue / 8-queue backlog throughput."""


@dataclass
class IdleRun:
    """(e1): one launch of ``jobs/replicate.py`` on a topic whose queues hold no backlog."""

    queues: int
    latest_offset_ms: list[int]
    """Spark's ``latestOffset`` duration of each measured batch (the job's progress lines)."""
    spark_log_bytes: int
    """Growth of spark.log (all its files) over the measured batches."""
    python_log_bytes: int
    """Growth of replicator.log (all its files) over the measured batches."""

    @property
    def batches(self) -> int:
        return len(self.latest_offset_ms)


def _log_bytes(log_dir: Path, name: str) -> int:
    return sum(p.stat().st_size for p in log_dir.glob(f"{name}*") if not p.name.endswith(".lock"))


def _idle_batches(log_dir: Path, link: str) -> dict[int, int]:
    """Batch id -> latestOffset ms of the job's progress lines for ``link`` (jobs.progress: ``link L batch N:
    ... in T ms (part ms, ...)``; a part of 0 ms is left out of the line)."""
    import re

    line = re.compile(rf"jobs\.progress: link {re.escape(link)} batch (\d+): .*\(([^()]*)\)$")
    out: dict[int, int] = {}
    for p in sorted(log_dir.glob("replicator.log*")):
        for text in p.read_text(errors="replace").splitlines():
            m = line.search(text)
            if m:
                parts = dict(part.rsplit(" ", 1) for part in m.group(2).split(", ") if " " in part)
                out[int(m.group(1))] = int(parts.get("latestOffset", 0))
    return out


def idle_trigger_run(work: Path, src: Cluster, dst: Cluster, queues: int, seconds: float, trigger: float,
                     rate: float, body: int, timeout: float = 120.0) -> IdleRun:
    """(e1): launch ``python jobs/replicate.py`` (its own process and JVM, as an operator does) on a new link whose
    topic has ``queues`` queues and no backlog, while a producer trickles ``rate`` msg/s round-robin over them
    (Spark reports progress only for a trigger that has a batch); once two batches are done, measure
    ``seconds`` of batches: latestOffset of each (from the job's progress lines) and the growth of spark.log
    and replicator.log. Then SIGTERM the job."""

    topic, name = f"{TOPIC_IDLE}{queues}", f"bench-idle-{queues}"
    source_queues = create_topic(src.addr, src.name, topic, queues)
    create_topic(dst.addr, dst.name, topic, queues)
    run_dir = work / name
    run_dir.mkdir(parents=True)
    config = run_dir / "replicator.yaml"
    config.write_text(config_yaml(src, dst, [link_yaml(name, topic, trigger, run_dir, 100_000, 4)]))
    log_dir = run_dir / "logs"
    trickle, _ = start_child("paced", namesrv=src.addr, topic=topic, rate=rate, seconds=seconds + timeout,
                             body=body, batch=1, queues=[(mq.broker_name, mq.queue_id) for mq in source_queues])
    with open(run_dir / "console.txt", "wb") as console:
        job = launch_job("replicate.py", config, log_dir, console)
        try:
            deadline = time.monotonic() + timeout
            while max(_idle_batches(log_dir, name), default=-1) < 1:
                if time.monotonic() > deadline or job.poll() is not None:
                    raise RuntimeError(f"{name}: no second batch after {timeout:.0f} s (see {run_dir})")
                time.sleep(0.2)
            before = _idle_batches(log_dir, name)
            spark0, python0 = _log_bytes(log_dir, "spark.log"), _log_bytes(log_dir, "replicator.log")
            time.sleep(seconds)
            after = _idle_batches(log_dir, name)
            spark1, python1 = _log_bytes(log_dir, "spark.log"), _log_bytes(log_dir, "replicator.log")
        finally:
            trickle.kill()
            trickle.join(30)
            stop_job(job)
    measured = [ms for batch, ms in sorted(after.items()) if batch not in before]
    if not measured:
        raise RuntimeError(f"{name}: no batch in {seconds:.0f} s (see {run_dir})")
    return IdleRun(queues, measured, spark1 - spark0, python1 - python0)


def print_idle_run(run: IdleRun, trigger: float, rate: float) -> None:
    ms = run.latest_offset_ms
    print(f"(e1) {run.queues} queues without backlog, jobs/replicate.py, trigger {trigger:g} s, {rate:g} msg/s "
          f"trickle: {run.batches} batches, latestOffset p50 {statistics.median(ms):.0f} ms, p90 {pct(ms, 90):.0f} "
          f"ms, max {max(ms)} ms; per batch spark.log +{run.spark_log_bytes / run.batches / 1024:.1f} KB, "
          f"replicator.log +{run.python_log_bytes / run.batches / 1024:.1f} KB", flush=True)


def print_scaling_summary(idle: list[IdleRun], backlog: dict[int, BacklogRun]) -> None:
    """(e)'s summary; its last line is ``queue scaling: latestOffset p50 X ms at 512 idle queues ..., backlog
    512/8 R ...``."""
    few, many = SCALING_QUEUES
    p50 = {run.queues: statistics.median(run.latest_offset_ms) for run in idle}
    ratio = backlog[many].rate / backlog[few].rate
    if not idle:  # --backlog-only
        print(f"queue scaling: backlog {many}/{few} queues {ratio:.2f} ({backlog[many].rate:,.0f} / "
              f"{backlog[few].rate:,.0f} msg/s), target >= {TARGET_QUEUE_RATIO}: "
              f"{'MET' if ratio >= TARGET_QUEUE_RATIO else 'NOT MET'}", flush=True)
        return
    print("\nsummary (e)")
    for run in idle:
        print(f"  {run.queues:>4} queues: latestOffset p50 {p50[run.queues]:>5.0f} ms, spark.log "
              f"+{run.spark_log_bytes / run.batches / 1024:.1f} KB/batch, replicator.log "
              f"+{run.python_log_bytes / run.batches / 1024:.1f} KB/batch; "
              f"backlog {backlog[run.queues].rate:,.0f} msg/s")
    met = p50[many] <= TARGET_LATEST_OFFSET_MS
    print(f"queue scaling: latestOffset p50 {p50[many]:.0f} ms at {many} idle queues ({p50[few]:.0f} ms at {few}), "
          f"target <= {TARGET_LATEST_OFFSET_MS:.0f} ms: {'MET' if met else 'NOT MET'}; "
          f"backlog {many}/{few} queues {ratio:.2f}, target >= {TARGET_QUEUE_RATIO}: "
          f"{'MET' if ratio >= TARGET_QUEUE_RATIO else 'NOT MET'}", flush=True)


def print_backlog_run(count: int, run: BacklogRun, messages: int, per_trigger: int) -> None:
    """(e2)'s lines for one queue count: the sustained rate, the mean durations per batch after the first, the CPU."""
    per_batch = [dict(pr.durationMs) for pr in run.batches[1:]] or [dict(run.batches[0].durationMs)]
    print(f"(e2) {count} queues, {messages} messages backlog, AvailableNow, max {per_trigger}/trigger, "
          f"{len(run.batches)} batches: {run.rate:,.0f} msg/s sustained; mean per batch after the first: "
          + ", ".join(f"{k} {statistics.mean(x.get(k, 0) for x in per_batch):.0f} ms"
                      for k in ("triggerExecution", "latestOffset", "queryPlanning", "addBatch")),
          flush=True)
    print_cpu(run.total_s, run.cpu)

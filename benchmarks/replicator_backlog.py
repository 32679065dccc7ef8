"""(b) and (e2) of ``benchmarks/replicator.py``: an AvailableNow query over a preloaded backlog in this process's
Spark, its sustained rate after the first batch and the CPU of every process meanwhile."""

from __future__ import annotations

import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.replicator_cluster import wait_for
from benchmarks.replicator_report import MB, cpu_delta, cpu_snapshot, print_cpu, start_py_spy
from broker_store.client import Admin, MessageQueue


def batch_messages(progress: Any) -> int:
    """Messages a micro-batch read: its source's end minus start offsets (rows are not messages with
    the raw and ranges row formats)."""
    import json

    source = progress.sources[0]
    start_doc = json.loads(source.startOffset) if source.startOffset else None  # "null" for a query's first batch
    start = start_doc["queues"] if start_doc else {}
    end = json.loads(source.endOffset)["queues"]
    return sum(n - start.get(q, 0) for q, n in end.items())


def progress_time(progress: Any) -> float:
    """A progress event's trigger start as seconds since the epoch."""
    from datetime import datetime

    return datetime.fromisoformat(progress.timestamp.replace("Z", "+00:00")).timestamp()


@dataclass
class BacklogRun:
    """One AvailableNow query over a preloaded backlog ((b) and (e2))."""

    rate: float
    """Sustained msg/s: the messages after the first batch / time from that batch's end to the last on the target."""
    mbps: float
    first_msgs: int
    first_end_s: float
    """The first batch's end, seconds after ``writeStream.start()``."""
    total_s: float
    """``writeStream.start()`` -> every message on the target."""
    query_s: float
    """``writeStream.start()`` -> the query ended."""
    batches: list[Any]
    cpu: dict[str, float]


def replicate_backlog(spark: Any, config_path: Path, config: Any, link: str, target_queues: list[MessageQueue],
                      n: int, body: int, row_format: str, admin_dst: Admin, labels: dict[int, str],
                      spy_out: str | None = None) -> BacklogRun:
    """Replicate ``link``'s preloaded backlog of ``n`` messages with Trigger.AvailableNow (see (b) in the
    module docstring for why the rate starts after the first batch)."""
    from jobs.replicate import start_link

    spy = start_py_spy(spy_out) if spy_out else None
    cpu0 = cpu_snapshot(labels)
    t0 = time.monotonic()
    wall0 = time.time()
    q = start_link(spark, str(config_path), config, link, available_now=True, row_format=row_format)
    try:
        t_done = wait_for(admin_dst, target_queues, n, 1800, q)
        wall_done = wall0 + (t_done - t0)
        cpu1 = cpu_snapshot(labels)
        if spy is not None:
            spy.send_signal(signal.SIGINT)
            spy.wait(60)
        q.awaitTermination(600)
    finally:
        if q.isActive:
            q.stop()
    t_end = time.monotonic()
    if q.exception() is not None:
        raise RuntimeError(f"{link} query failed: {q.exception()}")
    batches = [pr for pr in q.recentProgress if pr.numInputRows]
    # Throughput is the sustained rate: from the end of the query's first batch, which also carries
    # the query's one-time start-up (Spark starts the source's driver-side Python runner, the sink's
    # planner and commit workers, clients connect), until the target holds every message.
    first_msgs = batch_messages(batches[0])
    first_end = progress_time(batches[0]) + dict(batches[0].durationMs)["triggerExecution"] / 1000
    b_s = wall_done - first_end
    return BacklogRun((n - first_msgs) / b_s, (n - first_msgs) * body / b_s / MB, first_msgs, first_end - wall0,
                      t_done - t0, t_end - t0, batches, cpu_delta(cpu0, cpu1))


def print_throughput(run: BacklogRun, n: int, per_trigger: int) -> None:
    """(b)'s lines: the sustained rate, the rate with the query's start-up, the first batches' durations, the CPU."""
    b_s = (n - run.first_msgs) / run.rate
    print(f"(b) replication, AvailableNow, max {per_trigger}/trigger, {len(run.batches)} batches: {n - run.first_msgs} "
          f"msgs after the first batch in {b_s:.2f} s = {run.rate:,.0f} msg/s, {run.mbps:.1f} MB/s "
          f"(sustained). Including the query's start-up: {n} msgs on the target {run.total_s:.2f} s after "
          f"writeStream.start() = {n / run.total_s:,.0f} msg/s; first batch ended {run.first_end_s:.2f} s "
          f"after start; query ended after {run.query_s:.2f} s", flush=True)
    for pr in run.batches[:6]:
        d = dict(pr.durationMs)
        print(f"    batch {pr.batchId}: {batch_messages(pr)} msgs in {pr.numInputRows} rows, "
              f"addBatch {d.get('addBatch')} ms, latestOffset {d.get('latestOffset')} ms, "
              f"queryPlanning {d.get('queryPlanning')} ms, walCommit {d.get('walCommit')} ms, "
              f"commitOffsets {d.get('commitOffsets')} ms, triggerExecution {d.get('triggerExecution')} ms")
    print_cpu(run.total_s, run.cpu)

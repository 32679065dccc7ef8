"""(c) of ``benchmarks/replicator.py``: end-to-end latency of a link with a processing-time trigger while a child
process produces at a paced rate; per message, target store time - source born time, joined on UNIQ_KEY."""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

from benchmarks.replicator_children import run_child
from benchmarks.replicator_cluster import TOPIC_LAT, Cluster, read_timestamps, wait_for
from benchmarks.replicator_report import cpu_delta, cpu_snapshot, pct, print_cpu
from broker_store.client import Admin, MessageQueue


def measure_latency(spark: Any, config_path: Path, config: Any, *, row_format: str, queries: list[Any],
                    src: Cluster, dst: Cluster, queues: tuple[list[MessageQueue], list[MessageQueue]],
                    admin_dst: Admin, labels: dict[int, str], rate: float, trigger: float, seconds: float,
                    body: int, batch: int) -> list[int]:
    """(c): the ``bench-lat`` link runs with its processing-time trigger (its query added to ``queries`` for the
    run's clean-up) while the paced producer sends ``rate`` msg/s for ``seconds``; prints (c)'s lines and returns
    the latencies in ms."""
    from jobs.replicate import start_link

    source_queues, target_queues = queues
    q = start_link(spark, str(config_path), config, "bench-lat", available_now=False, row_format=row_format)
    queries.append(q)
    time.sleep(max(3.0, 2 * trigger))  # let the first (empty) batches pass
    cpu0 = cpu_snapshot(labels)
    t0 = time.monotonic()
    paced = run_child("paced", namesrv=src.addr, topic=TOPIC_LAT,
                      queues=[(mq.broker_name, mq.queue_id) for mq in source_queues], rate=rate, batch=batch,
                      seconds=seconds, body=body)
    cpu1 = cpu_snapshot(labels)
    window = time.monotonic() - t0
    wait_for(admin_dst, target_queues, paced["messages"], 300, q)
    from jobs.query_supervisor import stop_queries  # here: the spawned children import the script's modules

    stop_queries([q])  # between two triggers, as the jobs stop theirs
    born = read_timestamps(src.addr, source_queues, "born_timestamp")
    stored = read_timestamps(dst.addr, target_queues, "store_timestamp")
    lat = [stored[k] - born[k] for k in born if k in stored]
    missing = len(born) - len(lat)
    trig_batches = [pr for pr in q.recentProgress if pr.numInputRows]
    print(f"(c) latency at {rate:,.0f} msg/s (0.5 x b; achieved {paced['messages'] / paced['seconds']:,.0f}, "
          f"producer max lateness {paced['max_late_s'] * 1000:.0f} ms) for {seconds:.0f} s, processing-time "
          f"trigger {trigger:g} s: {len(lat)} msgs, p50 {statistics.median(lat):.0f} ms, "
          f"p99 {pct(lat, 99):.0f} ms, max {max(lat)} ms; {missing} not found on the target; "
          f"{len(trig_batches)} non-empty batches, mean "
          f"{statistics.mean(b.numInputRows for b in trig_batches):,.0f} rows", flush=True)
    print_cpu(window, {**cpu_delta(cpu0, cpu1), "bench child (paced producer)": paced["cpu_s"]})
    durations = [dict(b.durationMs) for b in trig_batches]
    if durations:
        print("    mean per non-empty batch: " + ", ".join(
            f"{k} {statistics.mean(d.get(k, 0) for d in durations):.0f} ms"
            for k in ("triggerExecution", "addBatch", "latestOffset", "queryPlanning", "walCommit",
                      "commitOffsets")))
    return lat

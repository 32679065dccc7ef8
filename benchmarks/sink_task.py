"""Sink task benchmark: CPU per message of the replicator's pull-and-send path, without Spark.

    .venv/bin/python benchmarks/sink_task.py              # 200k x 1 KiB messages, 4 queues, 5 repetitions
    .venv/bin/python benchmarks/sink_task.py --messages 50000 --reps 3

What the Spark job's sink task does with ``rowFormat=ranges``
(``connectors.replication.partition_writer.PartitionWriter.add_ranges``: pull every range concurrently,
forward the stored records with ``connectors.replication.forwarding``, send batches to the target), run
in this process against two real single-broker clusters started here (``benchmarks/replicator.py``'s
helpers). Each repetition replicates the whole preloaded topic again and prints this process's CPU per
message (the task thread plus the client's I/O thread) and the task thread's alone, from
``time.process_time`` / ``time.thread_time``.

Why it exists: ``benchmarks/replicator.py`` measures the whole pipeline on 2 shared cores, where a 5 %
change in the task's cost is lost in the run-to-run noise (30-40 %). CPU time of one process repeats within
a few percent, so this is the number to compare before and after changing the sink's hot path. It has no
target of its own; throughput targets are in ``benchmarks/replicator.py``.

``--queues 512`` spreads the messages over the queues (a range per queue, as a 512-queue link's task has) and
prints the brokers' CPU per message too: what a range costs beyond its messages (see benchmarks/replicator.py,
(e)). ``--profile FILE`` writes a cProfile of the measured repetitions.

2026-11-23 (2 vCPUs): process 4.55-4.60 us/msg, task thread 2.91-2.94 us/msg, 1.4 s per 200k messages
(one task alone: ~143k msg/s).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import replicator_cluster as bench  # the sibling benchmark's cluster helpers
from benchmarks.replicator_children import _preload
from benchmarks.replicator_report import _proc_stat

TOPIC = "BENCH_SINK_TASK"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--messages", type=int, default=200_000)
    p.add_argument("--body", type=int, default=1024)
    p.add_argument("--queues", type=int, default=4, help="source queues = ranges of the task (default 4)")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--pull-batch", type=int, default=1024)
    p.add_argument("--max-in-flight", type=int, default=4, help="the sink's maxInFlight (default 4, as a link)")
    p.add_argument("--profile", metavar="FILE", help="write a cProfile of the measured repetitions to FILE")
    args = p.parse_args(argv)

    import pyarrow as pa

    from broker_store.client import Admin, MessageQueue
    from connectors.core.rows import RANGES_ARROW_SCHEMA
    from connectors.replication.partition_writer import PartitionWriter
    from connectors.replication.writer_options import SinkOptions

    root = bench.choose_data_root()
    clusters = []
    try:
        src = bench.start_cluster("bsrc", root)
        clusters.append(src)
        dst = bench.start_cluster("bdst", root)
        clusters.append(dst)
        bench.create_topic(src.addr, "bsrc", TOPIC, args.queues)
        bench.create_topic(dst.addr, "bdst", TOPIC, args.queues)
        asyncio.run(_preload(src.addr, TOPIC, [("bsrc-a", q) for q in range(args.queues)], args.messages,
                                   args.body, spread=args.queues > 8))
        with Admin(src.addr) as admin:
            ends = [admin.max_offset(MessageQueue(TOPIC, "bsrc-a", q)) for q in range(args.queues)]
        n = sum(ends)
        rows = [{"topic": TOPIC, "brokerName": "bsrc-a", "queueId": q, "startOffset": 0, "endOffset": ends[q],
                 "fromEarliest": False, "sourceCluster": "bsrc", "sourceNamesrv": src.addr,
                 "consumerGroup": "CID_BENCH_SINK_TASK", "tagFilter": None, "pullBatchSize": args.pull_batch,
                 "pullTimeoutMs": 10_000, "failOnDataLoss": True,
                 # placed on the driver, as the job's placement planner does with config + link
                 "targetTopic": TOPIC, "targetBroker": "bdst-a", "targetQueueId": q} for q in range(args.queues)]
        ranges = pa.RecordBatch.from_pylist(rows, schema=RANGES_ARROW_SCHEMA)
        options = SinkOptions(namesrv=dst.addr, target_cluster="bdst", source_cluster="bsrc",
                              max_in_flight=args.max_in_flight)
        def brokers_cpu() -> float:
            """CPU seconds of both brokers so far (their pull and send handling is per range too)."""
            return sum(_proc_stat(c.broker.pid)[2] for c in (src, dst))

        warm = pa.RecordBatch.from_pylist([{**rows[0], "endOffset": min(ends[0], 2000)}], schema=RANGES_ARROW_SCHEMA)
        writer = PartitionWriter(options)  # connections, routes, imports: not measured
        writer.add_ranges([warm])
        writer.finish()
        gc.freeze()  # as freeze_worker_heap does in a Spark worker
        print(f"{n} messages of {args.body} B in {args.queues} queues, pulls of {args.pull_batch}", flush=True)
        profiler = cProfile.Profile() if args.profile else None
        for rep in range(args.reps):
            if profiler is not None:
                profiler.enable()
            brokers0 = brokers_cpu()
            cpu0, thread0, wall0 = time.process_time(), time.thread_time(), time.perf_counter()
            writer = PartitionWriter(options)
            writer.add_ranges([ranges])
            message = writer.finish()
            if profiler is not None:
                profiler.disable()
            cpu, thread, wall = (time.process_time() - cpu0, time.thread_time() - thread0,
                                 time.perf_counter() - wall0)
            brokers = brokers_cpu() - brokers0
            if message.delivered != n or message.failures:
                raise RuntimeError(f"delivered {message.delivered} of {n}, {len(message.failures)} failed")
            print(f"rep {rep}: process {1e6 * cpu / n:.2f} us/msg, task thread {1e6 * thread / n:.2f} us/msg, "
                  f"brokers {1e6 * brokers / n:.2f} us/msg, {wall:.2f} s = {n / wall:,.0f} msg/s", flush=True)
        if profiler is not None:
            profiler.dump_stats(args.profile)
        return 0
    finally:
        for cluster in clusters:
            bench.stop_cluster(cluster)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

"""Replicator benchmark: raw pull rate, the Spark job's end-to-end throughput and its latency, in one run.

    .venv/bin/python benchmarks/replicator.py            # 400k x 1 KiB messages, ~9 minutes with (d) and (f)
    .venv/bin/python benchmarks/replicator.py --quick    # 40k messages, ~3.5 minutes
    .venv/bin/python benchmarks/replicator.py --restart-only [--restart-job run_all.py]   # only (f), ~4 minutes
    .venv/bin/python benchmarks/replicator.py --queue-scaling   # only (e), 8 vs 512 queues, ~2 minutes
    .venv/bin/python benchmarks/replicator.py --queue-scaling --backlog-only   # only (e2), ~1.5 minutes

What one run does, in order (everything on this machine: brokers, Spark JVM and Python workers share
its cores, so the numbers are for the whole pipeline on one box):

1. Starts two single-broker clusters, ``bsrc`` and ``bdst`` (one name server + one broker each, real
   processes via ``broker_store.deploy.launcher.ManagedProcess``, free loopback ports). Brokers run with their
   defaults: ASYNC_FLUSH (the CommitLog is fsynced every 500 ms in the background; a send is acked once
   in the page cache, as RocketMQ's published numbers use), 128 MiB CommitLog segments. Data lives in a
   temp dir on a real disk (``/tmp`` unless it is tmpfs, then ``./run``), removed at exit.
2. Preloads the source with ``--messages`` (400k; quick 40k) messages of ``--body`` (1024) bytes over
   ``--queues`` (8) queues, SEND_BATCH_MESSAGE of 128, from a child process (not measured).
3. (a) Raw pull: one process (a child) pulls the whole topic with ``AsyncPullConsumer``, every queue
   concurrently, ``--pull-batch`` (1024) messages per PULL_MESSAGE, decoding every message into a
   ``StoredMessage``. msg/s and MB/s of body bytes; run twice, the faster run counts.
4. Spark on ``local[2]`` through ``jobs.spark_session.build_spark`` / ``start_link`` (the readStream /
   writeStream path of ``jobs/replicate.py``, a generated replicator.yaml, Delta tables on). Warm-up:
   a separate link replicates ``--warmup`` messages with Trigger.AvailableNow; the JVM start and the
   warm-up are timed and reported, not counted.
5. (b) Throughput: the main link replicates the preloaded backlog with Trigger.AvailableNow
   (``max_messages_per_trigger`` = ``--per-trigger``, 4 batches by default). (b) is the sustained rate:
   the messages after the first batch / time from the first batch's end (its progress event) until the
   target's queues hold all N messages (polled every 50 ms). The first batch carries the query's one-time
   start-up (Spark launches the source's driver-side Python runner and the sink's planner and commit
   workers, ~1.5-2.5 s of CPU); the rate including it, from ``writeStream.start()``, is printed beside.
   CPU seconds of each process (brokers, Spark JVM, task workers, Spark's Python runners) over the whole
   window are printed: where the time went.
6. (c) Latency: a child process produces at 0.5 x (b)'s rate (pre-encoded batches of ``--latency-batch`` =
   64, paced, its CPU printed with the others; ``--latency-rate R`` runs only this phase, at R) into a fresh topic
   for ``--latency-seconds`` while a third link runs with a processing-time trigger of
   ``--trigger`` (1 s). Per message: target store timestamp - source born timestamp, joined on the
   UNIQ_KEY the sink preserves. p50 / p99 / max.

7. (d) Time to first message (run before this process starts Spark, so each launch has the machine to
   itself as a job would): ``--first-runs`` (3; quick 1) times, a new link whose source topic holds
   ``--first-messages`` (1000) messages is replicated by ``python jobs/replicate.py --config ...`` launched
   as its own process (its own JVM, as an operator starts it) and SIGTERMed once the target has a message.
   Launch -> the first message's store timestamp on the target, and the same from the job's "Spark session
   up" log line (``jobs.spark_session.SESSION_UP``) -> that message; median, min and max. ``--first-only`` runs
   just this phase; ``--first-job run_all.py`` launches the whole product instead. Each launch's log dir
   (replicator.log, spark.log) is kept in ``run/logs/replicator-first/<link>`` for the timestamps of its steps
   (its data root is removed). (d) and (f)
   first build the driver JVM's class-data archive unless it exists (``jobs.jvm_archive``, as ``make`` does): a
   launch without it is slower and starts a background build beside the job.

8. (f) A restart's own RTO (after (d), also before this process starts Spark): ``--restart-runs`` (3; quick 1)
   times, ``spark-submit jobs/replicate.py`` replicates a new link while a child produces ``--restart-rate`` (500)
   msg/s; after 8 s of replication the job is killed with kill -9 (driver JVM, Python driver, workers) and
   submitted again at once on the same checkpoints. Kill -> the first message the new job stores on the target,
   and kill -> its "Spark session up" line; median, min and max. ``--restart-only`` runs just this phase;
   ``--restart-job run_all.py`` restarts the whole product (checkpoints, config sync, heartbeat) instead.

9. (e) Per-queue costs, side by side at 8 and 512 queues (``--queue-scaling`` runs only this; it defines its
   own last line, ``queue scaling: latestOffset p50 X ms at 512 idle queues (Y ms at 8), target <= 100 ms: ...;
   backlog 512/8 queues R, target >= 0.8: ...``). (e1) trigger overhead: ``jobs/replicate.py`` launched as in
   (d) on a topic of N queues without backlog, a producer trickling ``--idle-rate`` (20) msg/s round-robin so
   every trigger has a batch (Spark reports progress only then), ``--idle-seconds`` (30; quick 15) measured
   after two batches: Spark's latestOffset per batch (the job's progress lines) and the growth of spark.log
   and replicator.log per batch. (e2) backlog: ``--scaling-messages`` (200k; quick 40k) spread over N queues,
   replicated with Trigger.AvailableNow in this process's Spark like (b); the ratio is 512-queue / 8-queue
   sustained msg/s.

Targets: (b)/(a) >= 0.5, (b) >= 30 MB/s (1 MB = 10^6 bytes of message body), (c) p99 <= trigger + 1 s,
(d) session up -> first message <= 3 s, (f) kill -9 -> first replicated message <= 15 s, (e) latestOffset p50
at 512 idle queues <= 100 ms and 512/8-queue backlog throughput >= 0.8.
Exit status 0 whether or not targets are met; 1 on a failed run. Every process and file is removed at
exit (also on Ctrl-C).

Figures of past runs, and what each change moved: ``benchmarks/MEASUREMENTS.md`` ("benchmarks/replicator.py
(results kept from its docstring ...)") and docs/benchmarks.md. The script is this command line over one module
per part: ``replicator_cluster`` (the clusters, topics, replicator.yaml, read-back), ``replicator_children``
(preload, (a), the paced producer), ``replicator_backlog`` ((b), (e2)), ``replicator_latency`` ((c)),
``replicator_first`` ((d)), ``replicator_restart`` ((f)), ``replicator_scaling`` ((e)) and ``replicator_report``
(CPU accounting, the summary).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Any

PROJECT = Path(__file__).resolve().parent.parent
if str(PROJECT) not in sys.path:
    sys.path.insert(0, str(PROJECT))

from benchmarks.replicator_backlog import print_throughput, replicate_backlog  # noqa: E402
from benchmarks.replicator_children import measure_raw_pull, run_child  # noqa: E402
from benchmarks.replicator_cluster import (  # noqa: E402
    SCALING_QUEUES,
    SOURCE,
    TARGET,
    TOPIC_BACKLOG,
    TOPIC_LAT,
    TOPIC_MAIN,
    TOPIC_WARM,
    Cluster,
    choose_data_root,
    create_topic,
    start_cluster,
    stop_cluster,
    stop_spark,
    wait_for,
    write_config,
)
from benchmarks.replicator_first import (  # noqa: E402
    ensure_jvm_archive,
    first_message_run,
    first_message_summary,
    print_first_messages,
)
from benchmarks.replicator_latency import measure_latency  # noqa: E402
from benchmarks.replicator_report import print_summary  # noqa: E402
from benchmarks.replicator_restart import print_restarts, restart_run, restart_summary  # noqa: E402
from benchmarks.replicator_scaling import (  # noqa: E402
    idle_trigger_run,
    print_backlog_run,
    print_idle_run,
    print_scaling_summary,
)
from broker_store.client import Admin, MessageQueue  # noqa: E402
from connectors.core.job_stop import prepare_stop_marker  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="20k messages, shorter latency phase")
    p.add_argument("--messages", type=int, default=None)
    p.add_argument("--body", type=int, default=1024)
    p.add_argument("--queues", type=int, default=8)
    p.add_argument("--pull-batch", type=int, default=1024)
    p.add_argument("--per-trigger", type=int, default=None,
                   help="the links' max_messages_per_trigger (default: 100000; quick 20000)")
    p.add_argument("--warmup", type=int, default=None, help="messages of the warm-up link (default 20000; quick 5000)")
    p.add_argument("--trigger", type=float, default=1.0, help="latency link's trigger interval, seconds")
    p.add_argument("--latency-seconds", type=float, default=None, help="default 30; quick 15")
    p.add_argument("--no-latency", action="store_true", help="skip (c)")
    p.add_argument("--latency-batch", type=int, default=64,
                   help="messages per send of (c)'s paced producer (default 64; see the docstring)")
    p.add_argument("--latency-rate", type=float, default=None,
                   help="skip (a) and (b): run only (c), at this many msg/s")
    p.add_argument("--max-in-flight", type=int, default=4, help="the links' max_in_flight (default 4, as a link)")
    p.add_argument("--max-partitions", type=int, default=None,
                   help="the links' max_partitions (default: unset, i.e. the application's cores)")
    p.add_argument("--master", default="local[2]")
    p.add_argument("--row-format", default="ranges", choices=("ranges", "raw", "arrow", "tuples"),
                   help="the source's rowFormat (the job uses raw)")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="extra Spark setting")
    p.add_argument("--first-runs", type=int, default=None,
                   help="(d): launches of jobs/replicate.py timed to the first message (default 3; quick 1; 0 skips)")
    p.add_argument("--first-only", action="store_true", help="run only (d)")
    p.add_argument("--first-job", default="replicate.py", choices=("replicate.py", "run_all.py"),
                   help="(d): the job launched (run_all.py: with checkpoints, config sync, heartbeat)")
    p.add_argument("--restart-runs", type=int, default=None,
                   help="(f): kill -9 + resubmissions of a running job (default 3; quick 1; 0 skips it)")
    p.add_argument("--restart-only", action="store_true", help="run only (f)")
    p.add_argument("--restart-rate", type=float, default=500.0, help="(f): msg/s produced while the job restarts")
    p.add_argument("--restart-job", default="replicate.py", choices=("replicate.py", "run_all.py"),
                   help="(f): the job killed and resubmitted (run_all.py: with checkpoints, config sync, heartbeat)")
    p.add_argument("--first-messages", type=int, default=1000, help="(d): messages waiting on the source")
    p.add_argument("--queue-scaling", action="store_true",
                   help="run only (e): trigger overhead and backlog throughput, 8 vs 512 queues")
    p.add_argument("--scaling-messages", type=int, default=None,
                   help="(e2): backlog per queue count (default 200000; quick 40000)")
    p.add_argument("--idle-seconds", type=float, default=None, help="(e1): measured seconds per run (default 30; "
                                                                     "quick 15)")
    p.add_argument("--idle-rate", type=float, default=20.0, help="(e1): trickle msg/s over the idle topic's queues")
    p.add_argument("--backlog-only", action="store_true",
                   help="with --queue-scaling: skip (e1), run only the backlog runs (e2) and their ratio")
    p.add_argument("--py-spy", metavar="FILE", default=None,
                   help="record the Spark JVM's Python processes with py-spy (raw collapsed stacks) during (b), "
                        "or during each (e2) run as FILE.<queues>")
    args = p.parse_args(argv)
    scaling = args.queue_scaling
    only = args.first_only or args.restart_only
    n = 0 if args.latency_rate or only or scaling else args.messages or (40_000 if args.quick else 400_000)
    first_runs = 0 if scaling or args.restart_only else (
        args.first_runs if args.first_runs is not None else (1 if args.quick else 3))
    restart_runs = 0 if scaling or args.first_only or args.latency_rate else (
        args.restart_runs if args.restart_runs is not None else (1 if args.quick else 3))
    scaling_n = args.scaling_messages or (40_000 if args.quick else 200_000)
    idle_seconds = args.idle_seconds or (15.0 if args.quick else 30.0)
    per_trigger = args.per_trigger or (20_000 if args.quick else 100_000)
    warm_n = args.warmup or (5_000 if args.quick else 20_000)
    lat_seconds = args.latency_seconds or (15.0 if args.quick else 30.0)

    root = choose_data_root()
    clusters: list[Cluster] = []
    spark = None
    queries: list[Any] = []
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        print(f"data dir {root}; {n} x {args.body} B messages over {args.queues} queues; "
              f"brokers: defaults (ASYNC_FLUSH, flush every 500 ms)", flush=True)
        src = start_cluster(SOURCE, root)
        clusters.append(src)
        dst = start_cluster(TARGET, root)
        clusters.append(dst)
        qs: dict[str, tuple[list[MessageQueue], list[MessageQueue]]] = {}
        for topic in (TOPIC_MAIN, TOPIC_WARM, TOPIC_LAT):
            qs[topic] = (create_topic(src.addr, src.name, topic, args.queues),
                         create_topic(dst.addr, dst.name, topic, args.queues))
        wire = {t: [(mq.broker_name, mq.queue_id) for mq in v[0]] for t, v in qs.items()}
        pre = run_child("preload", namesrv=src.addr, topic=TOPIC_MAIN, queues=wire[TOPIC_MAIN], count=n,
                        body=args.body) if n else {"seconds": 0.0}
        run_child("preload", namesrv=src.addr, topic=TOPIC_WARM, queues=wire[TOPIC_WARM], count=warm_n,
                  body=args.body)
        if scaling:
            for count in SCALING_QUEUES:
                topic = f"{TOPIC_BACKLOG}{count}"
                qs[topic] = (create_topic(src.addr, src.name, topic, count),
                             create_topic(dst.addr, dst.name, topic, count))
                run_child("preload", namesrv=src.addr, topic=topic, count=scaling_n, body=args.body, spread=True,
                          queues=[(mq.broker_name, mq.queue_id) for mq in qs[topic][0]])
        admin_src, admin_dst = Admin(src.addr), Admin(dst.addr)
        ends = [admin_src.max_offset(mq) for mq in qs[TOPIC_MAIN][0]]
        assert sum(ends) == n, (sum(ends), n)
        a_rate = a_mbps = 0.0
        if n:
            print(f"preloaded {n} messages in {pre['seconds']:.1f} s ({n / pre['seconds']:,.0f} msg/s)", flush=True)
            a_rate, a_mbps = measure_raw_pull(src.addr, TOPIC_MAIN, wire[TOPIC_MAIN], ends, args.pull_batch)

        # (d) before this process starts Spark: each launch has the machine to itself, as a job would
        work = root / "spark"
        work.mkdir()
        os.environ["PYTHONPATH"] = os.pathsep.join(
            dict.fromkeys([str(PROJECT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]))
        if first_runs or restart_runs:
            print(ensure_jvm_archive(), flush=True)
        firsts = [first_message_run(i, work, src, dst, args.queues, args.body, args.first_messages, args.trigger,
                                    script=args.first_job) for i in range(first_runs)]
        if firsts:
            print_first_messages(firsts, args.first_messages, args.trigger, args.first_job)
        restarts = [restart_run(i, work, src, dst, args.queues, args.body, args.trigger, args.restart_rate,
                                args.restart_job) for i in range(restart_runs)]
        if restarts:
            print_restarts(restarts, args.restart_rate, args.restart_job)
        if only:
            return 0
        first_line = first_message_summary(firsts) + "\n" + restart_summary(restarts)
        idle_runs = [idle_trigger_run(work, src, dst, count, idle_seconds, args.trigger, args.idle_rate, args.body)
                     for count in (SCALING_QUEUES if scaling and not args.backlog_only else ())]
        for idle in idle_runs:
            print_idle_run(idle, args.trigger, args.idle_rate)

        # Spark
        config_path = work / "replicator.yaml"
        write_config(config_path, work, src, dst, per_trigger, args.trigger, args.max_in_flight, args.max_partitions)
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        from connectors.core.config import load_replicator_config
        from jobs.replicate import start_link
        from jobs.spark_session import build_spark

        config = load_replicator_config(config_path)
        t0 = time.monotonic()
        # As a job runs Spark: its JVM's log4j output and console in a log dir (a query stopped with a batch in
        # flight makes Spark log the batch's abort at ERROR; that is the stop's doing, not news for the console),
        # and the stop marked, so the sink logs that abort at INFO.
        logs = PROJECT / "run" / "logs" / "replicator-bench"  # kept after the run (its data root is removed)
        logs.mkdir(parents=True, exist_ok=True)
        print(f"Spark's logs: {logs}", flush=True)
        prepare_stop_marker()
        spark = build_spark("replicator-bench", master=args.master,
                            settings=dict(kv.split("=", 1) for kv in args.conf),
                            checkpoint_locations=[str(work / "checkpoints")], log_dir=logs)
        spark.sparkContext.setLogLevel("WARN")
        jvm_s = time.monotonic() - t0
        conf = spark.sparkContext.getConf()
        interesting = sorted((k, v) for k, v in conf.getAll()
                             if any(s in k for s in ("arrow", "python", "master", "datasource", "shuffle")))
        print(f"load average before Spark: {os.getloadavg()[0]:.1f} (other jobs on the machine skew every number)")
        print(f"spark {spark.version} {args.master} up in {jvm_s:.1f} s; settings: "
              + ", ".join(f"{k}={v}" for k, v in interesting), flush=True)

        t0 = time.monotonic()
        q = start_link(spark, str(config_path), config, "bench-warm", available_now=True,
                       row_format=args.row_format)
        queries.append(q)
        wait_for(admin_dst, qs[TOPIC_WARM][1], warm_n, 300, q)
        q.awaitTermination(300)
        print(f"warm-up: {warm_n} messages (first query: Python workers start, imports) in "
              f"{time.monotonic() - t0:.1f} s", flush=True)

        labels = {src.broker.pid: "source broker", dst.broker.pid: "target broker",
                  src.namesrv.pid: "name servers", dst.namesrv.pid: "name servers"}
        if scaling:
            backlog = {count: replicate_backlog(spark, config_path, config, f"bench-backlog-{count}",
                                                qs[f"{TOPIC_BACKLOG}{count}"][1], scaling_n, args.body,
                                                args.row_format, admin_dst, labels,
                                                f"{args.py_spy}.{count}" if args.py_spy else None)
                       for count in SCALING_QUEUES}
            for count, run in backlog.items():
                print_backlog_run(count, run, scaling_n, per_trigger)
            print_scaling_summary(idle_runs, backlog)
            admin_src.close()
            admin_dst.close()
            return 0
        b_rate = b_mbps = 0.0
        if not n:
            b_rate = 2 * (args.latency_rate or 0.0)  # (c) runs at half of (b)
        else:
            # (b) throughput
            run = replicate_backlog(spark, config_path, config, "bench-main", qs[TOPIC_MAIN][1], n, args.body,
                                    args.row_format, admin_dst, labels, args.py_spy)
            b_rate, b_mbps = run.rate, run.mbps
            print_throughput(run, n, per_trigger)

        if args.no_latency:
            print(f"\n{first_line}")
            print(f"summary: (a) {a_rate:,.0f} msg/s; (b) {b_rate:,.0f} msg/s {b_mbps:.1f} MB/s; "
                  f"(b)/(a) {b_rate / a_rate:.2f}")
            return 0
        # (c) latency at half of (b)'s rate
        lat = measure_latency(spark, config_path, config, row_format=args.row_format, queries=queries, src=src,
                              dst=dst, queues=qs[TOPIC_LAT], admin_dst=admin_dst, labels=labels, rate=0.5 * b_rate,
                              trigger=args.trigger, seconds=lat_seconds, body=args.body, batch=args.latency_batch)
        print_summary((a_rate, a_mbps), (b_rate, b_mbps), lat, args.trigger, first_line, jvm_s, warm_n)
        admin_src.close()
        admin_dst.close()
        return 0
    except KeyboardInterrupt:
        print("interrupted; cleaning up", file=sys.stderr)
        return 1
    finally:
        stop_spark(queries, spark)
        for c in clusters:
            stop_cluster(c)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

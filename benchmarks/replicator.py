"""Replicator benchmark: raw pull rate, the Spark job's end-to-end throughput and its latency, in one run.

    .venv/bin/python benchmarks/replicator.py            # 400k x 1 KiB messages, ~4 minutes
    .venv/bin/python benchmarks/replicator.py --quick    # 40k messages, ~2 minutes
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
   just this phase. Each launch's log dir (replicator.log, spark.log) is kept in
   ``run/logs/replicator-first/<link>`` for the timestamps of its steps (its data root is removed).

8. (e) Per-queue costs, side by side at 8 and 512 queues (``--queue-scaling`` runs only this; it defines its
   own last line, ``queue scaling: latestOffset p50 X ms at 512 idle queues (Y ms at 8), target <= 100 ms: ...;
   backlog 512/8 queues R, target >= 0.8: ...``). (e1) trigger overhead: ``jobs/replicate.py`` launched as in
   (d) on a topic of N queues without backlog, a producer trickling ``--idle-rate`` (20) msg/s round-robin so
   every trigger has a batch (Spark reports progress only then), ``--idle-seconds`` (30; quick 15) measured
   after two batches: Spark's latestOffset per batch (the job's progress lines) and the growth of spark.log
   and replicator.log per batch. (e2) backlog: ``--scaling-messages`` (200k; quick 40k) spread over N queues,
   replicated with Trigger.AvailableNow in this process's Spark like (b); the ratio is 512-queue / 8-queue
   sustained msg/s.

Targets: (b)/(a) >= 0.5, (b) >= 30 MB/s (1 MB = 10^6 bytes of message body), (c) p99 <= trigger + 1 s,
(d) session up -> first message <= 3 s, (e) latestOffset p50 at 512 idle queues <= 100 ms and 512/8-queue
backlog throughput >= 0.8.
Exit status 0 whether or not targets are met; 1 on a failed run. Every process and file is removed at
exit (also on Ctrl-C).

(e), 2026-11-26, ``benchmarks/replicator.py --queue-scaling --scaling-messages 200000 --per-trigger 50000
--idle-seconds 20`` (one run each; before = main at 99f6b30 with this script; busy 2-vCPU machine, +-10-30 %)::

                                   before (GET_MAX_OFFSET per queue)     after (GET_TOPIC_STATS_INFO per group)
    latestOffset p50, 8 idle         6 ms                                 4 ms
    latestOffset p50, 512 idle      70 ms (p90 109)                      23 ms (p90 32)       target <= 100 MET
    spark.log per batch, 8 / 512    12.2 / 66.0 KB                       10.1 / 9.9 KB        (progress JSON off)
    replicator.log per batch        0.5 / 3.4 KB                         0.6 / 3.2 KB
    backlog msg/s, 8 / 512          81.9k / 52.6k                        91.9k / 60.5k
    512/8 backlog ratio              0.64                                 0.66                target >= 0.8 NOT MET

The 512-queue backlog is now held back by the sink, not the trigger: per batch after the first, latestOffset
94 -> 26 ms, but addBatch (the tasks pulling and sending 512 ranges of ~100 messages instead of 8 of ~6,250)
takes 703 ms against 485 ms at 8 queues: ~0.4 ms per range of per-range pull and send overhead.

Where that per-range cost is (later the same day): ``benchmarks/sink_task.py`` at 50k messages, 8 vs 512 queues
(one task, CPU per message): task thread 1.2 -> 1.9-2.8 us, the task's process (with the client's I/O thread)
2.7-2.9 -> 3.8-6.6 us, the two brokers 6.4-6.8 -> 8-14 us, i.e. per range (one pull and one send) ~0.15 ms in
the task's process and ~0.2-0.35 ms in the brokers' request handling. The sink's own per-range Python work
(a dict of 17 columns, pull settings and an outage per range, a quadratic source-queue lookup without the link
tables, every range's batch held until the task's end) was cut, but (e2) did not move: side by side in one run
(``--queue-scaling --backlog-only --scaling-messages 100000 --per-trigger 25000 --warmup 5000``), before 0.65
(23,775 / 36,763 msg/s), after 0.64 (23,228 / 36,261 msg/s); again with the lighter polling below, before 0.52
(27,753 / 53,330), after 0.59 (28,006 / 47,768); ``--max-in-flight 16`` did not help either (0.54 vs 0.68 at
4). The runs keep 0.9-1.5 of the two cores busy; at 512 queues the extra CPU per batch is the brokers' request
handling (Python brokers, ~0.2-0.3 ms a request; target broker 1.2-1.4 s vs 0.6-0.8 s per 100k messages), the
task processes' client (~0.15 ms a range: framing, futures, the I/O thread) and Spark, not the sink's own work.
Until this change (e2) also polled the target with one GET_MAX_OFFSET per queue every 50 ms (10k requests/s at
512 queues, on the target broker it measures); ``total_messages`` now asks GET_TOPIC_STATS_INFO once per topic
and broker, every 250 ms until 90 % of the messages are there.

(e2) again, 2026-11-26 (fourth session), ``--queue-scaling [--backlog-only] --scaling-messages 200000 --per-trigger
50000``, helpers' test runs sharing the 2 cores (so +-20 %): the 512-queue batch no longer reads a sliver of every
queue. Before: 0.44 (100k messages, 25k per trigger), 0.64-0.67. After, four runs: **0.75, 1.06, 0.83, 0.98**
(512 queues 52-73k msg/s, 8 queues 65-75k). What changed, in order of effect:

* admission (``planning.admit``): when ``maxMessagesPerTrigger`` cannot give every queue with a backlog a full
  pull (``minMessagesPerQueue``, default the pull batch), queues take turns in full ranges instead of 512
  ranges of ~100 messages a batch (2,048 pulls and 2,048 sends for 200k messages -> ~512 of each);
* min offsets of new queues from GET_TOPIC_STATS_INFO (a queue waiting its turn is "new" every trigger: 512
  GET_MIN_OFFSET a trigger before), the driver's placement deciding a whole topic in one Delta write;
* ``spark.sql.execution.arrow.maxRecordsPerBatch`` back at 10000 for the job (one Arrow batch per range row cost
  ~1.3 ms a range), the source group mirror's offsets in one client call (was a thread round trip per queue).

Results, 2026-11-23 (second session), 2 vCPUs, default settings (``.venv/bin/python benchmarks/replicator.py``),
the last three runs (final code: the C forwarding loop, the page-cache warmer)::

    (a) raw pull               206,469 / 225,953 / 214,260 msg/s
    (b) replication, sustained 127,443 / 151,135 / 144,073 msg/s  130.5 / 154.8 / 147.5 MB/s  target >= 30  MET
    (b)/(a)                       0.62 /    0.67 /    0.67                                  target >= 0.5 MET
    (c) at 0.5 x (b) = 63.7k / 75.6k / 72.0k msg/s: p50 899 / 957 / 933 ms,
        p99 1211 / 1222 / 1203 ms, max 1370 / 1310 / 1288 ms                             target <= 2 s  MET

Earlier the same day, in order: before this session's changes (c) had p99 1.39-1.63 s and (b)/(a) was
0.49-0.65; with a task's ranges pulled concurrently and the cheaper harness producer, three runs gave (a)
185-209k, (b) 101-130k msg/s, (b)/(a) 0.55-0.66, (c) p99 1.19-1.21 s; later runs of that code, while (a)
measured 220-253k msg/s, gave (b)/(a) 0.44-0.54: the ratio was at the target's edge until the C loop. The
first session's machine was slower and busier ((a) 80-126k msg/s; (b) 71-79k msg/s; (c) at 0.5 x (b) =
36-39k msg/s had p99 4.0-9.0 s there).

(d), 2026-11-24, ``benchmarks/replicator.py --first-only --first-runs N`` (the start-up numbers;
medians, launch -> session up 3.9-4.7 s throughout, it did not change):

    before (main at 50199e9)                           session up -> first 6.96 s, launch -> first 11.65 s
    + workers import pyspark from bytecode, not
      Spark's pyspark.zip (jobs/worker_python.py)                          4.55 s                    8.72 s
    + task daemon with the modules pre-imported,
      data source imports reader / writer lazily                           4.16 s                    8.45 s
    + Python worker warm-up (read planner, task daemon)
      while the query starts (connectors/replication/warmup.py)            3.1-3.3 s                 7.3-7.5 s

    back to back later (busier machine, 5 launches each): before (0fe8f8f's job with PYSPARK_PYTHON set to
    python3.11, i.e. main's job) 7.32 s (7.15-7.46) / 12.38 s, after 3.45 s (3.03-3.55) / 7.88 s
    - the read-planning warm-up (it never reached the read planner,
      see warmup.py), back to back, 5 launches each: 3.35 s (3.23-3.60) -> 3.14 s (3.06-3.29)
    + the writer's task and commit modules imported where used (write
      planning imports 0.09 instead of 0.21 s), interleaved: 3.11 s (3.08-3.24) -> 3.04-3.07 s (2.83-3.27)

Where (d)'s ~3.1 s go now (one launch traced: timestamps of every Python process Spark starts, of the data
source calls and of the job's steps; both cores busy throughout): 0.07 s warm-up thread and listener; 0.25 s
start_link up to the data source creation's daemon; 0.30 s that cold daemon to the schema() call, 0.14 s
the rest of load(); 0.27 s writeStream.start() (checkpoint metadata) up to the source's runner; 0.22 s the
runner's Python start and pyspark import, 0.27 s the reader's import and construction; 0.06 s initialOffset;
0.21 s latestOffset and the offset log; 0.03 s to the read planner; 0.22 s its cold daemon, 0.21 s its
reader import; 0.15 s to the write planner; 0.23 s its cold daemon, 0.25 s its writer import (~0.1 s since
the writer's lazy imports); 0.33 s job submission and the tasks (pull + send ~0.2 s). There is no
trigger-interval wait before batch 0.

Page cache on this VM: the first run after the machine has been idle pays more. Memory the kernel frees is
handed back to the hypervisor (virtio free-page reporting), so every page the CommitLog's page cache grows
into is faulted in by the host on its first write: ``pwrite`` costs ~2.6 s of CPU per GiB instead of
~0.26 s for a recently freed page (measured by writing 4 GiB into a new file in 64 KiB ``pwrite``s and
timing each GiB; ``perf record`` on the brokers shows 30-50 % of their time in the kernel's
``copy_folio_from_iter_atomic``). The target broker then needs 2.2-2.5 instead of 1.3-1.4 CPU seconds for
(b)'s 400k messages, and (b) is ~100k instead of ~125k msg/s: the first run above. A bare-metal broker, or
one whose page cache is already full, does not pay this; it is left in the numbers. Since then the store
creates segments full size and a warmer thread populates the page cache ``commit_log_warm_ahead`` (64 MiB)
past the write position, as RocketMQ warms its mapped files: the target broker's main thread used 1.36
instead of 1.85 CPU seconds for (b)'s 400k messages (the warmer 0.31 s beside it; /proc/<pid>/task, one
run each way), but (b) did not move beyond the noise (110k vs 116k msg/s): the broker's thread was not
what (b) waits for.

How (b) got there (each step measured with this script; 200k messages and (b) from writeStream.start()
until the step marked *):

    per-message Arrow rows, 8 partitions                       12.5-15.4 MB/s
    rowFormat=raw (one row per pull, the sink decodes)         16.2-19.2 MB/s
    + worker heap frozen, Delta tables kept open, queues
      grouped into maxPartitions = cores, concurrent Delta     20.6-24.5 MB/s   (the previous session)
    + sink forwards stored records without decoding them,
      rowFormat=ranges (the sink pulls, messages never
      cross Spark)                                             29.9 MB/s        Python 41 -> 17 us/msg,
                                                                                JVM 17 -> 7 us/msg
    * 400k messages, sustained rate after the first batch;
      ranges pulled concurrently per task, async pulls         32.9-43.4 MB/s   (a busy machine)
    + broker batch put path column-wise (7.6 vs 9.3 us/msg)    43.4-60.3 MB/s
    + driver JVM C1 only, FileSystem checkpoint manager        73.0-80.4 MB/s
    (second session, a faster and quieter machine)             101-133 MB/s     with the change below;
    + a task's ranges gathered before pulling (concurrent)     99-111 -> 101-130k msg/s, same machine
    + connectors/_forward.c, the per-record loop in C          101-127k -> 127-151k msg/s (130-155 MB/s)

Where the time goes in (b) now (CPU seconds over the ~4 s from writeStream.start() for 400k messages): task
workers 1.2-1.5 s (~3 us per message: ~1.1 on the task thread, 0.3 of it the C forwarding loop, the rest the
client's I/O thread, mostly uvloop and the kernel's loopback copies; ``benchmarks/sink_task.py`` measures
this part alone), target broker 1.4-1.9 s (~3.5 us, its warmer thread included; more when its page cache
grows into fresh memory, see above), the source's driver-side Python runner ~0.9 s (start-up only), JVM
~1 s (C1 compiles, GC, the Python runners' JVM side), source broker ~0.5 s. The machine is 1.2-1.5 cores busy
over the window: a sustained batch of 100k messages takes ~0.8 s, of which the two tasks take ~0.6 s and
Spark's own per-batch work ~0.2 s (timestamps logged at each step: latestOffset -> partitions ~40 ms, writer
and task launch ~40-60 ms, after the tasks ~20 ms to the commit, the sink's commit with its Delta writes
~20-35 ms, then ~55-70 ms of Spark's commit log and progress before the next batch).

(c): the producer of this harness and the source broker storing its messages are on the same 2 cores: at
50-65k msg/s they take ~0.6-0.7 of a core (producer 0.17-0.19 since it sends pre-encoded batches, source
broker 0.42-0.48, most of it the puts); the replicator takes tasks ~0.3, target broker ~0.3, JVM ~0.14,
commit workers ~0.08 (these figures are from before the C forwarding loop; in the final runs, at 64-76k
msg/s: producer 0.18-0.21, source broker 0.50-0.55, tasks 0.21-0.25, target broker 0.36-0.40 cores). A
trigger's batch (~50-75k messages) takes ~0.6-0.75 s, so every batch starts on its trigger and p99 is ~1 s
of trigger wait + the batch. Two fixes of this session made the difference from
p99 1.4-1.6 s: a sink task received its ranges rows one Arrow batch at a time (the job's
``maxRecordsPerBatch`` = 1) and so pulled its queues one after the other instead of concurrently (p99
1.44-1.63 -> 1.19-1.21 s; (b) 99-111k -> 101-130k msg/s); the harness's producer builds each batch's bytes
itself (0.28 -> 0.16 cores at 50k msg/s). Earlier, C2 JIT compilation (~0.3 core, continuous) and Hadoop
forking readlink/chmod for each checkpoint file (walCommit + commitOffsets ~175 ms per batch, now ~25 ms)
were the per-batch costs removed; see ``jobs/replicate.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

PROJECT = Path(__file__).resolve().parent.parent
if str(PROJECT) not in sys.path:
    sys.path.insert(0, str(PROJECT))

from broker_store.client import Admin, MessageQueue  # noqa: E402
from broker_store.config import BrokerConfig, NamesrvConfig  # noqa: E402
from broker_store.deploy.launcher import ManagedProcess  # noqa: E402
from connectors.core.job_stop import mark_stopping, prepare_stop_marker, remove_stop_marker  # noqa: E402

MB = 1_000_000
TOPIC_MAIN, TOPIC_WARM, TOPIC_LAT, TOPIC_FIRST = "BenchRepl", "BenchWarm", "BenchLat", "BenchFirst"
SOURCE, TARGET = "bsrc", "bdst"
FIRST_MESSAGE_TARGET_S = 3.0
"""Target of (d): the first message on the target at most this long after the Spark session is up."""
TARGET_RATIO, TARGET_MBPS, LATENCY_SLACK_S = 0.5, 30.0, 1.0
TOPIC_IDLE, TOPIC_BACKLOG = "BenchIdle", "BenchBacklog"
SCALING_QUEUES = (8, 512)
"""(e): the queue counts compared side by side."""
TARGET_LATEST_OFFSET_MS, TARGET_QUEUE_RATIO = 100.0, 0.8
"""Targets of (e): latestOffset p50 at 512 idle queues, and 512-queue / 8-queue backlog throughput."""
_CLK_TCK = os.sysconf("SC_CLK_TCK")


# -- processes and data -------------------------------------------------------------------------

def choose_data_root() -> Path:
    tmp = Path(tempfile.gettempdir())
    fstype = "?"
    with open("/proc/mounts") as f:
        best = ""
        for line in f:
            _, mnt, fs, *_ = line.split()
            if (str(tmp.resolve()) + "/").startswith(mnt.rstrip("/") + "/") and len(mnt) >= len(best):
                best, fstype = mnt, fs
    if fstype in ("tmpfs", "ramfs"):
        root = PROJECT / "run" / f"bench-repl-{os.getpid()}"
        root.mkdir(parents=True, exist_ok=True)
        return root
    return Path(tempfile.mkdtemp(prefix="rmq-bench-repl-"))


@dataclass
class Cluster:
    name: str
    namesrv: ManagedProcess
    broker: ManagedProcess
    addr: str = ""


def start_cluster(name: str, root: Path, broker_ip: str | None = None) -> Cluster:
    """A name server and one broker on 127.0.0.1; ``broker_ip``: the address the broker advertises (routes
    then lead there, as to a broker behind NAT: ``benchmarks/wan.py`` puts a delay proxy on it)."""
    run = root / name
    run.mkdir(parents=True)
    ns = ManagedProcess("namesrv", NamesrvConfig(listen="127.0.0.1:0"), run, f"{name}-namesrv")
    cluster = Cluster(name, ns, None)  # type: ignore[arg-type]
    addr = ns.start()
    cfg = BrokerConfig(broker_name=f"{name}-a", cluster_name=name, listen="127.0.0.1:0", store_dir=run / "store",
                       namesrv_addrs=[addr], broker_ip=broker_ip)
    cluster.broker = ManagedProcess("broker", cfg, run, f"{name}-a")
    cluster.broker.start()
    cluster.addr = addr
    with Admin(addr) as admin:
        deadline = time.monotonic() + 30
        while f"{name}-a" not in admin.cluster_info().cluster_addr_table.get(name, ()):
            if time.monotonic() > deadline:
                raise RuntimeError(f"broker of {name} did not register")
            time.sleep(0.1)
    return cluster


def stop_spark(queries: Sequence[Any], spark: Any) -> None:
    """A benchmark's clean-up of its Spark side: the job's stop marked, every active query stopped (a failure
    is printed, the clean-up goes on), the session stopped, the marker removed."""
    mark_stopping()
    for q in queries:
        try:
            if q.isActive:
                q.stop()
        except Exception as exc:  # noqa: BLE001 - clean-up goes on
            print(f"stopping query: {exc}", file=sys.stderr)
    if spark is not None:
        spark.stop()
    remove_stop_marker()


def stop_cluster(cluster: Cluster) -> None:
    for proc in (cluster.broker, cluster.namesrv):
        if proc is not None:
            proc.stop()


def create_topic(namesrv: str, cluster: str, topic: str, queues: int) -> list[MessageQueue]:
    with Admin(namesrv) as admin:
        admin.create_topic(topic, queues, cluster=cluster)
        admin.wait_for_route(topic, timeout=15)
        route = admin.topic_route(topic)
    return sorted(MessageQueue(topic, q.broker_name, i) for q in route.queue_datas for i in range(q.read_queue_nums))


def total_messages(admin: Admin, queues: list[MessageQueue]) -> int:
    """Messages in ``queues``: one GET_TOPIC_STATS_INFO per topic and broker group, not one GET_MAX_OFFSET
    per queue (polled every 50 ms, 512 queues' requests cost the target broker and this process more CPU
    than the job's own sends, and skewed (e2)'s 512-queue run against itself)."""
    groups: dict[tuple[str, str], set[int]] = {}
    for mq in queues:
        groups.setdefault((mq.topic, mq.broker_name), set()).add(mq.queue_id)
    total = 0
    for (topic, broker), ids in groups.items():
        offsets = admin.topic_offsets(topic, broker)
        total += sum(offsets[i].max_offset for i in ids if i in offsets)
    return total


# -- CPU accounting (/proc) ---------------------------------------------------------------------

def _proc_stat(pid: int) -> tuple[int, str, float]:
    """(ppid, comm, cpu seconds) of a live process."""
    with open(f"/proc/{pid}/stat") as f:
        raw = f.read()
    comm = raw[raw.index("(") + 1:raw.rindex(")")]
    fields = raw.rpartition(")")[2].split()
    return int(fields[1]), comm, (int(fields[11]) + int(fields[12])) / _CLK_TCK


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def cpu_snapshot(labels: dict[int, str]) -> dict[str, float]:
    """CPU seconds per role: the given pids, this process, and every descendant of this process
    (the Spark JVM and its Python workers), grouped by what they are. Dead processes drop out."""
    stats: dict[int, tuple[int, str, float]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stats[int(entry)] = _proc_stat(int(entry))
            except (OSError, ValueError):
                continue
    me = os.getpid()
    out: dict[str, float] = {}

    def add(role: str, secs: float) -> None:
        out[role] = out.get(role, 0.0) + secs

    def descends(pid: int) -> bool:
        seen = 0
        while pid > 1 and seen < 64:
            if pid == me:
                return True
            pid = stats.get(pid, (0, "", 0.0))[0]
            seen += 1
        return False

    for pid, (_, comm, secs) in stats.items():
        if pid in labels:
            add(labels[pid], secs)
        elif pid == me:
            add("bench driver (py4j client)", secs)
        elif descends(pid):
            cmd = _cmdline(pid)
            if comm == "java":
                add("spark JVM", secs)
            elif "pyspark.daemon" in cmd and "pyspark.sql.worker." in cmd:  # planner / commit runners
                add("python " + cmd.split("pyspark.sql.worker.", 1)[1].split()[0], secs)
            elif "pyspark.daemon" in cmd:
                add("python workers (tasks)", secs)
            elif "pyspark" in cmd:
                add("python " + cmd.split("pyspark.", 1)[-1].split()[0], secs)
            elif "multiprocessing" in cmd:
                add("bench child (producer)", secs)
            else:
                add(f"other ({comm}: {cmd[:60]})", secs)
    return out


def start_py_spy(out: str) -> Any:
    """py-spy (not a project dependency: ``pip install py-spy`` into the venv) on the Spark JVM,
    following its Python children (daemon, forked workers, data source runners)."""
    me = os.getpid()
    jvm = next(pid for pid in map(int, filter(str.isdigit, os.listdir("/proc")))
               if _safe_stat(pid)[:2] == (me, "java"))
    spy = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or shutil.which("py-spy")
    if spy is None:
        raise RuntimeError("--py-spy needs py-spy (pip install py-spy)")
    return subprocess.Popen([spy, "record", "--subprocesses", "--nonblocking", "--format", "raw", "-r", "250",
                             "-o", out, "--pid", str(jvm)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _safe_stat(pid: int) -> tuple[int, str, float]:
    try:
        return _proc_stat(pid)
    except (OSError, ValueError):
        return (0, "", 0.0)


def cpu_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}


# -- child processes: preload, raw pull, paced producer -------------------------------------------

def _child(kind: str, args: dict[str, Any], results: Any) -> None:
    import uvloop

    try:
        results.put(uvloop.run(_CHILDREN[kind](**args)))
    except BaseException as exc:  # reported to the parent, which fails the run
        results.put({"error": f"{type(exc).__name__}: {exc}"})
        raise


def start_child(kind: str, **args: Any) -> tuple[Any, Any]:
    """A child process running ``_CHILDREN[kind](**args)``: (process, its results queue)."""
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    proc = ctx.Process(target=_child, args=(kind, args, results), daemon=True)
    proc.start()
    return proc, results


def run_child(kind: str, **args: Any) -> dict[str, Any]:
    proc, results = start_child(kind, **args)
    try:
        out: dict[str, Any] = results.get()  # what _child put: the child's answer or {"error": ...}
    finally:
        proc.join(30)
        if proc.is_alive():
            proc.kill()
    if "error" in out:
        raise RuntimeError(f"{kind} child failed: {out['error']}")
    return out


def _body(size: int, seq: int) -> bytes:
    head = seq.to_bytes(8, "big")
    return head + bytes((seq + i) & 0xFF for i in range(size - 8)) if size > 8 else head[:size]


async def _preload(namesrv: str, topic: str, queues: list[tuple[str, int]], count: int, body: int,
                   batch: int = 128, concurrency: int = 8, spread: bool = False) -> dict[str, Any]:
    """``count`` messages in batches of ``batch`` from ``concurrency`` senders, each on its own queue of
    ``queues`` (the first ``concurrency`` of them), or with ``spread`` every batch on the next queue."""
    from broker_store.client import AsyncProducer, Message, MessageQueue

    payload = _body(body, 0)
    start = time.perf_counter()
    async with AsyncProducer(namesrv, "PID_BENCH_PRELOAD") as producer:
        next_seq = 0

        async def worker(mq: MessageQueue) -> None:
            nonlocal next_seq
            while next_seq < count:
                n = min(batch, count - next_seq)
                if spread:
                    mq = mqs[next_seq // batch % len(mqs)]
                next_seq += n
                msgs = [Message(topic, payload, {"TAGS": "bench", "KEYS": f"k{next_seq - n + i}"})
                        for i in range(n)]
                await producer.send_batch(msgs, mq)

        mqs = [MessageQueue(topic, b, q) for b, q in queues]
        await asyncio.gather(*(worker(mqs[i % len(mqs)]) for i in range(concurrency)))
    return {"seconds": time.perf_counter() - start}


async def _raw_pull(namesrv: str, topic: str, queues: list[tuple[str, int]], ends: list[int],
                    pull_batch: int) -> dict[str, Any]:
    from broker_store.client import AsyncPullConsumer, MessageQueue, PullStatus

    async with AsyncPullConsumer(namesrv, "CID_BENCH_RAW", heartbeat_interval=None) as consumer:
        # one pull per queue first: connections and routes are not part of the measurement
        for b, q in queues:
            await consumer.pull(MessageQueue(topic, b, q), 0, 1)
        count = 0
        body_bytes = 0

        async def drain(mq: MessageQueue, end: int) -> None:
            nonlocal count, body_bytes
            offset = 0
            while offset < end:
                r = await consumer.pull(mq, offset, min(pull_batch, end - offset))
                if r.status is not PullStatus.FOUND:
                    raise RuntimeError(f"{mq}: {r.status} at {offset}")
                count += len(r.messages)
                body_bytes += sum(len(m.body) for m in r.messages)
                offset = r.next_begin_offset

        start = time.perf_counter()
        await asyncio.gather(*(drain(MessageQueue(topic, b, q), e) for (b, q), e in zip(queues, ends, strict=True)))
        elapsed = time.perf_counter() - start
    return {"messages": count, "bytes": body_bytes, "seconds": elapsed}


async def _paced(namesrv: str, topic: str, queues: list[tuple[str, int]], rate: float, seconds: float,
                 body: int, batch: int) -> dict[str, Any]:
    from broker_store.client import AsyncProducer, Message, MessageQueue
    from connectors.replication.forwarding import encode_entry

    payload = _body(body, 1)
    mqs = [MessageQueue(topic, b, q) for b, q in queues]
    id_prefix = f"{os.getpid():08X}{int(time.time()):08X}"
    # The harness encodes each batch itself and sends it with send_encoded_batch: one entry is a fixed
    # prefix (header, body, properties length) + "UNIQ_KEY\x01<id>\x02", the id a fixed-width counter
    # (UNIQ_KEY is what (c) joins source and target on). Building Message objects and letting the
    # client encode them cost ~5 us per message more: CPU taken from the replicator under test, on the
    # same two cores, that a real producer on its own machine would not take.
    entry = encode_entry(payload, f"UNIQ_KEY\x01{id_prefix}{0:010X}\x02".encode(), 0)
    head = entry[:len(entry) - len(f"{id_prefix}{0:010X}\x02")]
    sent = 0
    late = 0.0
    async with AsyncProducer(namesrv, "PID_BENCH_PACED") as producer:
        await producer.send(Message(topic, payload), mqs[0])  # connect + route, not paced
        sent = 1
        start = time.perf_counter()
        i = 0
        pending: set[asyncio.Task[Any]] = set()
        while True:
            due = start + i * batch / rate
            now = time.perf_counter()
            if due - start >= seconds:
                break
            if due > now:
                await asyncio.sleep(due - now)
            else:
                late = max(late, now - due)
            first = i * batch
            encoded = b"".join([head + f"{id_prefix}{first + k:010X}\x02".encode() for k in range(batch)])
            task = asyncio.ensure_future(producer.send_encoded_batch(topic, encoded, mqs[i % len(mqs)]))
            pending.add(task)
            task.add_done_callback(pending.discard)
            sent += batch
            i += 1
        if pending:
            await asyncio.gather(*pending)
        elapsed = time.perf_counter() - start
    return {"messages": sent, "seconds": elapsed, "max_late_s": late, "cpu_s": time.process_time()}


_CHILDREN: dict[str, Callable[..., Coroutine[Any, Any, dict[str, Any]]]] = {
    "preload": _preload, "raw_pull": _raw_pull, "paced": _paced}


# -- the Spark part -----------------------------------------------------------------------------

def link_yaml(name: str, topic: str, interval: float, work: Path, per_trigger: int, max_in_flight: int,
              max_partitions: int | None = None) -> str:
    """One link of the generated replicator.yaml (``bsrc`` -> ``bdst``, same topic name)."""
    extra = f"    max_partitions: {max_partitions}\n" if max_partitions else ""
    return f"""  - name: {name}
    source: {SOURCE}
    target: {TARGET}
    topics:
      explicit: [{{source: {topic}}}]
    trigger_interval: {interval}
    max_messages_per_trigger: {per_trigger}
    checkpoint_location: {work / 'checkpoints' / name}
    delta_location: {work / 'delta'}
    retry_backoff_ms: 100
    max_in_flight: {max_in_flight}
{extra}"""


def config_yaml(src: Cluster, dst: Cluster, links: list[str]) -> str:
    return f"""version: 1
clusters:
  - name: {src.name}
    namesrv: [{src.addr}]
  - name: {dst.name}
    namesrv: [{dst.addr}]
links:
{''.join(links)}"""


def write_config(path: Path, work: Path, src: Cluster, dst: Cluster, per_trigger: int, trigger: float,
                 max_in_flight: int, max_partitions: int | None = None) -> None:
    links = [link_yaml(name, topic, interval, work, per_trigger, max_in_flight, max_partitions)
             for name, topic, interval in (("bench-warm", TOPIC_WARM, 1.0), ("bench-main", TOPIC_MAIN, 1.0),
                                           ("bench-lat", TOPIC_LAT, trigger))]
    links += [link_yaml(f"bench-backlog-{q}", f"{TOPIC_BACKLOG}{q}", 1.0, work, per_trigger, max_in_flight,
                        max_partitions) for q in SCALING_QUEUES]
    path.write_text(config_yaml(src, dst, links))


def wait_for(admin: Admin, queues: list[MessageQueue], want: int, timeout: float, query: Any) -> float:
    """Poll the target until it holds ``want`` messages; the monotonic time it first did. Every 50 ms once
    90 % are there (the time is that exact), every 250 ms before: the polls cost the target broker and this
    process CPU that the job under measurement then lacks."""
    deadline = time.monotonic() + timeout
    while True:
        have = total_messages(admin, queues)
        if have >= want:
            return time.monotonic()
        if time.monotonic() > deadline:
            raise RuntimeError(f"target has {have} of {want} after {timeout}s")
        if query is not None and not query.isActive and query.exception() is not None:
            raise RuntimeError(f"query failed: {query.exception()}")
        time.sleep(0.05 if have >= 0.9 * want else 0.25)


def read_timestamps(namesrv: str, queues: list[MessageQueue], field: str) -> dict[str, int]:
    """UNIQ_KEY -> born/store timestamp of every message of ``queues``."""
    from broker_store.client import PullConsumer, PullStatus

    out: dict[str, int] = {}
    with PullConsumer(namesrv, "CID_BENCH_READBACK", heartbeat_interval=None) as consumer, Admin(namesrv) as admin:
        for mq in queues:
            offset, end = admin.min_offset(mq), admin.max_offset(mq)
            while offset < end:
                r = consumer.pull(mq, offset, 1024)
                if r.status is PullStatus.FOUND:
                    for m in r.messages:
                        out[m.msg_id] = getattr(m, field)
                offset = r.next_begin_offset
    return out


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


def _log_time(line: str) -> float:
    """Seconds since the epoch of a ``connectors.core.driver_log.LOG_FORMAT`` line (local time, ms)."""
    stamp, millis = line[:23].split(",")
    return time.mktime(time.strptime(stamp, "%Y-%m-%d %H:%M:%S")) + int(millis) / 1000


def first_message_run(run: int, work: Path, src: Cluster, dst: Cluster, queues: int, body: int,
                      messages: int, trigger: float, timeout: float = 120.0) -> FirstMessage:
    """(d): launch ``python jobs/replicate.py`` as an operator does (its own process, JVM and all) on a
    new link whose source topic already holds ``messages``; time the launch, the job's session-up log
    line and the first message's store timestamp on the target; then SIGTERM the job."""
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
        job = launch_job("replicate.py", config, log_dir, console)
        try:
            wait_for(admin, target_queues, 1, timeout, None)
            first_ms = min(read_timestamps(dst.addr, target_queues, "store_timestamp").values())
        finally:
            stop_job(job)
    kept = PROJECT / "run" / "logs" / "replicator-first" / name  # kept after the run (its data root is removed)
    shutil.rmtree(kept, ignore_errors=True)
    shutil.copytree(log_dir, kept)
    with open(log_dir / "replicator.log") as f:
        up = next(_log_time(line) for line in f if f"jobs.query_supervisor: {SESSION_UP} up" in line)
    return FirstMessage(session_s=up - launched, first_s=first_ms / 1000 - launched)


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


def print_first_messages(runs: list[FirstMessage], messages: int, trigger: float) -> None:
    def spread(values: list[float]) -> str:
        return f"{statistics.median(values):.2f} s (min {min(values):.2f}, max {max(values):.2f})"

    print(f"(d) time to first message, {len(runs)} launch(es) of jobs/replicate.py, {messages} messages waiting, "
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


def pct(values: Sequence[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered)) - 1))]


def print_cpu(window: float, usage: dict[str, float]) -> None:
    total = sum(usage.values())
    print(f"    CPU over {window:.1f} s (cores busy; the machine has {os.cpu_count()}): "
          f"total {total / window:.2f}")
    for role, secs in sorted(usage.items(), key=lambda kv: -kv[1]):
        if secs > 0.005:
            print(f"      {role:<28} {secs:7.1f} s  {secs / window:5.2f} cores")


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
    n = 0 if args.latency_rate or args.first_only or scaling else args.messages or (40_000 if args.quick else 400_000)
    first_runs = 0 if scaling else args.first_runs if args.first_runs is not None else (1 if args.quick else 3)
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
            # (a) raw pull, twice, the better run counts: the first may overlap the broker's background flush
            runs = [run_child("raw_pull", namesrv=src.addr, topic=TOPIC_MAIN, queues=wire[TOPIC_MAIN], ends=ends,
                              pull_batch=args.pull_batch) for _ in range(2)]
            raw = min(runs, key=lambda r: r["seconds"])
            a_rate = raw["messages"] / raw["seconds"]
            a_mbps = raw["bytes"] / raw["seconds"] / MB
            print(f"(a) raw pull, 1 process, {args.queues} queues concurrently, {args.pull_batch}/pull: "
                  f"{raw['messages']} msgs in {raw['seconds']:.2f} s = {a_rate:,.0f} msg/s, {a_mbps:.1f} MB/s (runs: "
                  + ", ".join(f"{r['seconds']:.2f} s" for r in runs) + ")", flush=True)

        # (d) before this process starts Spark: each launch has the machine to itself, as a job would
        work = root / "spark"
        work.mkdir()
        os.environ["PYTHONPATH"] = os.pathsep.join(
            dict.fromkeys([str(PROJECT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]))
        firsts = [first_message_run(i, work, src, dst, args.queues, args.body, args.first_messages, args.trigger)
                  for i in range(first_runs)]
        if firsts:
            print_first_messages(firsts, args.first_messages, args.trigger)
        if args.first_only:
            return 0
        first_line = first_message_summary(firsts)
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
                per_batch = [dict(pr.durationMs) for pr in run.batches[1:]] or [dict(run.batches[0].durationMs)]
                print(f"(e2) {count} queues, {scaling_n} messages backlog, AvailableNow, max {per_trigger}/trigger, "
                      f"{len(run.batches)} batches: {run.rate:,.0f} msg/s sustained; mean per batch after the first: "
                      + ", ".join(f"{k} {statistics.mean(x.get(k, 0) for x in per_batch):.0f} ms"
                                  for k in ("triggerExecution", "latestOffset", "queryPlanning", "addBatch")),
                      flush=True)
                print_cpu(run.total_s, run.cpu)
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
            total_s, batches, first_msgs = run.total_s, run.batches, run.first_msgs
            b_rate, b_mbps = run.rate, run.mbps
            b_s = (n - first_msgs) / b_rate
            print(f"(b) replication, AvailableNow, max {per_trigger}/trigger, {len(batches)} batches: {n - first_msgs} "
                  f"msgs after the first batch in {b_s:.2f} s = {b_rate:,.0f} msg/s, {b_mbps:.1f} MB/s "
                  f"(sustained). Including the query's start-up: {n} msgs on the target {total_s:.2f} s after "
                  f"writeStream.start() = {n / total_s:,.0f} msg/s; first batch ended {run.first_end_s:.2f} s "
                  f"after start; query ended after {run.query_s:.2f} s", flush=True)
            for pr in batches[:6]:
                d = dict(pr.durationMs)
                print(f"    batch {pr.batchId}: {batch_messages(pr)} msgs in {pr.numInputRows} rows, "
                      f"addBatch {d.get('addBatch')} ms, latestOffset {d.get('latestOffset')} ms, "
                      f"queryPlanning {d.get('queryPlanning')} ms, walCommit {d.get('walCommit')} ms, "
                      f"commitOffsets {d.get('commitOffsets')} ms, triggerExecution {d.get('triggerExecution')} ms")
            print_cpu(total_s, run.cpu)

        if args.no_latency:
            print(f"\n{first_line}")
            print(f"summary: (a) {a_rate:,.0f} msg/s; (b) {b_rate:,.0f} msg/s {b_mbps:.1f} MB/s; "
                  f"(b)/(a) {b_rate / a_rate:.2f}")
            return 0
        # (c) latency at half of (b)'s rate
        rate = 0.5 * b_rate
        q = start_link(spark, str(config_path), config, "bench-lat", available_now=False,
                       row_format=args.row_format)
        queries.append(q)
        time.sleep(max(3.0, 2 * args.trigger))  # let the first (empty) batches pass
        cpu0 = cpu_snapshot(labels)
        t0 = time.monotonic()
        paced = run_child("paced", namesrv=src.addr, topic=TOPIC_LAT, queues=wire[TOPIC_LAT], rate=rate,
                          batch=args.latency_batch,
                          seconds=lat_seconds, body=args.body)
        cpu1 = cpu_snapshot(labels)
        window = time.monotonic() - t0
        wait_for(admin_dst, qs[TOPIC_LAT][1], paced["messages"], 300, q)
        from jobs.query_supervisor import stop_queries  # here: the spawned children import this module

        stop_queries([q])  # between two triggers, as the jobs stop theirs
        born = read_timestamps(src.addr, qs[TOPIC_LAT][0], "born_timestamp")
        stored = read_timestamps(dst.addr, qs[TOPIC_LAT][1], "store_timestamp")
        lat = [stored[k] - born[k] for k in born if k in stored]
        missing = len(born) - len(lat)
        trig_batches = [pr for pr in q.recentProgress if pr.numInputRows]
        print(f"(c) latency at {rate:,.0f} msg/s (0.5 x b; achieved {paced['messages'] / paced['seconds']:,.0f}, "
              f"producer max lateness {paced['max_late_s'] * 1000:.0f} ms) for {lat_seconds:.0f} s, processing-time "
              f"trigger {args.trigger:g} s: {len(lat)} msgs, p50 {statistics.median(lat):.0f} ms, "
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

        ratio = b_rate / a_rate if a_rate else 0.0
        p99 = pct(lat, 99)
        print("\nsummary")
        print(f"  (a) raw pull            {a_rate:>10,.0f} msg/s  {a_mbps:6.1f} MB/s")
        print(f"  (b) replication         {b_rate:>10,.0f} msg/s  {b_mbps:6.1f} MB/s   "
              f"target >= {TARGET_MBPS:.0f} MB/s: "
              f"{'MET' if b_mbps >= TARGET_MBPS else 'NOT MET'}")
        print(f"  (b)/(a)                 {ratio:>10.2f}                  target >= {TARGET_RATIO}: "
              f"{'MET' if ratio >= TARGET_RATIO else 'NOT MET'}")
        print(f"  (c) latency p50 / p99   {statistics.median(lat):>7.0f} / {p99:.0f} ms          target p99 <= "
              f"{(args.trigger + LATENCY_SLACK_S) * 1000:.0f} ms: "
              f"{'MET' if p99 <= (args.trigger + LATENCY_SLACK_S) * 1000 else 'NOT MET'}")
        print(first_line)
        print(f"  warm-up (excluded)      JVM {jvm_s:.1f} s, first query {warm_n} msgs")
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

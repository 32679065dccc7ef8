"""Checkpoint connector benchmark: the recovery point of a running job, i.e. the age of the newest complete
checkpoint of a consumer group while source traffic, replication and checkpoints all run.

    .venv/bin/python benchmarks/checkpoint_progress.py                      # run_all, 1 s interval, 30 s, ~1.5 min
    .venv/bin/python benchmarks/checkpoint_progress.py --seconds 60 --interval 2
    .venv/bin/python benchmarks/checkpoint_progress.py --read-path          # the progress reads alone (below)

What one run does: starts two single-broker clusters (``benchmarks/replicator.py``'s helpers: real processes,
free loopback ports, data in a temp dir), a topic of ``--queues`` (4) queues on both, and a replicator.yaml
with one link (replication trigger 1 s, ``checkpoints.interval`` = ``--interval``, 1 s). A traffic thread
produces ``--rate`` (50) msg/s round-robin and a source consumer group follows ``--behind`` (40) messages per
queue behind the producer, committing its offsets, "while everything runs". Then
``jobs/run_all.py --config ...`` is launched as its own process (its own JVM, as an operator starts the main
job: replication, checkpoints, heartbeat, config sync). Once the group has a first translated checkpoint and
``--warmup`` (5) seconds more have passed, the recovery point (``connectors.checkpoint.tables.checkpoint_age_ms``:
now minus the snapshot time of the newest checkpoint that translated the group completely; the
``replicator_checkpoint_age_seconds`` gauge) is sampled every 0.25 s for ``--seconds`` (30). A consumer failing
over to the target at a sample's time resumes from the group's source position that old.

Target: p99 of the samples <= interval + 1 s. Its last line is exactly
``recovery point: p99 X ms over N samples (p50 Y ms, max Z ms), target <= T ms (interval + 1 s): MET|NOT MET``.
Exit status 0 whether or not the target is met; 1 on a failed run. Every process and file is removed at exit.

2026-11-26, 2 shared vCPUs, defaults (``benchmarks/checkpoint_progress.py --seconds 30``)::

    run_all: first translated checkpoint 17.3 s after launch; 4 queues, 50 msg/s, group 40 behind; load average 3.0
    checkpoint age over 30 s: p50 790 ms, p90 1186 ms, p99 1261 ms, max 1335 ms; samples over the target: 0
    recovery point: p99 1261 ms over 80 samples (p50 790 ms, max 1335 ms), target <= 2000 ms (interval + 1 s): MET

``--read-path``: the per-round cost of bringing the link's progress (offset map + committed offsets) up to date,
on a long-lived link's Delta tables, without Spark or brokers (what this benchmark measured before). Builds
``<tmp>/offset_map`` with ``--rows`` rows as a link writes them (``--map-queues`` source queues, 10 messages per
queue per batch, one source offset skipped every 7th batch so runs do not all merge) in commits of
``--rows-per-commit``, and the ``offsets`` table with ``--offsets-rows`` rows. Then each round appends one batch
(a row per queue to both tables, as ``LinkTables.commit_batch``) and times:

* full: ``link_state.read_link_progress`` (the whole offset map read and the translator rebuilt; what the
  checkpoint writer did every round before ``LinkProgressReader``);
* incremental: ``link_state.LinkProgressReader.read`` (only the commits since the last round), when the
  code under test has it (run with ``PYTHONPATH`` at an older checkout to time its full read alone).

Both include the committed offsets: the full read reads the offsets table whole
(``LinkTables.latest_offsets``), the incremental one folds in the rows appended since (``LatestOffsets``).
Prints the median and max per round, and the translator's runs kept.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from connectors.checkpoint import link_state
from connectors.replication.tables import OFFSET_MAP, OFFSETS, LinkTables

if TYPE_CHECKING:
    from benchmarks.replicator_cluster import Cluster


class Link:
    """Offset-map and offsets rows of a steady link, batch by batch."""

    def __init__(self, queues: int) -> None:
        self.queues = queues
        self.batch = 0
        self.source = [0] * queues
        self.target = [0] * queues

    def next_batch(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        at = datetime.fromtimestamp(1_700_000_000 + self.batch, tz=UTC)
        maps, offsets = [], []
        for q in range(self.queues):
            if self.batch % 7 == 6:
                self.source[q] += 1  # a skipped message (loop guard, tag filter) ends a run
            first, target = self.source[q], self.target[q]
            maps.append({"source_topic": "Orders", "source_broker": "src-a", "source_queue_id": q,
                         "source_first_offset": first, "source_last_offset": first + 9, "target_topic": "Orders",
                         "target_broker": "dst-a", "target_queue_id": q, "target_first_offset": target,
                         "target_last_offset": target + 9, "messages": 10, "batch_id": self.batch,
                         "query_id": "bench", "committed_at": at})
            self.source[q], self.target[q] = first + 10, target + 10
            offsets.append({"cluster": "src", "topic": "Orders", "broker_name": "src-a", "queue_id": q,
                            "next_offset": self.source[q], "batch_id": self.batch, "query_id": "bench",
                            "commit_version": self.batch, "updated_at": at})
        self.batch += 1
        return maps, offsets


def read_path(args: argparse.Namespace) -> int:
    """``--read-path``: the per-round cost of the progress reads (see the module docstring)."""
    with tempfile.TemporaryDirectory(prefix="ckpt-bench-") as tmp:
        tables = LinkTables(Path(tmp), source_cluster="src")
        link = Link(args.map_queues)
        maps: list[dict[str, Any]] = []
        offsets: list[dict[str, Any]] = []
        started = time.monotonic()
        while link.batch * args.map_queues < max(args.rows, args.offsets_rows):
            m, o = link.next_batch()
            if link.batch * args.map_queues <= args.rows:
                maps += m
            if link.batch * args.map_queues <= args.offsets_rows:
                offsets += o
            if len(maps) >= args.rows_per_commit:
                tables.append(OFFSET_MAP, maps)
                maps = []
            if len(offsets) >= args.rows_per_commit:
                tables.append(OFFSETS, offsets)
                offsets = []
        tables.append(OFFSET_MAP, maps)
        tables.append(OFFSETS, offsets)
        print(f"built {tables.read(OFFSET_MAP).num_rows} offset-map rows, {tables.read(OFFSETS).num_rows} offsets "
              f"rows ({args.map_queues} queues) in {time.monotonic() - started:.1f}s")

        def round_trip(read: Any, rounds: int) -> tuple[list[float], Any]:
            times, progress = [], None
            for _ in range(rounds):
                m, o = link.next_batch()
                tables.append(OFFSET_MAP, m)
                tables.append(OFFSETS, o)
                t0 = time.perf_counter()
                progress = read()
                times.append((time.perf_counter() - t0) * 1000)
            return times, progress

        def report(name: str, times: list[float], progress: Any) -> None:
            kept = progress.translator.size() if hasattr(progress.translator, "size") else "?"
            print(f"{name}: median {statistics.median(times):.1f} ms, max {max(times):.1f} ms per round over "
                  f"{len(times)} rounds; {progress.runs} rows read last round, {kept} runs kept")

        full, progress = round_trip(lambda: link_state.read_link_progress(tables), args.full_rounds)
        report("full read  ", full, progress)
        if hasattr(link_state, "LinkProgressReader"):
            reader = link_state.LinkProgressReader(tables)
            t0 = time.perf_counter()
            reader.read()
            print(f"incremental: first round (a full read) {(time.perf_counter() - t0) * 1000:.1f} ms")
            times, progress = round_trip(reader.read, args.rounds)
            report("incremental", times, progress)
            if hasattr(progress.translator, "forget_below"):
                heads = {q: n - 5 for q, n in progress.replicated_next.items()}  # groups 5 messages behind
                folded = progress.translator.forget_below(heads)
                print(f"forget_below (every group 5 behind the head): {folded} runs folded, "
                      f"{progress.translator.size()} kept")
            offsets_only = []
            for _ in range(5):
                t0 = time.perf_counter()
                tables.latest_offsets()
                offsets_only.append((time.perf_counter() - t0) * 1000)
            print(f"(LinkTables.latest_offsets alone, the offsets table read whole: median "
                  f"{statistics.median(offsets_only):.1f} ms)")
    return 0




# -- the recovery point of a running job --------------------------------------------------------------------

TOPIC = "BenchRecoveryPoint"
LINK = "bench-rpo"
GROUP = "CID_BENCH_RPO"
SAMPLE_S = 0.25


def config_text(src: Cluster, dst: Cluster, work: Path, interval: float) -> str:
    """replicator.yaml: one link with checkpoints every ``interval`` seconds (the replicator benchmark's layout)."""
    from benchmarks import replicator_cluster as bench

    link = bench.link_yaml(LINK, TOPIC, 1.0, work, 100_000, 4)
    return bench.config_yaml(src, dst, [link + f"    checkpoints:\n      interval: {interval}\n"])


def traffic(namesrv: str, queues: list[Any], rate: float, behind: int, stop: threading.Event) -> None:
    """Produce ``rate`` msg/s in sends of 10, round-robin over ``queues``, while the group ``GROUP`` consumes
    up to ``behind`` messages per queue behind the producer and commits its offsets (no heartbeats: a group
    that is not online on the target, as a failover finds it)."""
    from broker_store.client import Admin, Producer, PullConsumer, PullStatus, new_message

    producer = Producer(namesrv, "PID_BENCH_RPO")
    consumer = PullConsumer(namesrv, GROUP, heartbeat_interval=None)
    admin = Admin(namesrv)
    n = 0
    try:
        while not stop.is_set():
            started = time.monotonic()
            producer.send_batch([new_message(TOPIC, f"m{n + i}".encode()) for i in range(10)],
                                queues[(n // 10) % len(queues)])
            n += 10
            for mq in queues:
                offset = consumer.query_consumer_offset(mq) or 0
                upto = admin.max_offset(mq) - behind
                if upto > offset:
                    result = consumer.pull(mq, offset, upto - offset)
                    if result.status is PullStatus.FOUND:
                        consumer.update_consumer_offset(mq, result.next_begin_offset)
            stop.wait(max(0.0, 10 / rate - (time.monotonic() - started)))
    finally:
        consumer.close()
        producer.close()
        admin.close()


def recovery_point(args: argparse.Namespace) -> int:
    """The default mode (see the module docstring)."""
    import shutil
    import subprocess

    from benchmarks import replicator_cluster as bench  # the sibling benchmark's cluster helpers
    from benchmarks.replicator_first import launch_job, stop_job
    from connectors.checkpoint.tables import CheckpointTables, checkpoint_age_ms

    root = bench.choose_data_root()
    clusters: list[Any] = []
    job: subprocess.Popen[bytes] | None = None
    stop = threading.Event()
    worker: threading.Thread | None = None
    try:
        src = bench.start_cluster(bench.SOURCE, root)
        clusters.append(src)
        dst = bench.start_cluster(bench.TARGET, root)
        clusters.append(dst)
        queues = bench.create_topic(src.addr, src.name, TOPIC, args.queues)
        bench.create_topic(dst.addr, dst.name, TOPIC, args.queues)
        work = root / "job"
        work.mkdir()
        config = work / "replicator.yaml"
        config.write_text(config_text(src, dst, work, args.interval))
        worker = threading.Thread(target=traffic, args=(src.addr, queues, args.rate, args.behind, stop), daemon=True)
        worker.start()
        # The job's Spark workers import this checkout, not whatever the interpreter's path has (a .pth file)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            dict.fromkeys([str(bench.PROJECT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]))}
        launched = time.monotonic()
        with open(work / "console.txt", "wb") as console:
            job = launch_job("run_all.py", config, work / "logs", console, env)
        tables = CheckpointTables(work / "delta" / LINK)
        deadline = time.monotonic() + args.timeout
        while tables.newest_translated_ms(GROUP) is None:
            if time.monotonic() > deadline or job.poll() is not None:
                raise RuntimeError(f"no translated checkpoint of {GROUP} after {time.monotonic() - launched:.0f} s "
                                   f"(see {work / 'console.txt'})")
            time.sleep(SAMPLE_S)
        first = time.monotonic() - launched
        time.sleep(args.warmup)
        ages: list[int] = []
        end = time.monotonic() + args.seconds
        while time.monotonic() < end:
            age = checkpoint_age_ms(tables, int(time.time() * 1000), GROUP)
            if age is not None:
                ages.append(age)
            time.sleep(SAMPLE_S)
        if job.poll() is not None:
            raise RuntimeError(f"the job exited with {job.returncode} while sampled (see {work / 'console.txt'})")
        ages.sort()
        target = round(args.interval * 1000) + 1000
        p99 = pct(ages, 99)
        print(f"run_all: first translated checkpoint {first:.1f} s after launch; {args.queues} queues, {args.rate:g} "
              f"msg/s, group {args.behind} behind; load average {os.getloadavg()[0]:.1f}")
        print(f"checkpoint age over {args.seconds:g} s: p50 {statistics.median(ages):.0f} ms, p90 {pct(ages, 90)} ms, "
              f"p99 {p99} ms, max {ages[-1]} ms; samples over the target: {sum(a > target for a in ages)}")
        print(f"recovery point: p99 {p99} ms over {len(ages)} samples (p50 {statistics.median(ages):.0f} ms, max "
              f"{ages[-1]} ms), target <= {target} ms (interval + 1 s): {'MET' if p99 <= target else 'NOT MET'}",
              flush=True)
        return 0
    finally:
        stop.set()
        if worker is not None:
            worker.join(10)
        if job is not None and job.poll() is None:
            stop_job(job)
        for cluster in clusters:
            bench.stop_cluster(cluster)
        shutil.rmtree(root, ignore_errors=True)


def pct(values: list[int], p: float) -> int:
    """The p-th percentile of sorted ``values`` (nearest rank)."""
    return values[min(len(values) - 1, max(0, round(p / 100 * len(values)) - 1))]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--interval", type=float, default=1.0, help="checkpoints.interval, seconds (default 1)")
    p.add_argument("--seconds", type=float, default=30.0, help="sampled seconds (default 30)")
    p.add_argument("--warmup", type=float, default=5.0, help="seconds after the first checkpoint before sampling")
    p.add_argument("--queues", type=int, default=4, help="queues of the replicated topic (default 4)")
    p.add_argument("--rate", type=float, default=50.0, help="produced msg/s (default 50)")
    p.add_argument("--behind", type=int, default=40, help="messages per queue the source group trails by")
    p.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for the first checkpoint")
    p.add_argument("--read-path", action="store_true", help="time the progress reads alone (no Spark, no brokers)")
    p.add_argument("--rows", type=int, default=100_000, help="--read-path: offset-map rows before the rounds")
    p.add_argument("--offsets-rows", type=int, default=100_000, help="--read-path: offsets rows before the rounds")
    p.add_argument("--map-queues", type=int, default=20, help="--read-path: source queues of the tables")
    p.add_argument("--rows-per-commit", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--full-rounds", type=int, default=3, help="--read-path: rounds timed with the full read")
    args = p.parse_args(argv)
    try:
        return read_path(args) if args.read_path else recovery_point(args)
    except (RuntimeError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())

"""A link's Delta history after a long run: the restart's resume time and memory, and the tables' disk.

Builds one link's tables (``connectors.replication.tables.LinkTables``) for a simulated history of
``--batches`` triggers of one second (default 604,800: a week) over ``--queues`` source queues (default 128),
``--advancing`` of them (default all) advancing every batch: the offsets history and the offset map get a row
per advancing queue and batch, metrics a row per batch. The bulk of it is appended through the table code in
chunks of ``--chunk`` batches (an Arrow table per chunk: ``DeltaTableSet.append``), the simulated clock at the
chunk's end, and the product's maintenance round (``connectors.core.maintenance``: retention with the link's
default ``HistorySettings``, compaction, checkpoint, log clean-up, vacuum) runs after each chunk, as the
running writer's rounds would; the last ``--tail`` batches are real ``commit_batch`` calls (one per simulated
second), which write ``current_offsets`` and the per-batch files a running job leaves, then one more round.

Then, in a fresh process each (the reader's driver at a restart), it times the resume point as the reader
reads it: ``latest_offsets`` (a restart without the Spark checkpoint) and ``delivered_offsets`` (the first
batch of a restart from the checkpoint), and the process's peak RSS. Last line::

    history B batches x Q queues: resume R s, peak rss M MB, disk D MB, files F

R and M are the worse of the two paths; D and F count every file under the link's directory.

Two clocks: row retention runs on the simulated clock (rows are days old), file and log retention
(``file_retention``, 10 minutes) on versions seen by rounds of the simulated clock, but delta-rs deletes log
entries by their files' real age: a build that takes minutes keeps its log entries (a running job's log holds
``file_retention`` of commits per table: ~600 at a 1 s trigger).

    python benchmarks/history.py --batches 10000
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pyarrow as pa
import pyarrow.compute as pc

from broker_store.client import MessageQueue
from connectors.core.history_settings import HistorySettings
from connectors.replication.records import BatchMetrics, OffsetMapping
from connectors.replication.tables import CURRENT_OFFSETS, METRICS, OFFSET_MAP, OFFSETS, LinkTables
from tests.support.clocks import MillisClock

START_MS = 1_700_000_000_000
TRIGGER_MS = 1000
MESSAGES = 50
"""Messages per advancing queue per batch."""
TOPIC, BROKER, TARGET_BROKER = "Orders", "src-a", "dst-a"
QUERY_ID = "0d6f4f0e-8a55-4a43-9c1e-5a1f3c2b7e91"


def next_offset(batch: Any, queue: Any) -> Any:
    """Next source offset of ``queue`` after ``batch`` (Arrow arrays): about MESSAGES a batch, uneven."""
    jitter = pc.bit_wise_and(pc.add(pc.multiply(batch, 7), pc.multiply(queue, 13)), 15)
    return pc.add(pc.multiply(pc.add(batch, 1), MESSAGES), jitter)


def chunk_tables(first: int, last: int, queues: int, advancing: int) -> dict[str, pa.Table]:
    """The offsets, offset_map and metrics rows of batches first..last-1 (round-robin advancing queues)."""
    # row r is the (r % advancing)-th queue advancing in batch r // advancing, which is queue r % queues
    # (round robin); the same queue advanced last at row r - queues
    rows = pa.array(range(first * advancing, last * advancing), pa.int64())
    batch = pc.divide(rows, advancing)
    queue = pc.subtract(rows, pc.multiply(pc.divide(rows, queues), queues))
    n = len(rows)
    at = pc.add(pc.multiply(batch, TRIGGER_MS * 1000), START_MS * 1000).cast(pa.timestamp("us", tz="UTC"))
    before = pc.subtract(rows, queues)
    source_first = pc.if_else(pc.less(before, 0), 0, next_offset(pc.divide(pc.max_element_wise(before, 0), advancing),
                                                                  queue))
    source_next = next_offset(batch, queue)
    target_first = pc.add(source_first, pc.multiply(queue, 3))
    span = pc.subtract(source_next, source_first)
    strings = {name: pa.array([value] * n) for name, value in (
        ("cluster", "src"), ("topic", TOPIC), ("broker", BROKER), ("target", TARGET_BROKER), ("query", QUERY_ID))}
    queue32 = queue.cast(pa.int32())
    offsets = pa.table({"cluster": strings["cluster"], "topic": strings["topic"], "broker_name": strings["broker"],
                        "queue_id": queue32, "next_offset": source_next, "batch_id": batch,
                        "query_id": strings["query"], "commit_version": batch, "updated_at": at})
    offset_map = pa.table({
        "source_topic": strings["topic"], "source_broker": strings["broker"], "source_queue_id": queue32,
        "source_first_offset": source_first, "source_last_offset": pc.subtract(source_next, 1),
        "target_topic": strings["topic"], "target_broker": strings["target"], "target_queue_id": queue32,
        "target_first_offset": target_first, "target_last_offset": pc.subtract(pc.add(target_first, span), 1),
        "messages": span, "batch_id": batch, "query_id": strings["query"], "committed_at": at})
    batches = pa.array(range(first, last), pa.int64())
    m = len(batches)
    metrics = pa.table({
        "query_id": pa.array([QUERY_ID] * m), "batch_id": batches, "messages": pa.array([MESSAGES * advancing] * m),
        "bytes": pa.array([MESSAGES * advancing * 200] * m), "skipped_loop": pa.array([0] * m),
        "failed": pa.array([0] * m), "latency_p50_ms": pa.array([5] * m), "latency_p99_ms": pa.array([20] * m),
        "latency_max_ms": pa.array([30] * m), "record_age_ms": pa.array([800] * m),
        "wall_time_ms": pa.array([300] * m),
        "committed_at": pc.add(pc.multiply(batches, TRIGGER_MS * 1000), START_MS * 1000).cast(
            pa.timestamp("us", tz="UTC"))})
    return {OFFSETS: offsets, OFFSET_MAP: offset_map, METRICS: metrics}


def build(location: Path, batches: int, queues: int, advancing: int, chunk: int, tail: int) -> dict[str, Any]:
    clock = MillisClock(START_MS)
    tables = LinkTables(location, source_cluster="src", clock=clock, history=HistorySettings(),
                        map_floors=lambda: {}, background_maintenance=False)
    assert tables.maintenance is not None
    tables.create(CURRENT_OFFSETS)  # as a new link's first commit does (not a link upgraded from its history)
    started = time.monotonic()
    bulk = max(0, batches - tail)
    rounds = []
    for first in range(0, bulk, chunk):
        last = min(bulk, first + chunk)
        for name, rows in chunk_tables(first, last, queues, advancing).items():
            tables.append(name, rows)
        clock.now_ms = START_MS + last * TRIGGER_MS
        t0 = time.monotonic()
        tables.maintenance.run_round(clock.now_ms)
        rounds.append(time.monotonic() - t0)
    built = time.monotonic() - started
    commits = []
    for batch in range(bulk, batches):
        clock.now_ms = START_MS + batch * TRIGGER_MS
        advanced = {MessageQueue(TOPIC, BROKER, (batch * advancing + i) % queues): 0 for i in range(advancing)}
        end = chunk_tables(batch, batch + 1, queues, advancing)
        offsets = dict(zip([MessageQueue(TOPIC, BROKER, q) for q in end[OFFSETS]["queue_id"].to_pylist()],
                           end[OFFSETS]["next_offset"].to_pylist(), strict=True))
        maps = [OffsetMapping(TOPIC, BROKER, r["source_queue_id"], r["source_first_offset"], r["source_last_offset"],
                              TOPIC, TARGET_BROKER, r["target_queue_id"], r["target_first_offset"],
                              r["target_last_offset"], r["messages"]) for r in end[OFFSET_MAP].to_pylist()]
        assert set(offsets) == set(advanced)
        t0 = time.monotonic()
        tables.commit_batch(QUERY_ID, batch, offsets, maps, [], BatchMetrics(MESSAGES * advancing, 0))
        commits.append(time.monotonic() - t0)
    clock.now_ms = START_MS + batches * TRIGGER_MS
    tables.maintenance.run_round(clock.now_ms)
    return {"build_s": built, "rounds": len(rounds), "round_p50_s": statistics.median(rounds) if rounds else 0.0,
            "round_max_s": max(rounds, default=0.0),
            "commit_p50_ms": 1000 * statistics.median(commits) if commits else 0.0,
            "commit_max_ms": 1000 * max(commits, default=0.0), "total_s": time.monotonic() - started}


def peak_rss_mb() -> float:
    """This process's peak resident set size (VmHWM; ru_maxrss would carry the parent's across fork/exec)."""
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure(location: str, path: str) -> None:
    """Child process: one resume read, then its time and the process's peak RSS as JSON."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as fh:
            fh.write("5")  # reset the peak RSS to the current one: the interpreter and its imports
    except OSError:
        pass
    t0 = time.perf_counter()
    tables = LinkTables(location, source_cluster="src")
    offsets = tables.latest_offsets() if path == "latest" else tables.delivered_offsets()
    seconds = time.perf_counter() - t0
    rss_mb = peak_rss_mb()
    print(json.dumps({"path": path, "seconds": seconds, "rss_mb": rss_mb, "queues": len(offsets)}))


def disk(location: Path) -> tuple[int, int]:
    size = files = 0
    for root, _, names in os.walk(location):
        for name in names:
            size += os.path.getsize(os.path.join(root, name))
            files += 1
    return size, files


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batches", type=int, default=604_800, help="1 s triggers of history (default: a week)")
    p.add_argument("--queues", type=int, default=128)
    p.add_argument("--advancing", type=int, default=None, help="queues advancing per batch (default: all)")
    p.add_argument("--chunk", type=int, default=10_800, help="batches per bulk append and maintenance round")
    p.add_argument("--tail", type=int, default=30, help="final batches committed one by one (commit_batch)")
    p.add_argument("--dir", help="build here (kept) instead of a temporary directory")
    p.add_argument("--measure", nargs=2, metavar=("DIR", "PATH"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.measure:
        measure(*args.measure)
        return 0
    advancing = args.queues if args.advancing is None else args.advancing
    if not 0 < advancing <= args.queues:
        p.error("--advancing must be in 1..--queues")
    with tempfile.TemporaryDirectory(prefix="history-bench-") as tmp:
        location = Path(args.dir or tmp) / "link"
        built = build(location, args.batches, args.queues, advancing, args.chunk, min(args.tail, args.batches))
        print(f"built {args.batches} batches x {args.queues} queues ({advancing} advancing) in "
              f"{built['total_s']:.0f} s: bulk {built['build_s']:.0f} s with {built['rounds']} maintenance rounds "
              f"(p50 {built['round_p50_s']:.2f} s, max {built['round_max_s']:.2f} s); tail commit_batch p50 "
              f"{built['commit_p50_ms']:.0f} ms, max {built['commit_max_ms']:.0f} ms", flush=True)
        results = []
        for path in ("latest", "delivered"):
            out = subprocess.run([sys.executable, __file__, "--measure", str(location), path], check=True,
                                 capture_output=True, text=True).stdout
            result = json.loads(out.strip().splitlines()[-1])
            assert result["queues"] == args.queues, result
            results.append(result)
            how = ("without the Spark checkpoint: latest_offsets" if path == "latest"
                   else "from the Spark checkpoint: delivered_offsets")
            print(f"resume {how}: {result['seconds']:.3f} s, peak rss {result['rss_mb']:.0f} MB", flush=True)
        size, files = disk(location)
        for name in sorted(os.listdir(location)):
            t_size, t_files = disk(location / name)
            print(f"  {name}: {t_size / 2**20:.1f} MB in {t_files} files")
        resume = max(r["seconds"] for r in results)
        rss = max(r["rss_mb"] for r in results)
        print(f"history {args.batches} batches x {args.queues} queues: resume {resume:.2f} s, peak rss {rss:.0f} MB, "
              f"disk {size / 2**20:.0f} MB, files {files}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

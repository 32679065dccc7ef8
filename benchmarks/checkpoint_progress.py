"""Checkpoint writer benchmark: the per-round cost of bringing the link's progress (offset map + committed
offsets) up to date, on a long-lived link's Delta tables, without Spark or brokers.

    .venv/bin/python benchmarks/checkpoint_progress.py                 # 100k offset-map rows, 20 rounds
    .venv/bin/python benchmarks/checkpoint_progress.py --rows 20000 --offsets-rows 0

Builds ``<tmp>/offset_map`` with ``--rows`` rows as a link writes them (``--queues`` source queues, 10
messages per queue per batch, one source offset skipped every 7th batch so runs do not all merge) in
commits of ``--rows-per-commit``, and the ``offsets`` table with ``--offsets-rows`` rows. Then each round
appends one batch (a row per queue to both tables, as ``LinkTables.commit_batch``) and times:

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
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from connectors.checkpoint import link_state  # noqa: E402
from connectors.replication.tables import OFFSET_MAP, OFFSETS, LinkTables  # noqa: E402


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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=100_000, help="offset-map rows before the rounds")
    p.add_argument("--offsets-rows", type=int, default=100_000, help="offsets-table rows before the rounds")
    p.add_argument("--queues", type=int, default=20)
    p.add_argument("--rows-per-commit", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--full-rounds", type=int, default=3, help="rounds timed with the full read")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="ckpt-bench-") as tmp:
        tables = LinkTables(Path(tmp), source_cluster="src")
        link = Link(args.queues)
        maps: list[dict[str, Any]] = []
        offsets: list[dict[str, Any]] = []
        started = time.monotonic()
        while link.batch * args.queues < max(args.rows, args.offsets_rows):
            m, o = link.next_batch()
            if link.batch * args.queues <= args.rows:
                maps += m
            if link.batch * args.queues <= args.offsets_rows:
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
              f"rows ({args.queues} queues) in {time.monotonic() - started:.1f}s")

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


if __name__ == "__main__":
    sys.exit(main())

"""connectors.replication.batch_commit: the batch's metrics from its tasks' reports (pure), and the commit's refusal
of a batch whose task returned no report (before any step runs)."""

from __future__ import annotations

import dataclasses
import logging

import pytest

from connectors.core.errors import ReplicatorError
from connectors.replication.batch_commit import batch_metrics, commit_batch, log_batch
from connectors.replication.records import LatencySummary, ReplicationCommitMessage
from connectors.replication.writer_options import SinkOptions


def report(*, delivered: int, samples: tuple[int, ...], max_ms: int | None, oldest: int | None, started: int,
           skipped: int = 0) -> ReplicationCommitMessage:
    return ReplicationCommitMessage(delivered=delivered, bytes=10 * delivered, skipped_loop=skipped, failures=(),
                                    offset_map=(), source_next={}, latency_samples_ms=samples,
                                    latency=LatencySummary(None, None, max_ms), oldest_store_ms=oldest,
                                    started_ms=started, finished_ms=started + 5)


def test_metrics_pool_the_samples_keep_the_exact_maximum_and_age_from_the_oldest_record() -> None:
    tasks = [report(delivered=3, samples=(5, 7, 9), max_ms=40, oldest=900, started=950),
             report(delivered=2, samples=(1, 3), max_ms=12, oldest=None, started=970, skipped=4)]
    m = batch_metrics(tasks, failed=1, now=1000)
    assert (m.messages, m.bytes, m.skipped_loop, m.failed) == (5, 50, 4, 1)
    assert m.latency == LatencySummary(5, 9, 40)  # nearest-rank over all samples; max from the tasks' exact max
    assert (m.record_age_ms, m.wall_time_ms) == (100, 50)


def test_metrics_of_an_empty_batch() -> None:
    m = batch_metrics([], failed=0, now=1000)
    assert (m.messages, m.record_age_ms, m.wall_time_ms) == (0, None, 0)
    assert m.latency == LatencySummary(None, None, None)


def test_a_task_without_a_report_fails_the_commit() -> None:
    options = SinkOptions.from_options({"namesrv": "127.0.0.1:1", "targetCluster": "dst"})
    with pytest.raises(ReplicatorError, match="returned no commit message"):
        commit_batch(options, [None], 3)


def test_the_batch_line_counts_the_duplicates_avoided_and_what_the_check_read(caplog: pytest.LogCaptureFixture) -> None:
    tasks = [dataclasses.replace(report(delivered=3, samples=(), max_ms=None, oldest=None, started=0),
                                 duplicates_avoided=4, tail_read=9, foreign_in_tail=2),
             report(delivered=1, samples=(), max_ms=None, oldest=None, started=0)]
    m = batch_metrics(tasks, failed=0, now=10)
    assert (m.messages, m.duplicates_avoided) == (4, 4)
    options = SinkOptions.from_options({"namesrv": "127.0.0.1:1", "targetCluster": "dst", "link": "l"})
    with caplog.at_level(logging.INFO, "connectors.replication.batch_commit"):
        log_batch(options, 7, tasks, m, 1, "committed")
    assert "4 delivered" in caplog.text and "4 duplicate(s) avoided (recovery check: 9 target message(s) read, " \
        "2 of them foreign, left alone)" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.INFO, "connectors.replication.batch_commit"):
        log_batch(options, 8, tasks[1:], batch_metrics(tasks[1:], failed=0, now=10), 1, "committed")
    assert "0 duplicate(s) avoided," in caplog.text and "recovery check" not in caplog.text

"""A clean stop prints no "batch aborted" warning: the job marks itself stopping before it stops its queries
(``jobs.query_supervisor.supervise``), and the sinks' ``abort`` lines are INFO then, WARNING otherwise
(``connectors.core.job_stop``, the one rule). The marker reaches a child process through the environment,
as it reaches Spark's Python workers."""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from connectors.core import job_stop
from connectors.heartbeat.writer import HeartbeatStreamWriter
from jobs.query_supervisor import supervise


@pytest.fixture
def marker(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv(job_stop.STOP_MARKER_ENV, "")  # restored (unset) after the test
    path = job_stop.prepare_stop_marker()
    yield path
    job_stop.remove_stop_marker()


def test_no_marker_means_never_stopping(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(job_stop.STOP_MARKER_ENV, raising=False)
    job_stop.mark_stopping()  # a user's own query: nothing to mark
    assert not job_stop.stopping() and job_stop.abort_level() == logging.WARNING


def test_the_marker_is_seen_by_child_processes_and_removed_at_the_end(marker: Path) -> None:
    def child_sees() -> bool:
        code = "from connectors.core.job_stop import stopping; raise SystemExit(0 if stopping() else 1)"
        return subprocess.run([sys.executable, "-c", code], check=False).returncode == 0

    assert job_stop.abort_level() == logging.WARNING and not child_sees()
    job_stop.mark_stopping()
    assert job_stop.abort_level() == logging.INFO and child_sees()
    job_stop.remove_stop_marker()
    assert not marker.parent.exists() and not job_stop.stopping()


def test_heartbeat_abort_is_a_warning_unless_the_stop_caused_it(marker: Path,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    writer = HeartbeatStreamWriter.__new__(HeartbeatStreamWriter)  # abort needs no options
    with caplog.at_level(logging.INFO, logger="connectors.heartbeat.writer"):
        writer.abort([None], 7)
        job_stop.mark_stopping()
        writer.abort([None], 8)
    assert [(r.levelno, r.getMessage().split(";")[0]) for r in caplog.records] == [
        (logging.WARNING, "heartbeat batch 7 aborted"), (logging.INFO, "heartbeat batch 8 aborted")]


class _Query:
    """What ``supervise`` uses of a StreamingQuery; records whether the job was stopping when stopped."""

    def __init__(self, name: str) -> None:
        self.name, self.isActive, self.stopped_while_stopping = name, True, False

    def stop(self) -> None:
        self.stopped_while_stopping = job_stop.stopping()
        self.isActive = False

    def exception(self) -> None:
        return None


def test_supervise_marks_the_job_stopping_before_it_stops_the_queries(marker: Path, tmp_path: Path) -> None:
    stop = threading.Event()
    stop.set()  # SIGTERM
    queries = [_Query("a"), _Query("b")]
    assert supervise(object(), queries, stop, tmp_path) == {}
    assert all(q.stopped_while_stopping for q in queries)


class _Failed:
    """A query that already failed with ``error``."""

    def __init__(self, name: str, error: BaseException) -> None:
        self.name, self.isActive, self._error = name, False, error

    def stop(self) -> None:
        raise AssertionError("a failed query is not stopped")

    def exception(self) -> BaseException:
        return self._error


def test_queries_that_fail_on_one_full_disk_print_its_line_once(tmp_path: Path,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    """The replication, checkpoint and config-sync queries of a job write to one disk: when it fills they all
    fail on it. The console has one line per full disk (the first query's), not one per query; every query is
    still a failure (exit code, summaries) and each one's line is in the log file."""
    import errno

    def enospc(path: str) -> OSError:
        return OSError(errno.ENOSPC, "No space left on device", path)

    full = tmp_path / "full"
    queries = [_Failed("l1", enospc(str(full / "ckpt-l1" / "offsets" / "7"))),
               _Failed("l1-checkpoint", enospc(str(full / "ckpt-l1-checkpoint" / "commits" / "3"))),
               _Failed("l2", enospc("hdfs://nn/ckpt-l2/offsets/1")),  # another disk (not a local one)
               _Failed("l3", RuntimeError("source unreachable"))]
    stop = threading.Event()
    stop.set()
    with caplog.at_level(logging.INFO, logger="jobs.query_supervisor"):
        failures = supervise(object(), queries, stop, tmp_path)
    assert set(failures) == {"l1", "l1-checkpoint", "l2", "l3"}
    console = [r.getMessage() for r in caplog.records if not getattr(r, "file_only", False)]
    assert [line.split(":")[0] for line in console] == ["link l1 failed", "link l2 failed", "link l3 failed"]
    assert "disk full" in console[0] and "ckpt-l1/offsets/7" in console[0] and "hdfs://nn" in console[1]
    assert any(r.getMessage().startswith("link l1-checkpoint failed on the full disk reported for link l1")
               for r in caplog.records if getattr(r, "file_only", False))

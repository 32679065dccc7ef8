"""A clean stop prints no "batch aborted" warning: the job marks itself stopping before it stops its queries
(``jobs.query_supervisor.supervise``), and the sinks' ``abort`` lines are INFO then, WARNING otherwise
(``connectors.core.job_stop``, the one rule); it stops each query between two of its triggers
(``jobs.query_supervisor.stop_queries``), so Spark has no batch to abort. The marker reaches a child process
through the environment, as it reaches Spark's Python workers."""

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
from jobs.query_supervisor import STOP_POLL_S, stop_queries, supervise
from tests.support.clocks import MillisClock


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
    """What ``supervise`` and ``stop_queries`` use of a StreamingQuery: its trigger runs for the first
    ``busy_reads`` status reads; records whether the job was stopping, and the trigger running, when stopped."""

    def __init__(self, name: str, busy_reads: int = 0) -> None:
        self.name, self.isActive, self.stopped_while_stopping = name, True, False
        self.busy_reads, self.reads, self.stopped_in_trigger = busy_reads, 0, False

    @property
    def status(self) -> dict[str, Any]:
        self.reads += 1
        return {"message": "", "isDataAvailable": False, "isTriggerActive": self.reads <= self.busy_reads}

    def stop(self) -> None:
        self.stopped_while_stopping = job_stop.stopping()
        self.stopped_in_trigger = self.reads <= self.busy_reads
        self.isActive = False

    def exception(self) -> None:
        return None


def test_supervise_marks_the_job_stopping_before_it_stops_the_queries(marker: Path, tmp_path: Path) -> None:
    stop = threading.Event()
    stop.set()  # SIGTERM
    queries = [_Query("a"), _Query("b")]
    assert supervise(object(), queries, stop, tmp_path) == {}
    assert all(q.stopped_while_stopping for q in queries)


def test_a_query_is_stopped_between_two_triggers_not_in_one(marker: Path) -> None:
    """Spark interrupts a stopped query's thread; in a batch's write that makes its abort fail ("failed to abort",
    see ``stop_queries``): each query is stopped once its running trigger ended, the others meanwhile."""
    clock = MillisClock(0)
    idle, short, longer = _Query("idle"), _Query("short", busy_reads=3), _Query("longer", busy_reads=40)
    stop_queries([idle, short, longer], grace_s=10.0, clock=clock)
    assert not any(q.isActive or q.stopped_in_trigger for q in (idle, short, longer))
    assert (idle.reads, short.reads, longer.reads) == (1, 4, 41)  # stopped at their first read between triggers
    assert clock.monotonic() < 10.0


def test_a_trigger_that_outlasts_the_grace_is_stopped_at_its_end(marker: Path) -> None:
    clock = MillisClock(0)
    stuck, ended = _Query("stuck", busy_reads=10**6), _Query("ended")
    ended.isActive = False  # AvailableNow done, or failed: nothing to stop
    stop_queries([stuck, ended], grace_s=2.0, clock=clock)
    assert not stuck.isActive and stuck.stopped_in_trigger and stuck.stopped_while_stopping
    assert 2.0 <= clock.monotonic() < 2.0 + 2 * STOP_POLL_S and ended.reads == 0


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

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

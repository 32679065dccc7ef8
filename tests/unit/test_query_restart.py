"""A query that failed for a reason of Spark's own (its Python worker did not connect back within Spark's fixed
10 s) is restarted from its checkpoint by ``supervise``, at most ``MAX_RESTARTS`` times, each with a WARNING line;
any other failure stops the job as before (``jobs.query_restart``)."""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

import pytest

from jobs.query_restart import BACKOFF_S, MAX_RESTARTS, RESET_AFTER_S, QueryRestarts, transient_cause
from jobs.query_supervisor import supervise
from tests.support.clocks import MillisClock

CONNECT_BACK = ("[PYTHON_EXCEPTION] org.apache.spark.SparkException: Python worker failed to connect back.\n"
                "Caused by: java.net.SocketTimeoutException: Timed out while waiting for the Python worker")


class _Query:
    """A query that has failed with ``error`` (None: running until stopped)."""

    def __init__(self, name: str, error: str | None = None) -> None:
        self.name, self._error = name, error
        self.isActive = error is None

    def exception(self) -> str | None:
        return self._error

    def stop(self) -> None:
        self.isActive = False

    @property
    def status(self) -> dict[str, Any]:
        return {"isTriggerActive": False}


class _Streams:
    def awaitAnyTermination(self, _timeout: float) -> None:
        pass

    def resetTerminated(self) -> None:
        pass


class _Spark:
    streams = _Streams()


def test_only_spark_s_own_failures_qualify() -> None:
    assert transient_cause(CONNECT_BACK) is not None
    assert transient_cause("TOPIC_NOT_EXIST from 127.0.0.1:10911: topic[t] not exist") is None
    assert transient_cause(None) is None


def test_a_connect_back_failure_is_restarted_and_the_job_runs_on(tmp_path: Path,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    stop = threading.Event()
    started: list[_Query] = []

    def start_again() -> _Query:
        started.append(_Query("l1"))
        stop.set()  # SIGTERM once the restarted query runs: supervise then stops it cleanly
        return started[-1]

    queries: list[Any] = [_Query("l1", CONNECT_BACK), _Query("l1-checkpoint")]
    with caplog.at_level(logging.INFO, logger="jobs.query_supervisor"):
        failures = supervise(_Spark(), queries, stop, tmp_path,
                             restarts=QueryRestarts({"l1": start_again}, MillisClock()))
    assert failures == {} and queries[0] is started[0] and not any(q.isActive for q in queries)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and warnings[0].startswith("link l1 failed: Spark's Python worker did not connect")
    assert f"in {BACKOFF_S[0]:g} s (restart 1 of at most {MAX_RESTARTS})" in warnings[0]


def test_the_restarts_are_bounded_then_the_job_stops_on_the_failure(tmp_path: Path) -> None:
    clock = MillisClock(0)
    restarts = QueryRestarts({"l1": lambda: _Query("l1", CONNECT_BACK)}, clock)
    queries: list[Any] = [_Query("l1", CONNECT_BACK), _Query("heartbeat")]
    failures = supervise(_Spark(), queries, threading.Event(), tmp_path, restarts=restarts)
    assert list(failures) == ["l1"] and restarts.counts == {"l1": MAX_RESTARTS}
    assert clock.monotonic() >= sum(BACKOFF_S)  # each restart waited its back-off (on the clock)
    assert not queries[1].isActive  # the others are stopped, as for any failure


def test_any_other_failure_stops_the_job_without_a_restart(tmp_path: Path) -> None:
    def never() -> _Query:
        raise AssertionError("not restarted")

    queries: list[Any] = [_Query("l1", "TOPIC_NOT_EXIST from 127.0.0.1:10911"), _Query("heartbeat")]
    failures = supervise(_Spark(), queries, threading.Event(), tmp_path,
                         restarts=QueryRestarts({"l1": never}, MillisClock()))
    assert list(failures) == ["l1"] and not queries[1].isActive


def test_a_restart_that_cannot_start_reports_the_original_failure(tmp_path: Path,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    def broken() -> _Query:
        raise RuntimeError("the session is stopping")

    queries: list[Any] = [_Query("l1", CONNECT_BACK)]
    with caplog.at_level(logging.ERROR, logger="jobs.query_supervisor"):
        failures = supervise(_Spark(), queries, threading.Event(), tmp_path,
                             restarts=QueryRestarts({"l1": broken}, MillisClock()))
    assert list(failures) == ["l1"] and "connect back" in failures["l1"]
    assert any(r.getMessage() == "link l1 could not be restarted" for r in caplog.records)


def test_a_stop_during_the_back_off_ends_it_without_a_restart() -> None:
    stop = threading.Event()
    clock = MillisClock(0)

    def stopped_meanwhile(seconds: float) -> None:
        clock.advance(round(seconds * 1000))
        stop.set()  # SIGTERM while the job waits to restart

    clock.block = stopped_meanwhile  # type: ignore[method-assign]
    restarts = QueryRestarts({"l1": lambda: _Query("l1")}, clock)
    assert restarts.restart(_Query("l1", CONNECT_BACK), stop) is None and restarts.counts == {}


def test_a_query_that_ran_long_after_its_restarts_has_its_budget_again() -> None:
    clock = MillisClock(0)
    restarts = QueryRestarts({"l1": lambda: _Query("l1")}, clock)
    for _ in range(MAX_RESTARTS):
        assert restarts.restart(_Query("l1", CONNECT_BACK), threading.Event()) is not None
    assert restarts.restart(_Query("l1", CONNECT_BACK), threading.Event()) is None  # the budget is spent
    clock.advance(round(RESET_AFTER_S * 1000))
    assert restarts.restart(_Query("l1", CONNECT_BACK), threading.Event()) is not None
    assert restarts.counts == {"l1": 1}

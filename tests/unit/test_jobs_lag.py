"""``python -m jobs.lag --check`` while a job starts (docs/operations.md, "Monitoring"): the heartbeat monitor on an
injected clock, scraped through the endpoint's collector, read by ``link_lags`` / ``check_line`` as the probe reads it.
With 1 s heartbeats a Spark start takes many intervals; the probe must pass until each link's first heartbeat arrived in
time or the start-up limit passed, and then apply the 3-interval STALE rule as before."""

from __future__ import annotations

import io

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from rich.console import Console

from connectors.core.monitoring import STALE_INTERVALS
from connectors.heartbeat.monitor import HeartbeatMonitor
from connectors.heartbeat.records import Heartbeat, Observed
from jobs import lag
from jobs.lag import LinkLag, Status, check_line, link_lags
from jobs.metrics import HeartbeatCollector
from tests.support.clocks import ReadingClock

INTERVAL = 1_000
STARTUP_LIMIT = 120_000
LINKS = ("l1", "l2")


class Job:
    """A job's heartbeat monitor and its endpoint's heartbeat gauges, on a clock the test moves."""

    def __init__(self) -> None:
        self.now_ms = 1_700_000_000_000
        self.monitor = HeartbeatMonitor(LINKS, interval_ms=INTERVAL, lagging_threshold_ms=10_000,
                                        stale_intervals=STALE_INTERVALS, startup_limit_ms=STARTUP_LIMIT,
                                        clock=ReadingClock(lambda: self.now_ms))
        self.registry = CollectorRegistry()
        self.registry.register(HeartbeatCollector(self.monitor))
        self.seq = 0

    def advance(self, ms: int) -> None:
        """``ms`` of a running job: the heartbeat query produces one heartbeat per interval on every link's
        source (what makes a link without arrivals "broken" rather than "idle")."""
        for _ in range(ms // INTERVAL):
            self.now_ms += INTERVAL
            self.seq += 1
            self.monitor.on_produced([Observed(Heartbeat(link, self.seq, self.now_ms, "a", "b"), self.now_ms,
                                               "t/a/0", self.seq) for link in LINKS])
        self.now_ms += ms % INTERVAL

    def arrive(self, link: str, lag_ms: int = 40, *, read_after_ms: int = 0) -> None:
        """The newest heartbeat of ``link`` reached the target ``lag_ms`` after its birth, and the monitor reads
        it ``read_after_ms`` after that (its poll interval)."""
        stored = self.now_ms - read_after_ms
        self.monitor.on_arrived([Observed(Heartbeat(link, self.seq, stored - lag_ms, "a", "b"), stored, "t/b/0",
                                          self.seq)])

    def probe(self) -> tuple[dict[str, LinkLag], int, str]:
        """What ``jobs.lag --check`` sees now: rows, exit code, line."""
        rows = link_lags(generate_latest(self.registry).decode(), list(LINKS), lagging_threshold_s=10)
        code, line = check_line(rows)
        return {r.link: r for r in rows}, code, line


def test_a_job_that_just_started_is_starting_and_the_probe_passes() -> None:
    job = Job()
    rows, code, line = job.probe()
    assert code == 0 and {r.status for r in rows.values()} == {Status.STARTING}
    job.advance(20_000)  # Spark starting: the heartbeat query produces, the replication carries nothing yet
    rows, code, line = job.probe()
    assert code == 0, line
    assert line == ("STARTING: 2 link(s): l1 STARTING (no heartbeat yet, job up 20.0 s, start-up limit 120 s); "
                    "l2 STARTING (no heartbeat yet, job up 20.0 s, start-up limit 120 s)")
    assert rows["l1"].monitor == "starting" and rows["l1"].startup_limit_s == 120.0
    job.advance(STARTUP_LIMIT - 20_000)  # exactly at the limit
    assert job.probe()[1] == 0


def test_no_heartbeat_within_the_startup_limit_is_stale_as_before() -> None:
    job = Job()
    job.advance(STARTUP_LIMIT)
    job.now_ms += 1
    rows, code, line = job.probe()
    assert code == 1 and line.startswith("STALE: l1 STALE (heartbeat age 120.0 s, lag -, monitor broken); "), line
    assert rows["l2"].status is Status.STALE


def test_one_link_with_heartbeats_and_one_still_starting() -> None:
    job = Job()
    job.advance(15_000)
    job.arrive("l1")
    rows, code, line = job.probe()
    assert (rows["l1"].status, rows["l2"].status) == (Status.OK, Status.STARTING)
    assert code == 0 and line.startswith("STARTING: 2 link(s): l1 OK (heartbeat age 0.0 s, lag 40 ms, monitor ok); "
                                         "l2 STARTING (no heartbeat yet, job up 15.0 s"), line


def test_once_its_heartbeats_flowed_a_link_goes_stale_after_three_intervals() -> None:
    job = Job()
    job.advance(15_000)
    for _ in range(STALE_INTERVALS + 1):  # heartbeats in time for 3 intervals: the link has started up
        job.arrive("l1")
        job.advance(INTERVAL)
    job.advance(STALE_INTERVALS * INTERVAL - INTERVAL - 40)  # nothing more arrives; well within the limit
    rows, code, _ = job.probe()
    assert code == 0 and rows["l1"].age_s == 3.0 and rows["l1"].status is Status.OK  # 3 intervals: not stale yet
    job.now_ms += 1
    rows, code, line = job.probe()
    assert code == 1 and line == "STALE: l1 STALE (heartbeat age 3.0 s, lag 40 ms, monitor broken)", line
    assert rows["l2"].status is Status.STARTING  # l2 keeps its start-up grace


def test_a_link_warming_up_after_the_start_is_starting() -> None:
    """Measured on jobs/run_all.py with 1 s heartbeats: the first heartbeat reached the target 2.3 s after its
    birth, and the next one more than 3 s after it (the queries warming up); the probe failed on that gap."""
    job = Job()
    job.advance(22_000)
    job.arrive("l1", lag_ms=2_300, read_after_ms=400)
    rows, code, line = job.probe()
    assert code == 0 and rows["l1"].status is Status.OK, line  # 2.7 s old: in time, but no flow yet
    job.advance(500)
    job.arrive("l1", lag_ms=2_256)
    job.advance(3_100)
    rows, code, line = job.probe()
    assert code == 0 and rows["l1"].status is Status.STARTING, line  # a gap of over 3 intervals
    assert line.startswith("STARTING: 2 link(s): l1 STARTING (heartbeats not flowing yet: age 5.4 s, lag 2256 ms, "
                           "start-up limit 120 s); l2 STARTING (no heartbeat yet, job up 25.6 s"), line
    job.arrive("l1", lag_ms=300)
    rows, code, line = job.probe()
    assert code == 0 and rows["l1"].status is Status.OK, line


def test_the_live_table_to_a_pipe_keeps_whole_link_names_and_ends_each_refresh_with_a_newline(
        monkeypatch: pytest.MonkeyPatch) -> None:
    name = "source-to-target-eu-west-1-orders-and-payments-with-a-name-longer-than-eighty-columns"
    row = LinkLag(name, Status.OK, 0.1, 0.2, 1.0, 1.0, "ok", 0.5, 120.0, 0)
    scrapes = iter([[row], [row]])

    def once() -> list[LinkLag]:
        return next(scrapes)  # the third refresh ends the loop (StopIteration), as Ctrl-C would

    monkeypatch.setattr("jobs.lag.time.sleep", lambda _s: None)
    out = io.StringIO()
    with pytest.raises(StopIteration):
        lag.watch(once, "http://127.0.0.1:9/metrics", 2.0, Console(file=out))
    text = out.getvalue()
    assert text.count(name) == 2 and text.endswith("\n"), text  # two refreshes, printed one after the other

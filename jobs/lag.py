"""The replication lag per link, read from a job's Prometheus endpoint: a live table, or one health line.

    python -m jobs.lag --config conf/replicator.yaml             live table, refreshed every 2 s (Ctrl-C ends)
    python -m jobs.lag --config conf/replicator.yaml --check     one line; exit 1 when a link is STALE or the
                                                                 endpoint does not answer (a health probe)

The endpoint is ``metrics.host`` / ``metrics.port`` of the config (``--url`` overrides); the one that
serves heartbeat metrics is ``jobs/heartbeat.py``'s (``jobs.metrics`` lists every metric). Per link:

    lag now         heartbeat lag of the newest heartbeat: target store time - source born time
    p99 1h          99th percentile of the heartbeat lag over the last hour
    heartbeat age   now - born time of the newest heartbeat that reached the target (before the first:
                    now - the job's start)
    status          STARTING the monitor's ``starting``: age > 3 intervals, but the job runs for at most
                             ``heartbeat.startup_limit`` (120 s by default, never less than 3 intervals) and
                             the link's heartbeats have not flowed yet (none arrived, or not yet in time for
                             3 intervals in a row: ``connectors.heartbeat.monitor``). ``--check`` passes: a
                             probe must not fail a job whose Spark is still starting, which takes many
                             intervals with short ones
                    STALE    age > 3 heartbeat intervals (or no heartbeat metrics for the link), once the
                             link's heartbeats have flowed or the start-up limit has passed
                    LAGGING  lag now > heartbeat.lagging_threshold
                    OK       otherwise
    monitor         the heartbeat monitor's own verdict: ok, lagging, starting, broken (the source
                    produces heartbeats the target does not get) or idle (no heartbeat produced)
    failover        "N shared: may re-read" when the newest checkpoint has N target queues fed by several
                    source queues (a consumer failing over there misses nothing but may read some messages
                    again; ``rmq_replicator_checkpoint_shared_queues``), else "exact"; informational, never
                    a ``--check`` failure

Exit codes: 0 (``--check``: no link STALE; each is OK, LAGGING or STARTING), 1 (a link STALE, or the
endpoint unreachable), 2 (bad arguments or config). The line starts with the worst status: STALE, LAGGING,
STARTING, OK (or UNREACHABLE).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

import requests
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console
from rich.live import Live
from rich.table import Table

if __package__ in (None, ""):  # pragma: no cover - `python jobs/lag.py`
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from connectors.core.config import load_replicator_config
from connectors.core.errors import ReplicatorError
from connectors.core.monitoring import STALE_INTERVALS
from jobs.metrics import PREFIX


class Status(StrEnum):
    OK = "OK"
    STARTING = "STARTING"
    LAGGING = "LAGGING"
    STALE = "STALE"


@dataclass(frozen=True)
class LinkLag:
    """One link's row, from one scrape."""

    link: str
    status: Status
    lag_s: float | None
    p99_1h_s: float | None
    age_s: float | None
    interval_s: float | None
    monitor: str | None
    """The heartbeat monitor's state label (``rmq_replicator_link_state``), None without heartbeat metrics."""
    latency_p99_s: float | None
    """Replication latency p99 of the newest batch (messages, not heartbeats)."""
    startup_limit_s: float | None
    """The job's start-up limit in effect (``rmq_replicator_heartbeat_startup_limit_seconds``)."""
    shared_queues: float | None = None
    """Target queues the newest checkpoint marks shared: may re-read (None: no checkpoint metrics)."""

    def describe(self) -> str:
        shared = f"; {self.failover()}" if self.shared_queues else ""
        if self.age_s is None:
            return f"{self.link} {self.status} (no heartbeat metrics{shared})"
        if self.status is Status.STARTING:
            limit = "" if self.startup_limit_s is None else f", start-up limit {self.startup_limit_s:g} s"
            if self.lag_s is None:
                return f"{self.link} {self.status} (no heartbeat yet, job up {self.age_s:.1f} s{limit}{shared})"
            return (f"{self.link} {self.status} (heartbeats not flowing yet: age {self.age_s:.1f} s, "
                    f"lag {_fmt(self.lag_s)}{limit}{shared})")
        return (f"{self.link} {self.status} (heartbeat age {self.age_s:.1f} s, lag {_fmt(self.lag_s)}, "
                f"monitor {self.monitor}{shared})")

    def failover(self) -> str:
        """The failover column: what a consumer failing over to the target can expect."""
        if self.shared_queues is None:
            return "-"
        return f"{self.shared_queues:.0f} shared: may re-read" if self.shared_queues else "exact"


class EndpointUnreachableError(Exception):
    pass


def scrape(url: str, timeout: float) -> str:
    try:
        response = requests.get(url, timeout=timeout)
        response.raise_for_status()
    except requests.RequestException as exc:
        raise EndpointUnreachableError(f"{url}: {exc}") from exc
    return response.text


def link_lags(text: str, links: Sequence[str], *, lagging_threshold_s: float) -> list[LinkLag]:
    """Each link's row from a scrape's text (pure). Whether a link is still starting is the monitor's
    verdict (``link_state``): only the job knows when it started; the other statuses are computed here."""
    values: dict[tuple[str, str], float] = {}
    states: dict[str, str] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            link = sample.labels.get("link")
            if link is None or not sample.name.startswith(PREFIX):
                continue
            name = sample.name.removeprefix(PREFIX)
            if name == "link_state":
                if sample.value == 1.0:
                    states[link] = sample.labels.get("state", "")
            else:
                values[(link, name)] = sample.value
    rows = []
    for link in links:
        age = values.get((link, "heartbeat_age_seconds"))
        interval = values.get((link, "heartbeat_interval_seconds"))
        lag = values.get((link, "heartbeat_lag_seconds"))
        if age is None or interval is None:
            status = Status.STALE
        elif states.get(link) == "starting":
            status = Status.STARTING
        elif age > STALE_INTERVALS * interval:
            status = Status.STALE
        elif lag is None:  # no lag gauge without an arrival: the monitor's state gauge was not scraped
            status = Status.STARTING
        elif states.get(link) == "lagging" or (lag is not None and lag > lagging_threshold_s):
            status = Status.LAGGING
        else:
            status = Status.OK
        rows.append(LinkLag(link, status, lag, values.get((link, "heartbeat_lag_p99_1h_seconds")), age, interval,
                            states.get(link), values.get((link, "latency_p99_seconds")),
                            values.get((link, "heartbeat_startup_limit_seconds")),
                            values.get((link, "checkpoint_shared_queues"))))
    return rows


def check_line(rows: Iterable[LinkLag]) -> tuple[int, str]:
    """``--check``'s exit code and line."""
    rows = list(rows)
    stale = [r for r in rows if r.status is Status.STALE]
    if stale:
        return 1, "STALE: " + "; ".join(r.describe() for r in stale)
    lagging = [r for r in rows if r.status is Status.LAGGING]
    if lagging:
        return 0, "LAGGING: " + "; ".join(r.describe() for r in lagging)
    worst = Status.STARTING if any(r.status is Status.STARTING for r in rows) else Status.OK
    return 0, f"{worst}: {len(rows)} link(s): " + "; ".join(r.describe() for r in rows)


def _fmt(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds * 1000:.0f} ms" if seconds < 10 else f"{seconds:.1f} s"


def render(rows: Sequence[LinkLag], url: str, error: str | None) -> Table:
    table = Table(title=f"replication lag  {url}  {time.strftime('%H:%M:%S')}",
                  caption=error or f"STALE = heartbeat age > {STALE_INTERVALS} intervals; STARTING = no heartbeat "
                                   f"yet, within the start-up limit")
    for column in ("link", "lag now", "p99 1h", "heartbeat age", "status", "monitor", "batch latency p99",
                   "failover"):
        # a long link name folds onto the next line of the cell rather than being cut to "a-very…"
        table.add_column(column, justify="left" if column in ("link", "status", "monitor", "failover") else "right",
                         overflow="fold")
    colour = {Status.OK: "green", Status.STARTING: "blue", Status.LAGGING: "yellow", Status.STALE: "red"}
    for r in rows:
        table.add_row(r.link, _fmt(r.lag_s), _fmt(r.p99_1h_s), _fmt(r.age_s),
                      f"[{colour[r.status]}]{r.status}[/]", r.monitor or "-", _fmt(r.latency_p99_s),
                      f"[yellow]{r.failover()}[/]" if r.shared_queues else r.failover())
    return table


UNBOUNDED_WIDTH = 10_000
"""Console width off a terminal: rows are never cut (rich's default there is 80 columns)."""


def watch(once: Callable[[], list[LinkLag]], url: str, refresh_s: float, console: Console | None = None) -> None:
    """The live table until Ctrl-C. On a terminal it redraws in place; to a pipe or a file each refresh is
    printed whole, as wide as its rows and ending with a newline, one after the other."""
    console = console or Console()
    if not console.is_terminal:
        console.width = UNBOUNDED_WIDTH
    rows: list[LinkLag] = []

    def scrape_render() -> Table:
        nonlocal rows
        error = None
        try:
            rows = once()
        except EndpointUnreachableError as exc:
            error = f"[red]unreachable[/]: {exc}"
        return render(rows, url, error)

    if not console.is_terminal:
        while True:
            console.print(scrape_render())
            time.sleep(refresh_s)
    with Live(render(rows, url, "connecting..."), console=console, auto_refresh=False) as live:
        while True:
            live.update(scrape_render(), refresh=True)
            time.sleep(refresh_s)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jobs.lag", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True, help="replicator YAML: links, metrics endpoint, thresholds")
    parser.add_argument("--url", help="metrics URL (default: http://<metrics.host>:<metrics.port>/metrics)")
    parser.add_argument("--link", action="append", default=[], help="only this link (repeatable)")
    parser.add_argument("--check", action="store_true", help="print one line; exit 1 if a link is STALE or the "
                                                             "endpoint is unreachable (STARTING passes)")
    parser.add_argument("--refresh", type=float, default=2.0, help="seconds between refreshes of the live table")
    parser.add_argument("--timeout", type=float, default=3.0, help="HTTP timeout, seconds")
    args = parser.parse_args(argv)
    try:
        config = load_replicator_config(args.config)
        links = args.link or [link.name for link in config.links]
        for name in links:
            config.link(name)
    except ReplicatorError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.url is None and config.metrics.port == 0:
        print(f"error: {args.config}: metrics.port is 0 (no endpoint); give --url", file=sys.stderr)
        return 2
    url = args.url or config.metrics.url
    threshold = config.heartbeat.lagging_threshold

    def once() -> list[LinkLag]:
        return link_lags(scrape(url, args.timeout), links, lagging_threshold_s=threshold)

    if args.check:
        try:
            code, line = check_line(once())
        except EndpointUnreachableError as exc:
            code, line = 1, f"UNREACHABLE: {exc}"
        print(line)
        return code
    try:
        watch(once, url, args.refresh)
    except KeyboardInterrupt:
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())

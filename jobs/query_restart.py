"""Restarting a query that failed for a reason of Spark's own, not of the job's: which failures qualify, and how
often.

Spark gives a Python worker it launches (a streaming source's runner, a sink's commit or abort) a fixed 10 s to
connect back to the JVM (``PythonWorkerFactory``: not a setting). On a loaded machine (the first launch building
the JVM class-data archive beside two jobs on two cores, say) a worker's start-up alone can take longer, and the
query fails with "Python worker failed to connect back" before any of the job's code ran. Nothing about the data is
wrong: the query restarted from its checkpoint resumes exactly where it was (the replication sink re-runs an
uncommitted batch with its recovery check, as after any fault). Stopping the whole job for it instead would leave a
disaster-recovery link down until someone restarts it.

So ``supervise`` (``jobs.query_supervisor``) asks ``QueryRestarts.restart`` about each failed query: a failure
matching ``TRANSIENT`` is restarted after a back-off (``BACKOFF_S``: the load that made the worker late is mostly
the job's own start, every query's Python processes at once, and an immediate restart meets it again: measured in
a soak on a loaded machine, four queries failed, each restarted at once, and failed again twice), each with one
WARNING line. A query that ran ``RESET_AFTER_S`` since its last restart has its whole budget again. Any other
failure, or one past the budget, ends the job as before (exit code 1, the failure's line); a stop (SIGTERM)
during a back-off ends the wait and the job.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from broker_store.clock import SYSTEM_CLOCK, ThreadClock
from connectors.core.driver_log import FILE_ONLY

log = logging.getLogger("jobs.query_supervisor")

TRANSIENT: tuple[tuple[str, str], ...] = (
    ("Python worker failed to connect back",
     "Spark's Python worker did not connect back within Spark's fixed 10 s (a loaded machine)"),
)
"""(text found in the failure, what it means): failures that say nothing about the job's data or settings."""

BACKOFF_S = (2.0, 5.0, 10.0, 20.0, 30.0)
"""The wait before each restart of one query (67 s in all); one more failure ends the job: a machine that cannot
start a Python worker within 10 s for over a minute is not having a moment, and the job's exit says so."""

MAX_RESTARTS = len(BACKOFF_S)

BACKOFF_POLL_S = 0.1
"""How often a back-off looks at the job's stop."""

RESET_AFTER_S = 600.0
"""A query that ran this long since its last restart has its whole budget again."""


def transient_cause(error: object) -> str | None:
    """What a failure that qualifies for a restart means (``TRANSIENT``); None for any other failure."""
    text = str(error)
    for found, meaning in TRANSIENT:
        if found in text:
            return meaning
    return None


class QueryRestarts:
    """The job's restart budget. ``starters``: query name -> the call that starts that query again (from its
    checkpoint, as the first time). ``clock`` times the budget's reset."""

    def __init__(self, starters: dict[str, Callable[[], Any]], clock: ThreadClock = SYSTEM_CLOCK) -> None:
        self._starters = starters
        self._clock = clock
        self.counts: dict[str, int] = {}
        """Restarts in the current budget, per query name."""
        self._last: dict[str, float] = {}

    def restart(self, query: Any, stop: threading.Event) -> Any | None:
        """The failed ``query`` started again, or None when it does not qualify (the job then stops) or ``stop``
        is set during the back-off."""
        name = query.name
        cause = transient_cause(query.exception())
        starter = self._starters.get(name)
        if cause is None or starter is None:
            return None
        now = self._clock.monotonic()
        if now - self._last.get(name, now) >= RESET_AFTER_S:
            self.counts[name] = 0
        done = self.counts.get(name, 0)
        if done >= MAX_RESTARTS:
            return None
        delay = BACKOFF_S[done]
        log.warning("link %s failed: %s; restarting the query from its checkpoint in %g s (restart %d of at most "
                    "%d)", name, cause, delay, done + 1, MAX_RESTARTS)
        log.info("link %s's failure before the restart:\n%s", name, query.exception(), extra=FILE_ONLY)
        if self._backoff(delay, stop):
            return None
        self.counts[name] = done + 1
        self._last[name] = self._clock.monotonic()
        try:
            return starter()
        except Exception:  # a restart that cannot start: the job stops on the original failure, as without one
            log.exception("link %s could not be restarted", name)
            return None

    def _backoff(self, seconds: float, stop: threading.Event) -> bool:
        """Wait ``seconds`` of the clock, ending early when ``stop`` is set; whether it is."""
        deadline = self._clock.monotonic() + seconds
        while not stop.is_set() and (left := deadline - self._clock.monotonic()) > 0:
            self._clock.block(min(BACKOFF_POLL_S, left))
        return stop.is_set()

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
matching ``TRANSIENT`` is restarted, at most ``MAX_RESTARTS`` times per query in the job's life, each with one
WARNING line; any other failure, or one more, ends the job as before (exit code 1, the failure's line).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from connectors.core.driver_log import FILE_ONLY

log = logging.getLogger("jobs.query_supervisor")

TRANSIENT: tuple[tuple[str, str], ...] = (
    ("Python worker failed to connect back",
     "Spark's Python worker did not connect back within Spark's fixed 10 s (a loaded machine)"),
)
"""(text found in the failure, what it means): failures that say nothing about the job's data or settings."""

MAX_RESTARTS = 3
"""Restarts per query in one job's life: a machine that cannot start a Python worker in 10 s four times is not
having a moment, and the job's exit says so."""


def transient_cause(error: object) -> str | None:
    """What a failure that qualifies for a restart means (``TRANSIENT``); None for any other failure."""
    text = str(error)
    for found, meaning in TRANSIENT:
        if found in text:
            return meaning
    return None


class QueryRestarts:
    """The job's restart budget. ``starters``: query name -> the call that starts that query again (from its
    checkpoint, as the first time)."""

    def __init__(self, starters: dict[str, Callable[[], Any]], max_restarts: int = MAX_RESTARTS) -> None:
        self._starters = starters
        self._max = max_restarts
        self.counts: dict[str, int] = {}
        """Restarts so far, per query name."""

    def restart(self, query: Any) -> Any | None:
        """The failed ``query`` started again, or None when it does not qualify (the job then stops)."""
        name = query.name
        cause = transient_cause(query.exception())
        starter = self._starters.get(name)
        done = self.counts.get(name, 0)
        if cause is None or starter is None or done >= self._max:
            return None
        self.counts[name] = done + 1
        log.warning("link %s failed: %s; restarting the query from its checkpoint (restart %d of at most %d)",
                    name, cause, done + 1, self._max)
        log.info("link %s's failure before the restart:\n%s", name, query.exception(), extra=FILE_ONLY)
        try:
            return starter()
        except Exception:  # a restart that cannot start: the job stops on the original failure, as without one
            log.exception("link %s could not be restarted", name)
            return None

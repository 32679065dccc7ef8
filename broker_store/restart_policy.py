"""When ``up`` restarts a member that exited: the ``restart`` setting of a broker or name server, and the back-off.

Pure: exit codes and ``Clock.monotonic()`` times in, a restart time (or None: left down) out. ``up``'s supervisor
(``broker_store.deploy.up_supervisor``) asks it each time a child is found exited and tells it each (re)start.

    restart: "no"            never restarted: a member a test or an operator wants down stays down
    restart: "on-failure"    (default for brokers and name servers) restarted when it exited with a code other
                             than 0 (a crash, kill -9, an OOM kill); exit code 0 is a clean stop, left down

Back-off: the n-th restart in a row waits ``initial_s * factor ** (n - 1)``, at most ``max_s``. A member that ran
for ``stable_after_s`` or more before it exited starts the count again (one crash a day is restarted at once; a
member that crashes at start-up is retried ever more slowly, never given up on). A restart asked for by an
operator (``python -m broker_store restart-member``) is not a failure: it restarts at once and resets the count.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class RestartMode(enum.StrEnum):
    """A member's ``restart`` setting (docker-compose's names)."""

    NO = "no"
    ON_FAILURE = "on-failure"


@dataclass(frozen=True)
class BackOff:
    """The delays between restarts in a row (see the module docstring)."""

    initial_s: float = 0.5
    """Before the first restart after a failure."""
    factor: float = 2.0
    """Each further restart in a row waits this many times longer."""
    max_s: float = 30.0
    """The longest wait."""
    stable_after_s: float = 60.0
    """A run at least this long ends the series: the next failure waits ``initial_s`` again."""


class RestartPolicy:
    """One member's restarts. Times are seconds of a monotonic clock."""

    def __init__(self, mode: RestartMode, backoff: BackOff = BackOff()) -> None:
        self.mode = mode
        self.backoff = backoff
        self.failures = 0
        """Failed runs in a row (the back-off's exponent)."""
        self._started_at: float | None = None

    def started(self, now: float) -> None:
        """The member was (re)started at ``now``."""
        self._started_at = now

    def exited(self, code: int | None, now: float) -> float | None:
        """The member was found exited with ``code`` (None: unknown) at ``now``: when to restart it, or None to
        leave it down."""
        if self.mode is RestartMode.NO or code == 0:
            return None
        if self._started_at is not None and now - self._started_at >= self.backoff.stable_after_s:
            self.failures = 0
        delay = min(self.backoff.initial_s * self.backoff.factor ** self.failures, self.backoff.max_s)
        self.failures += 1
        return now + delay

    def requested(self) -> None:
        """An operator asked for a restart: not a failure, the series starts again."""
        self.failures = 0

"""PrimaryAddressPlan: when a controller-mode broker binds, keeps and closes its group's primary address.

Pure: role changes and bind outcomes in, the next step out; the clock is read for the back-off only. The I/O
around it (``broker.primary_address_listener``) binds and closes the listeners and follows ``next_step``.

The primary address (``primary_address`` setting) is the group's, not a member's: clients keep it in their routes
through a failover, and whoever is primary serves it (the keepalived-VIP model). The rule:

    wanted         while the broker registers as id 0: from the unfenced end of its promotion (its steps done)
                   until the fenced start of its demotion; a re-promotion for a newer epoch keeps it
    bind           wanted and not held, once the back-off since the last failed bind has passed
    bind failed    (another process still holds it: a frozen old primary, or one whose demotion has not closed it
                   yet) retry after 0.05 s, doubling up to 1 s; never SO_REUSEPORT, so two members never serve
                   it at once
    release        held and no longer wanted, or the broker stops: before anything else of the demotion
                   finishes, so the next primary can take it
    otherwise      nothing to do until the role changes (or the back-off ends)
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

from broker_store.clock import Clock

FIRST_RETRY_S = 0.05
"""Seconds before the first retry of a failed bind."""
MAX_RETRY_S = 1.0
"""The back-off's cap: a new primary takes the address at most this long after its holder closed it."""


class StepKind(enum.Enum):
    BIND = "BIND"
    """Bind the primary address now."""
    RELEASE = "RELEASE"
    """Close it now (listeners and the connections accepted on them)."""
    WAIT = "WAIT"
    """Bind once ``Step.at`` has come (or the role changed)."""
    IDLE = "IDLE"
    """Nothing to do until the role changes."""


@dataclass(frozen=True)
class Step:
    kind: StepKind
    at: float = math.inf
    """``WAIT``: the ``clock.monotonic()`` time of the next bind attempt."""


class PrimaryAddressPlan:
    """See the module docstring. Starts neither wanted nor held (a controller-mode broker starts as a replica)."""

    def __init__(self, clock: Clock, *, first_retry_s: float = FIRST_RETRY_S, max_retry_s: float = MAX_RETRY_S) -> None:
        if not 0 < first_retry_s <= max_retry_s:
            raise ValueError(f"retry back-off must satisfy 0 < first ({first_retry_s}) <= max ({max_retry_s})")
        self._clock = clock
        self._first_retry_s = first_retry_s
        self._max_retry_s = max_retry_s
        self._wanted = False
        self._held = False
        self._stopping = False
        self._failures = 0
        self._retry_at = -math.inf

    @property
    def wanted(self) -> bool:
        return self._wanted and not self._stopping

    @property
    def held(self) -> bool:
        return self._held

    @property
    def failures(self) -> int:
        """Failed binds since the address was last wanted anew or bound."""
        return self._failures

    def role_changed(self, primary: bool) -> None:
        """The broker now registers as id 0 (``primary``) or not. Becoming wanted anew starts a fresh back-off."""
        if primary and not self._wanted:
            self._failures, self._retry_at = 0, -math.inf
        self._wanted = primary

    def stopping(self) -> None:
        """The broker stops: release what is held, never bind again."""
        self._stopping = True

    def next_step(self) -> Step:
        if self._held:
            return Step(StepKind.IDLE) if self.wanted else Step(StepKind.RELEASE)
        if not self.wanted:
            return Step(StepKind.IDLE)
        if self._clock.monotonic() >= self._retry_at:
            return Step(StepKind.BIND)
        return Step(StepKind.WAIT, self._retry_at)

    def bound(self) -> None:
        """The bind succeeded: held (released at the next step if no longer wanted meanwhile)."""
        self._held, self._failures, self._retry_at = True, 0, -math.inf

    def bind_failed(self) -> float:
        """The bind failed (nothing of it is held); the seconds until the next attempt."""
        self._failures += 1
        delay: float = min(self._first_retry_s * 2.0 ** (self._failures - 1), self._max_retry_s)
        self._retry_at = self._clock.monotonic() + delay
        return delay

    def released(self) -> None:
        self._held = False

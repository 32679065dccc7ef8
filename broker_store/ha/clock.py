"""The injectable monotonic clock HA's state machines read (heartbeats, dead links, ack deadlines).

``quorum``, ``replica_links`` and ``ack_tracker`` take a ``Clock``; the asyncio services pass
``SystemClock()`` and tests pass ``ManualClock`` and advance it instead of sleeping. When the broker's
one clock (issue #9's seams) lands, this module becomes an alias of it: the only method the HA code
calls is ``monotonic()``.
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """Seconds from an arbitrary origin that never go backwards."""

    def monotonic(self) -> float: ...


class SystemClock:
    """``time.monotonic``."""

    def monotonic(self) -> float:
        return time.monotonic()


class ManualClock:
    """A clock that moves only when told to (tests)."""

    def __init__(self, start: float = 1000.0) -> None:
        self._now = start

    def monotonic(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError(f"a monotonic clock cannot go back ({seconds} s)")
        self._now += seconds

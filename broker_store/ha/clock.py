"""The injectable clock HA's state machines read (heartbeats, dead links, ack deadlines).

``quorum``, ``replica_links`` and ``ack_tracker`` take a ``Clock``; the asyncio services pass
``SystemClock()`` and tests pass ``ManualClock`` and advance it instead of sleeping.

Interim copy of a subset of the broker's one clock (seams branch ``broker_store/clock.py``): same
names, same ``monotonic()``/``time()``/``advance()`` signatures and defaults, so the seams ``Clock``
satisfies this protocol and merging is: delete this module, import ``broker_store.clock`` instead.
HA's pure code only ever calls ``monotonic()``.
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """Time for timers (the part of the broker's ``Clock`` that HA's state machines use)."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (deadlines, intervals)."""
        ...


class SystemClock:
    """The real clock."""

    def monotonic(self) -> float:
        return time.monotonic()

    def time(self) -> float:
        return time.time()


class ManualClock:
    """A clock that moves only when a test calls ``advance``."""

    def __init__(self, wall: float = 1_700_000_000.0, monotonic: float = 1_000.0) -> None:
        self._mono = monotonic
        self._wall = wall

    def monotonic(self) -> float:
        return self._mono

    def time(self) -> float:
        return self._wall

    def advance(self, seconds: float) -> None:
        """Move both clocks forward."""
        if seconds < 0:
            raise ValueError("a clock does not go back")
        self._mono += seconds
        self._wall += seconds

"""A test clock counted in whole milliseconds, for the connectors' code that stamps ms since the epoch
(``broker_store.clock.wall_ms``): Delta commits, heartbeats, checkpoints. ``broker_store.clock.ManualClock`` is the
one to use where a test moves time in whole seconds; its float seconds can land a hair below a millisecond a test
set (1_700_000_000.001 s is stored as ...000.00099999...), which ``wall_ms`` truncates to the millisecond before.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable


def _seconds(ms: int) -> float:
    # the smallest float >= ms / 1000, so that int(seconds * 1000) is ms again (a float rounds to nearest: both
    # the division and the product may otherwise end just below)
    return math.nextafter(ms / 1000, math.inf)


class MillisClock:
    """A ``broker_store.clock.ThreadClock`` whose wall and monotonic time is ``now_ms``, set or advanced by the test.
    ``step_ms``: added after each wall-time read (a clock that has moved by the next stamp). ``block`` and ``wait``
    move the clock instead of sleeping (one thread: the test's)."""

    def __init__(self, now_ms: int = 1_700_000_000_000, *, step_ms: int = 0) -> None:
        self.now_ms = now_ms
        self.step_ms = step_ms

    def time(self) -> float:
        seconds = _seconds(self.now_ms)
        self.now_ms += self.step_ms
        return seconds

    def monotonic(self) -> float:
        return _seconds(self.now_ms)

    def block(self, seconds: float) -> None:
        self.advance(round(seconds * 1000))

    def wait(self, cond: threading.Condition, timeout: float) -> None:
        self.block(timeout)

    def advance(self, ms: int) -> None:
        self.now_ms += ms


class ReadingClock:
    """A ``broker_store.clock.ThreadClock`` whose every reading is ``read_ms()`` (ms since the epoch): a test's own
    sequence of times (``lambda: next(times)``) or a cell it moves (``lambda: now[0]``). It cannot block or wait."""

    def __init__(self, read_ms: Callable[[], int]) -> None:
        self._read_ms = read_ms

    def time(self) -> float:
        return _seconds(self._read_ms())

    def monotonic(self) -> float:
        return _seconds(self._read_ms())

    def block(self, seconds: float) -> None:
        raise AssertionError("a ReadingClock cannot block: use MillisClock")

    def wait(self, cond: threading.Condition, timeout: float) -> None:
        raise AssertionError("a ReadingClock cannot wait: use MillisClock")

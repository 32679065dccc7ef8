"""Which pulls of one queue range are in flight: the next ones asked for before the last one lands.

Pure schedule, no client and no futures: ``connectors.replication.pulling`` asks the offsets it returns and
hands back each answer in order. Across a WAN one pull per round trip caps a queue at one pull batch per round
trip; with ``depth`` pulls in flight a queue gets up to ``depth`` batches per round trip.

The rule that keeps the pulls exact (nothing skipped, nothing read twice): the pull at offset ``o`` asks
``min(batch, end - o)`` messages and the next one is asked at ``o + that`` on the guess that the answer returns
exactly that many (it does for an unfiltered queue holding them). Answers are taken in the order asked; an
answer is used only when it was asked at the offset the range has reached. When an answer's next begin offset
is not where the next pull in flight was asked (fewer messages returned, a tag filter skipping, an offset move),
every pull in flight is stale: it is dropped unread and the window starts again at the answer's offset.
"""

from __future__ import annotations

from collections import deque

PULLS_IN_FLIGHT = 4
"""Pulls in flight per queue range (``PullWindow.depth``): 4 x 1024 messages of 1 KiB fill a 50 ms round trip
at ~80 MB/s per queue."""
TASK_PULLS_IN_FLIGHT = 32
"""Pulls in flight per sink task over all its ranges (``depth_for``): answers wait in memory until the task
forwards them, so a task of hundreds of ranges keeps one pull in flight per range, as before pipelining."""


def depth_for(ranges: int) -> int:
    """Pulls in flight per range for a task pulling ``ranges`` ranges at once: ``PULLS_IN_FLIGHT``, fewer when
    that would put more than ``TASK_PULLS_IN_FLIGHT`` in flight, never below one."""
    return max(1, min(PULLS_IN_FLIGHT, TASK_PULLS_IN_FLIGHT // max(1, ranges)))


class PullWindow:
    """The offsets of the pulls in flight for ``[offset, end)`` of one queue, oldest first."""

    def __init__(self, start: int, end: int, batch: int, depth: int = PULLS_IN_FLIGHT) -> None:
        if batch < 1 or depth < 1:
            raise ValueError(f"a pull window needs batch >= 1 and depth >= 1, not batch {batch}, depth {depth}")
        self.end = end
        self.batch = batch
        self.depth = depth
        self.offset = start
        """Where the range has been read up to: the oldest pull in flight is asked here."""
        self.in_flight: deque[int] = deque()
        self._next = start

    def size(self, at: int) -> int:
        """Messages a pull at ``at`` asks for."""
        return min(self.batch, self.end - at)

    def fill(self) -> list[int]:
        """The offsets to ask now (each recorded as in flight), oldest first, up to ``depth`` in flight."""
        asked = []
        while len(self.in_flight) < self.depth and self._next < self.end:
            self.in_flight.append(self._next)
            asked.append(self._next)
            self._next += self.size(self._next)
        return asked

    def answered(self, next_begin: int) -> list[int]:
        """The oldest pull answered with data up to ``next_begin``; the stale pulls to drop unread (the rest of
        the window when it was not asked at ``next_begin``), after which ``fill`` asks from there."""
        self.in_flight.popleft()
        self.offset = next_begin
        if self.in_flight and self.in_flight[0] == next_begin:
            return []
        return self.restart(next_begin)

    def restart(self, at: int) -> list[int]:
        """Every pull in flight dropped (to drop unread); the window starts again at ``at``."""
        stale = list(self.in_flight)
        self.in_flight.clear()
        self.offset = self._next = at
        return stale

"""When a server logs that it refused a peer: each reason the first time at once, its repeats at most once per
interval with the count left unlogged, so a peer retrying in a loop cannot flood the log and no distinct reason
is hidden. Pure: the caller passes its clock's ``monotonic()`` time. Used by the HA port (``ha.primary_service``)
and the controller (``controller.processor``).
"""

from __future__ import annotations

from collections import OrderedDict

MAX_REASONS = 256
"""Reasons remembered (the oldest forgotten first): reasons name peers, and peers may be many."""


class RefusalLog:
    """``note(reason, now)`` for every refusal; it says whether to log it now."""

    def __init__(self, *, interval: float = 1.0) -> None:
        self._interval = interval
        self._reasons: OrderedDict[str, tuple[float, int]] = OrderedDict()
        """reason -> (when it may be logged again, repeats not logged since)."""
        self.refusals = 0
        """Refusals noted since start."""

    def note(self, reason: str, now: float) -> int | None:
        """None: stay silent. Otherwise log now, adding the returned count of repeats not logged (0: none).
        ``now``: the caller's clock (``Clock.monotonic``)."""
        self.refusals += 1
        entry = self._reasons.get(reason)
        if entry is not None and now < entry[0]:
            self._reasons[reason] = (entry[0], entry[1] + 1)
            return None
        self._reasons[reason] = (now + self._interval, 0)
        self._reasons.move_to_end(reason)
        while len(self._reasons) > MAX_REASONS:
            self._reasons.popitem(last=False)
        return 0 if entry is None else entry[1]


def unlogged_suffix(count: int) -> str:
    """Text to append to a logged refusal for ``count`` repeats left unlogged."""
    return f" ({count} more refusals for this reason not logged)" if count else ""

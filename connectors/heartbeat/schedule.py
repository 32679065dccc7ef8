"""The heartbeat connector's polling core: which heartbeat is due, one per interval, and the state to
resume from. The shape of bytewax's ``SimplePollingSource``: ``next_item()`` per interval and nothing else.

Used on the driver by ``connectors.heartbeat.reader`` (whose Spark offsets are ``ScheduleState``
documents); pure, with an injected clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from broker_store.clock import ThreadClock, wall_ms


@dataclass(frozen=True, slots=True)
class ScheduleState:
    """Where the schedule resumes: Spark keeps it as the reader's offset (``{"seq": n, "due_ms": t}``)."""

    seq: int
    """Sequence number of the next heartbeat."""
    due_ms: int
    """When it is due (ms since the epoch)."""

    def to_offset(self) -> dict[str, Any]:
        return {"seq": self.seq, "due_ms": self.due_ms}

    @classmethod
    def from_offset(cls, offset: Mapping[str, Any]) -> ScheduleState:
        try:
            return cls(int(offset["seq"]), int(offset["due_ms"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not a heartbeat schedule offset: {dict(offset)!r}") from exc


@dataclass(frozen=True, slots=True)
class Tick:
    """One due heartbeat (the same ``seq`` for every link)."""

    seq: int
    due_ms: int


class HeartbeatSchedule:
    """One tick per ``interval_ms``. A tick late by more than an interval (the job was stopped, a
    trigger was slow) is not caught up: the missed ones are skipped and the next is due one interval
    after now, so a restart never sends a burst that would look like recovered lag."""

    def __init__(self, interval_ms: int, clock: ThreadClock) -> None:
        if interval_ms <= 0:
            raise ValueError(f"interval_ms must be > 0, got {interval_ms}")
        self.interval_ms = interval_ms
        self._clock = clock

    def initial_state(self) -> ScheduleState:
        """A new schedule: the first heartbeat is due at once."""
        return ScheduleState(0, wall_ms(self._clock))

    def next_item(self, state: ScheduleState) -> tuple[Tick | None, ScheduleState]:
        """The tick due now (or None) and the state after it."""
        now = wall_ms(self._clock)
        if now < state.due_ms:
            return None, state
        following = state.due_ms + self.interval_ms
        if following <= now:
            following = now + self.interval_ms
        return Tick(state.seq, state.due_ms), ScheduleState(state.seq + 1, following)

    def ticks_between(self, start: ScheduleState, end: ScheduleState) -> list[Tick]:
        """The ticks a batch from ``start`` to ``end`` held, for a deterministic re-read. ``next_item``
        gives one tick per batch, so this is ``[Tick(start.seq, start.due_ms)]`` for any batch it made."""
        return [Tick(seq, start.due_ms + (seq - start.seq) * self.interval_ms) for seq in range(start.seq, end.seq)]

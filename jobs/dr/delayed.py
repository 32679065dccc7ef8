"""Delayed messages still waiting on A (``SCHEDULE_TOPIC_XXXX``): how many, and until when the forward link's
job must keep running so that each reaches B at its due time, once.

The rule (docs/operations.md, "What a moved consumer group finds on B"): nothing of the schedule is copied or
handed over. A's schedule service keeps delivering each waiting message into its real topic when it is due,
also after a switchover (its puts go through A's store, not through the topic permissions the fence removed),
and the forward link copies that delivery to B like any message of A: B gets it at its due time plus the link's
lag, never early, once. So after a switchover the forward link's job runs until the last waiting message has
fallen due; ``switchover`` and ``status`` report when that is.

What is read (thin, ``read_waiting``): per broker group of A, its schedule service's delay offsets
(GET_ALL_DELAY_OFFSET: per level, the next schedule queue offset it delivers) and the end of each level's queue
(GET_MAX_OFFSET of ``SCHEDULE_TOPIC_XXXX`` queue ``level - 1``, asked of the group's primary: the schedule topic
has no route). The entries between are waiting. Their real topics are not read (a client cannot pull the schedule
topic from the bundled brokers), so the count holds every waiting message of the broker group, of linked topics
or not, send-backs to retry topics included; and an entry of level ``L`` read at ``now`` was stored before
``now``, so it is due before ``now + delay(L)``: the latest due time reported is that bound (by A's level table,
``--delay-levels``), never earlier than the true one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from broker_store.store.delay_levels import SCHEDULE_TOPIC, DelayLevels, queue_id_of_level
from jobs.dr.link_ends import LinkEnds


@dataclass(frozen=True)
class LevelWaiting:
    """The waiting entries of one level's schedule queue on one broker group of A."""

    broker: str
    level: int
    delivered_up_to: int
    """The schedule service's next offset (its delay offset for the level)."""
    end: int
    """The queue's max offset (next to be written)."""

    @property
    def waiting(self) -> int:
        return max(0, self.end - self.delivered_up_to)


@dataclass(frozen=True)
class DelayedWaiting:
    """What waits in A's schedule at ``read_at_ms``, and the latest due time of it (a bound, module docstring)."""

    read_at_ms: int
    levels: tuple[LevelWaiting, ...]
    """Only levels with waiting entries, by broker then level."""
    latest_due_ms: int | None
    """None: nothing waits."""

    @property
    def waiting(self) -> int:
        return sum(w.waiting for w in self.levels)

    def to_json(self) -> dict[str, Any]:
        return {"read_at_ms": self.read_at_ms, "waiting": self.waiting, "latest_due_ms": self.latest_due_ms,
                "levels": [{"broker": w.broker, "level": w.level, "delivered_up_to": w.delivered_up_to,
                            "end": w.end, "waiting": w.waiting} for w in self.levels]}


def waiting_on_a(read_at_ms: int, levels: DelayLevels, delay_offsets: Mapping[str, Mapping[int, int]],
                 ends: Mapping[str, Mapping[int, int]]) -> DelayedWaiting:
    """From each broker group's delay offsets and its schedule queues' ends (level -> max offset) read at
    ``read_at_ms``: the waiting entries and the bound of their latest due time (pure). A level without a delay
    offset has delivered nothing yet (offset 0)."""
    waiting = []
    for broker in sorted(ends):
        offsets = delay_offsets.get(broker, {})
        for level, end in sorted(ends[broker].items()):
            entry = LevelWaiting(broker, level, offsets.get(level, 0), end)
            if entry.waiting:
                waiting.append(entry)
    latest = max((levels.deliver_timestamp(levels.cap(w.level), read_at_ms) for w in waiting), default=None)
    return DelayedWaiting(read_at_ms, tuple(waiting), latest)


def keep_link_line(link: str, waiting: Mapping[str, Any]) -> str:
    """What the operator does about the delayed messages waiting on A (``DelayedWaiting.to_json``)."""
    if not waiting["waiting"]:
        return (f"no delayed message waits on A (its schedule, read at {stamp_ms(waiting['read_at_ms'])}): the "
                f"forward link {link} has nothing more to bring.")
    return (f"{waiting['waiting']} delayed message(s) wait on A (its schedule, every topic); A delivers each when due "
            f"and the forward link copies it to B: keep the job of link {link} running until "
            f"{stamp_ms(waiting['latest_due_ms'])} at least (then its lag).")


def stamp_ms(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def read_waiting(ends: LinkEnds, levels: DelayLevels) -> DelayedWaiting:
    """Read A's schedule now (module docstring): every broker group's primary answers or ``RocketMQError``."""
    admin = ends.a
    delay_offsets: dict[str, dict[int, int]] = {}
    queue_ends: dict[str, dict[int, int]] = {}
    for broker, addr in sorted(admin.primary_addrs(ends.source.name).items()):
        delay_offsets[broker] = admin.all_delay_offsets(addr)
        queue_ends[broker] = {level: admin.max_offset_at(addr, SCHEDULE_TOPIC, queue_id_of_level(level))
                              for level in range(1, levels.max_level + 1)}
    read_at_ms = int(ends.clock.time() * 1000)  # after the reads: every entry counted was stored before
    return waiting_on_a(read_at_ms, levels, delay_offsets, queue_ends)

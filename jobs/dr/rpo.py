"""The recovery-point audit of a link from its own records: per source queue, what the link replicated (its
committed resume point X) against the newest max offset the replication job recorded for A (Y, read at T:
``connectors.replication.source_maxes``). At least ``Y - X`` messages A acknowledged are not on B; what A
acknowledged after T is unknown (A can no longer be asked). Pure: used by ``jobs.dr.failover``'s audit step and
``jobs.dr.status``; unit-tested without clusters.

Rules: a queue replicated past Y (the record is older than the link's last commit) misses nothing, never a
negative count. A queue recorded but never replicated counts from the first offset A held when it was seen (the
link would have started there). A queue the link replicated that the record never saw has an unknown loss
(``missing`` None), counted apart, never as 0.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from broker_store.client import MessageQueue
from connectors.core.offsets import queue_key
from connectors.replication.source_maxes import SourceMaxes

UNKNOWN_AFTER = ("messages A acknowledged after its last observation are unknown: A cannot be asked; "
                 "python -m jobs.dr recover counts and copies them once A answers again")


class QueueAudit(NamedTuple):
    """One source queue's audit."""

    queue: MessageQueue
    replicated: int | None
    """X: the link's committed next source offset (None: never replicated)."""
    last_seen: int | None
    """Y: A's max offset as last recorded (None: never recorded)."""
    observed_at: float | None
    """When Y was read (wall clock, s)."""
    first_seen: int | None = None
    """A's min offset at that read."""

    @property
    def missing(self) -> int | None:
        """At least this many acknowledged messages are not on B (None: unknown)."""
        if self.last_seen is None:
            return None
        start = self.replicated if self.replicated is not None else (self.first_seen or 0)
        return max(0, self.last_seen - start)

    def to_json(self) -> dict[str, Any]:
        return {"queue": [self.queue.topic, self.queue.broker_name, self.queue.queue_id],
                "replicated": self.replicated, "last_seen": self.last_seen, "observed_at": self.observed_at,
                "missing": self.missing}


class Audit(NamedTuple):
    queues: tuple[QueueAudit, ...]
    recorded_at: float | None
    """When the record was last written (None: no record)."""

    @property
    def missing(self) -> int:
        """At least this many acknowledged messages are not on B (queues with a known count)."""
        return sum(q.missing or 0 for q in self.queues)

    @property
    def unknown(self) -> list[QueueAudit]:
        return [q for q in self.queues if q.missing is None]

    @property
    def oldest_observation(self) -> float | None:
        return min((q.observed_at for q in self.queues if q.observed_at is not None), default=None)

    @property
    def newest_observation(self) -> float | None:
        return max((q.observed_at for q in self.queues if q.observed_at is not None), default=None)

    def to_json(self) -> dict[str, Any]:
        return {"missing": self.missing, "unknown_queues": [queue_key(q.queue) for q in self.unknown],
                "recorded_at": self.recorded_at, "oldest_observation": self.oldest_observation,
                "newest_observation": self.newest_observation, "unknown_after": UNKNOWN_AFTER,
                "queues": [q.to_json() for q in self.queues]}


def audit(replicated: Mapping[MessageQueue, int], record: SourceMaxes | None,
          topics: Sequence[str] | None = None) -> Audit:
    """The audit of every queue the link replicated or the record holds (of ``topics`` only, when given)."""
    seen = dict(record.queues) if record is not None else {}
    queues = set(replicated) | set(seen)
    if topics is not None:
        queues = {q for q in queues if q.topic in set(topics)}
    rows = []
    for q in sorted(queues, key=queue_key):
        o = seen.get(q)
        rows.append(QueueAudit(q, replicated.get(q), None if o is None else o.max_offset,
                               None if o is None else o.observed_at, None if o is None else o.min_offset))
    return Audit(tuple(rows), None if record is None else record.written_at)

"""Queue placement of a replication link: the target queue each source queue's messages go to.

A source queue's messages stay in order only while they all land in one target queue, so a placement,
once decided, never changes while the link lives: not when the source topic grows, not when the
target topic grows or shrinks, not across restarts (the caller persists every decision and hands the
decided ones back to ``LinkPlacements``; the link's retention forgets only a source queue idle for
``placements_retention``). Only source queues without a decision get one:

* ``preserve`` (the link's ``preserve_queues``) and the source topic has as many queues as the target
  topic: the n-th source queue (sorted by broker name, queue id) goes to the n-th target queue, which
  keeps queue ids where both sides are laid out alike, unless that target queue already has a source
  queue (earlier decisions made under another layout: a source broker group added that sorts first);
* otherwise the target queue with the fewest source queues placed on it (over every source topic mapped
  into that target topic), ties to the lowest in (broker name, queue id) order, so eight source queues
  on three target queues are spread 3/3/2 and new queues never pile up on one target queue.

So every source queue gets a target queue of its own whenever the target topic has at least as many
writable queues as source queues have been placed into it (config sync sizes target topics for that:
``connectors.config_sync.sizing``), and the checkpoint translation is then exact. Otherwise some share
one, for good: the checkpoints mark those "shared: may re-read" (``connectors.checkpoint.committer``).

Pure code: no I/O, no clock. Deterministic: the same decided placements and the same queue lists give
the same decisions, so a batch that is re-run after a crash (before its decisions were persisted)
decides the same way again.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from broker_store.client import MessageQueue
from connectors.core.offsets import queue_key

PRESERVED = "preserved"
"""Reason of a decision: same position in equally sized topics."""
LEAST_LOADED = "least-loaded"
"""Reason of a decision: the target queue with the fewest source queues."""


class TargetQueue(NamedTuple):
    """One queue of a target topic."""

    broker_name: str
    """Broker group of the target cluster."""
    queue_id: int
    """Queue id within the target topic on that broker group."""


@dataclass(frozen=True)
class Placement:
    """One decision: ``source`` is replicated into ``target`` of ``target_topic``, for good."""

    source: MessageQueue
    """The source queue."""
    target_topic: str
    """Target topic after the link's mapping (rename, several topics into one)."""
    target: TargetQueue
    """The target queue every message of ``source`` goes to."""
    reason: str
    """``PRESERVED`` or ``LEAST_LOADED`` (for the log line and the placements table)."""

    def describe(self) -> str:
        """One log line naming both ends and why."""
        return (f"{queue_key(self.source)} -> {self.target_topic}/{self.target.broker_name}/"
                f"{self.target.queue_id} ({self.reason})")


class LinkPlacements:
    """The decided placements of one link and the rule for new ones (see the module docstring)."""

    def __init__(self, decided: Iterable[Placement] = ()) -> None:
        self._decided: dict[tuple[MessageQueue, str], Placement] = {}
        self._load: dict[str, Counter[TargetQueue]] = {}
        for placement in decided:
            self._remember(placement)

    def _remember(self, placement: Placement) -> None:
        key = (placement.source, placement.target_topic)
        if key in self._decided:  # the first decision stands (a re-run that persisted twice)
            return
        self._decided[key] = placement
        self._load.setdefault(placement.target_topic, Counter())[placement.target] += 1

    def get(self, source: MessageQueue, target_topic: str) -> Placement | None:
        """The decision for ``source`` into ``target_topic``, if one was made."""
        return self._decided.get((source, target_topic))

    def decided(self) -> list[Placement]:
        """Every decision, in the order they were made or loaded."""
        return list(self._decided.values())

    def load(self, target_topic: str) -> Mapping[TargetQueue, int]:
        """Source queues placed on each target queue of ``target_topic`` (queues with none are absent)."""
        return dict(self._load.get(target_topic, Counter()))

    def place(self, target_topic: str, sources: Iterable[MessageQueue], *, source_topic_queues: Sequence[MessageQueue],
              target_queues: Sequence[TargetQueue], preserve: bool) -> list[Placement]:
        """Decide every source queue of ``sources`` that has no decision for ``target_topic`` yet and return
        only the new decisions (already decided queues keep theirs and are not returned).

        ``source_topic_queues``: every queue of the sources' topic now (for the equal-count rule; pass
        the queues of one source topic per call); ``target_queues``: the target topic's writable queues
        now. With no target queue nothing can be decided and the result is empty."""
        targets = sorted(set(target_queues))
        if not targets:
            return []
        ordered_sources = sorted(set(source_topic_queues), key=lambda q: (q.broker_name, q.queue_id))
        equal = preserve and len(ordered_sources) == len(targets)
        position = {q: i for i, q in enumerate(ordered_sources)}
        new: list[Placement] = []
        for source in sorted(set(sources), key=lambda q: (q.topic, q.broker_name, q.queue_id)):
            if (source, target_topic) in self._decided:
                continue
            load = self._load.get(target_topic, Counter())
            if equal and source in position and not load[targets[position[source]]]:
                placement = Placement(source, target_topic, targets[position[source]], PRESERVED)
            else:
                target = min(targets, key=lambda t: (load[t], t))
                placement = Placement(source, target_topic, target, LEAST_LOADED)
            self._remember(placement)
            new.append(placement)
        return new

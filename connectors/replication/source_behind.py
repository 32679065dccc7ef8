"""The driver's check for a source queue that ends below the link's position: the source lost messages the link had
already read, and will store new ones at offsets the link considers done.

How it happens: a source that exposes messages before they are safe (an Apache RocketMQ 5 primary without
``allAckInSyncStateSet`` serves up to its own max offset) fails over; the new primary's log is shorter and it reuses
the lost offsets for new messages. Or the topic was deleted and created again, its queues starting at 0. The
link's position (the Spark checkpoint, the Delta offsets) stays where it was, so every message stored below it is
never read: a silent loss, the worst kind for a disaster-recovery link. Our brokers serve only up to the confirm
offset (docs/brokers.md, "CP or AP"), so with them it takes a re-created topic.

A queue briefly answered short is not this: a worker or the driver may ask a broker a failover just deposed
(stale route, ``pulling.BEHIND_GRACE_MS``). So a queue is reported only once it stayed below the position for
``grace_s``, once per episode, with what to do. The batches go on as before (the backlog of such a queue is 0
until its end passes the position again); stopping the link here would turn every such blip into an outage,
and whether the messages below the position are new or old is not knowable from offsets alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from broker_store.client import MessageQueue


@dataclass(frozen=True)
class Behind:
    queue: MessageQueue
    end: int
    """The queue's max offset now."""
    position: int
    """The link's position in it (the next offset it would read)."""


@dataclass
class BehindWatch:
    """Per queue, since when its end is below the link's position (``clock`` seconds)."""

    grace_s: float
    since: dict[MessageQueue, float] = field(default_factory=dict)
    reported: set[MessageQueue] = field(default_factory=set)

    def check(self, now: float, position: Mapping[MessageQueue, int], ends: Mapping[MessageQueue, int]) -> list[Behind]:
        """The queues of ``ends`` whose end has been below their ``position`` for ``grace_s`` by ``now`` and were not
        reported in this episode (an episode ends when the queue's end reaches the position again)."""
        found = []
        for queue, end in ends.items():
            at = position.get(queue)
            if at is None or end >= at:
                self.since.pop(queue, None)
                self.reported.discard(queue)
                continue
            first = self.since.setdefault(queue, now)
            if now - first >= self.grace_s and queue not in self.reported:
                self.reported.add(queue)
                found.append(Behind(queue, end, at))
        return found


def behind_warning(link: str, cluster: str, behind: Behind, grace_s: float, config_path: str | None) -> str:
    """The WARNING for a queue reported by ``BehindWatch``."""
    q = behind.queue
    config = config_path or "<replicator.yaml>"
    return (f"link {link}: source queue {q.topic}/{q.broker_name}/{q.queue_id} of cluster {cluster} ends at "
            f"{behind.end}, below the link's position {behind.position}, for {grace_s:g} s: the source lost messages "
            f"the link had read (a failover that truncated its log, or the topic deleted and created again), and "
            f"what it stores at offsets below {behind.position} will not be replicated. To replicate them, find the "
            f"first offset to copy (the messages' store times tell the old from the new), write "
            f"{{\"{q.topic}/{q.broker_name}/{q.queue_id}\": <offset>}} to a file and run `python -m jobs.reset_offsets "
            f"--config {config} --link {link} --to <file>` (only that queue moves; --dry-run first)")

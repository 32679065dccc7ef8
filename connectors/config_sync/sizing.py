"""How many queues a target topic gets per target broker group: config sync's sizing rule, alone.

Called by ``connectors.config_sync.plan`` (``_topic_changes``: creation and growth, in config-sync rounds and
in ``creation_for``, the replication planner's "create like the source"). Pure: no I/O, no clock; tested
without brokers.

Why the total and not the per-group count: the checkpoint translation is exact only while every source queue
has a target queue of its own (``connectors.checkpoint.translation``: a target queue fed by several source
queues gets the minimum of their translations, so a consumer failing over re-reads the others' messages).
RocketMQ topics are sized per broker group, and a source with more broker groups than the target (2 x 4
queues into 1 broker) would get 4 target queues for 8 source queues if the per-group count were copied. So:

* wanted total = the source topic's queues over all its broker groups (``TopicState.total_read_queue_nums``
  / ``total_write_queue_nums``); for several source topics into one target topic, the largest of those
  totals (their queues share the target's queues anyway, see docs/replicator.md, "Checkpoints and config sync");
* per target broker group = ceil(wanted total / target broker groups), so the target holds at least as
  many queues as the source and queue placement (``connectors.replication.queue_placement``) can give each
  source queue its own;
* ``max_queue_nums`` bounds the per-group count: a source topic with more queues than that on one of its
  own broker groups is refused as before (``refusal``); a total that only exceeds it once spread is capped
  there (``capped``: some source queues will share target queues, reported by the checkpoints);
* the caller still applies the never-shrink rule (``max(wanted, current)`` per count): sizing only says
  what the source needs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from connectors.config_sync.state import TopicState


@dataclass(frozen=True)
class TopicSizing:
    """Read / write queue counts per target broker group for one target topic."""

    read_queue_nums: int
    write_queue_nums: int
    source_read_total: int
    """The largest total read queue count of the source topics (over their broker groups)."""
    source_write_total: int
    target_groups: int
    """Target broker groups the totals were spread over (at least 1)."""
    capped: bool = False
    """``max_queue_nums`` kept a count below one target queue per source queue."""
    refusal: str = ""
    """Non-empty: the topic must not be created or grown at all (a source group alone exceeds the cap)."""

    def describe_cap(self) -> str:
        """The detail of a capped creation / growth, for the ``config_changes`` row."""
        return (f"source totals read/write {self.source_read_total}/{self.source_write_total} over "
                f"{self.target_groups} target broker group(s) capped at max_queue_nums: several source queues "
                f"will share target queues (checkpoints mark them shared: may re-read)")


def per_group(total: int, target_groups: int) -> int:
    """ceil(total / target_groups), at least 1 group."""
    groups = max(1, target_groups)
    return -(-total // groups)


def size_target_topic(sources: Sequence[TopicState], target_groups: int, max_queue_nums: int) -> TopicSizing:
    """The sizing of a target topic fed by ``sources`` on a target with ``target_groups`` broker groups
    (see the module docstring)."""
    if not sources:
        raise ValueError("size_target_topic needs at least one source topic")
    groups = max(1, target_groups)
    read_total = max(s.total_read_queue_nums for s in sources)
    write_total = max(s.total_write_queue_nums for s in sources)
    largest_group = max(max(s.read_queue_nums, s.write_queue_nums) for s in sources)
    read, write = per_group(read_total, groups), per_group(write_total, groups)
    if largest_group > max_queue_nums:
        return TopicSizing(read, write, read_total, write_total, groups,
                           refusal=f"{largest_group} queues exceed max_queue_nums {max_queue_nums}")
    capped = max(read, write) > max_queue_nums
    return TopicSizing(min(read, max_queue_nums), min(write, max_queue_nums), read_total, write_total, groups,
                       capped=capped)

"""RocketMQ's MessageQueue: one queue of a topic on one broker group: the key of topic stats
(``protocol.topic_stats``), the client's sends and pulls and the connectors' offsets. Wire type only."""

from __future__ import annotations

from typing import NamedTuple


class MessageQueue(NamedTuple):
    """One queue of a topic on one broker group (RocketMQ's MessageQueue), on whichever cluster the name
    holding it says. A tuple, so it equals, hashes and sorts as ``(topic, broker_name, queue_id)``: callers
    may build it from a plain tuple or a Spark row (``MessageQueue(*row)``) and look it up with one; it
    pickles for Spark executors."""

    topic: str
    """Topic name."""
    broker_name: str
    """Broker group name; resolve it to an address through the topic route."""
    queue_id: int
    """Queue id within the topic on that broker group."""

    def __str__(self) -> str:
        return f"{self.topic}@{self.broker_name}#{self.queue_id}"

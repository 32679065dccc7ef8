"""A replicated message's source position, carried in ``ROCKETMQ_REPLICATOR_POSITION`` (format and parsing rules
documented beside the constant, ``broker_store.protocol.properties``; this module is their one implementation).

Written on executors by ``forwarding`` (both the C and the Python loops take the entry prefix built here) and
the row path of ``partition_writer``; read by the sink's recovery check (``resend_check``) on what it finds
in a target queue's tail. Pure functions; nothing here touches the network.
"""

from __future__ import annotations

from typing import NamedTuple

from broker_store.client import MessageQueue
from broker_store.protocol.properties import PROPERTY_REPLICATOR_POSITION, property_key

POSITION_PROPERTY = PROPERTY_REPLICATOR_POSITION
POSITION_SEPARATOR = "/"


class SourcePosition(NamedTuple):
    """One message's place on the link's source cluster."""

    cluster: str
    """Source cluster name (the link's ``source``)."""
    queue: MessageQueue
    """Source queue: topic, broker group, queue id."""
    offset: int
    """Queue offset of the message in ``queue``."""


def position_prefix(cluster: str, queue: MessageQueue) -> str:
    """The value of every position of ``queue`` up to its offset: ``<cluster>/<topic>/<broker>/<queue id>/``."""
    return f"{cluster}/{queue.topic}/{queue.broker_name}/{queue.queue_id}/"


def format_position(cluster: str, queue: MessageQueue, offset: int) -> str:
    """The property value of the message at ``offset`` of ``queue`` on ``cluster``."""
    return f"{position_prefix(cluster, queue)}{offset}"


def position_entry_prefix(cluster: str, queue: MessageQueue) -> bytes:
    """``ROCKETMQ_REPLICATOR_POSITION\\x01<cluster>/<topic>/<broker>/<queue id>/``: the bytes the forwarding loops
    append before a record's decimal offset and the closing ``\\x02``."""
    return property_key(POSITION_PROPERTY) + position_prefix(cluster, queue).encode()


def parse_position(value: str | None) -> SourcePosition | None:
    """The position a property value names, or None when it names none (absent, or not in the format:
    another writer's property of the same name is left alone, never trusted)."""
    if not value:
        return None
    cluster, sep1, rest = value.partition(POSITION_SEPARATOR)
    topic, sep2, rest = rest.partition(POSITION_SEPARATOR)
    broker, sep3, numbers = rest.rpartition(POSITION_SEPARATOR)  # queue id and offset from the right
    broker, sep4, queue_id = broker.rpartition(POSITION_SEPARATOR)
    if not (sep1 and sep2 and sep3 and sep4 and cluster and topic and broker):
        return None
    if not (queue_id.isascii() and queue_id.isdigit() and numbers.isascii() and numbers.isdigit()):
        return None
    return SourcePosition(cluster, MessageQueue(topic, broker, int(queue_id)), int(numbers))

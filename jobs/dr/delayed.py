"""Delayed messages still waiting on A (``SCHEDULE_TOPIC_XXXX``) when A stops being the active side: the pure
rule of their hand-over to B. Used by ``jobs.dr`` (the command that reads A's waiting entries and sends them is
not built yet: docs/operations.md, "What a moved consumer group finds on B").

Why a hand-over and not continuous replication of the schedule: B's broker would deliver every replicated
entry when due, and the link would also bring A's own delivery of it, so each delayed message would reach B
twice. Handed over once, when A no longer delivers to B through the link, each reaches B once.

A waiting entry of A, stored at ``store_timestamp`` in level ``L``'s queue, is due at
``store_timestamp + delay(L)`` (A's level table). Its hand-over to B is one message (``handover_message``):

    topic        the link's target topic of its REAL_TOPIC (entries of topics the link does not copy stay)
    DELAY        the smallest level of B's table not earlier than what remains of its wait, at least 1
                 (``DelayLevels.level_not_earlier``): an Apache RocketMQ target delivers it then, never early
    ROCKETMQ_REPLICATOR_DUE_MS   the original due time: the bundled brokers deliver it exactly then
    ROCKETMQ_REPLICATOR_DELAYED  ``<cluster>/<broker>/<level>/<offset>`` of the entry on A: what a re-run
                                 checks on B so nothing is handed over twice
    ROCKETMQ_REPLICATOR_SOURCE   A appended (the loop guard keeps a reverse link from copying it back to A,
                                 which delivers its own copy)
    REAL_TOPIC, REAL_QID         removed (B's broker sets its own); body, flag, keys, tags, UNIQ_KEY kept
"""

from __future__ import annotations

from typing import NamedTuple

from broker_store.broker.delayed_send import PROPERTY_REAL_QUEUE_ID, PROPERTY_REAL_TOPIC
from broker_store.protocol.message import Message, StoredMessage
from broker_store.protocol.properties import PROPERTY_DELAY, PROPERTY_WAIT
from broker_store.store.delay_levels import PROPERTY_DUE_MS, DelayLevels
from connectors.replication.loop_guard import stamp

PROPERTY_HANDOVER = "ROCKETMQ_REPLICATOR_DELAYED"
"""Where a handed-over message waited on A: ``<cluster>/<broker>/<level>/<schedule queue offset>``."""


class WaitingEntry(NamedTuple):
    """One entry of A's schedule that its schedule service has not delivered yet."""

    broker: str
    """A's broker group holding it."""
    level: int
    """Its delay level on A (its schedule queue is ``level - 1``)."""
    message: StoredMessage
    """The stored entry (topic SCHEDULE_TOPIC_XXXX, REAL_TOPIC / REAL_QID naming where it goes)."""


class Handover(NamedTuple):
    """The send to B that hands one waiting entry over."""

    message: Message
    due_ms: int
    """The entry's due time on A (ms since the epoch): it must not reach B's real topic before."""
    level: int
    """The delay level sent to B."""
    early: bool
    """True only when B's longest level is shorter than what remains: an Apache target delivers it before its
    due time (the bundled brokers still honour the due time). Reported, never silent."""


def due_ms(entry: WaitingEntry, levels: DelayLevels) -> int:
    """When ``entry`` is due on A, by A's level table."""
    return levels.deliver_timestamp(levels.cap(entry.level), entry.message.store_timestamp)


def handover_marker(cluster: str, entry: WaitingEntry) -> str:
    return f"{cluster}/{entry.broker}/{entry.level}/{entry.message.queue_offset}"


def handover_message(entry: WaitingEntry, target_topic: str, *, source_cluster: str, a_levels: DelayLevels,
                     b_levels: DelayLevels, now_ms: int) -> Handover:
    """The send to B of ``entry`` (module docstring); ``target_topic`` is the link's target of its REAL_TOPIC.
    ValueError when the entry names no REAL_TOPIC (B could not deliver it either)."""
    props = dict(entry.message.properties)
    if not props.get(PROPERTY_REAL_TOPIC):
        raise ValueError(f"the entry at {handover_marker(source_cluster, entry)} names no {PROPERTY_REAL_TOPIC}")
    for name in (PROPERTY_REAL_TOPIC, PROPERTY_REAL_QUEUE_ID, PROPERTY_WAIT):
        props.pop(name, None)
    due = due_ms(entry, a_levels)
    remaining = due - now_ms
    level = max(1, b_levels.level_not_earlier(remaining))
    props[PROPERTY_DELAY] = str(level)
    props[PROPERTY_DUE_MS] = str(due)
    props[PROPERTY_HANDOVER] = handover_marker(source_cluster, entry)
    props = stamp(props, source_cluster)
    message = Message(target_topic, entry.message.body, props, entry.message.flag)
    return Handover(message, due, level, early=not b_levels.reaches(remaining))

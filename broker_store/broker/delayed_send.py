"""The send side of scheduled delivery: a message asking for a delay level is stored in SCHEDULE_TOPIC_XXXX.

Called by ``send_processor`` (SEND_MESSAGE(_V2) and CONSUMER_SEND_MSG_BACK) only for a message whose
properties hold DELAY: a message without it pays one bytes search in the send path and nothing here. The
schedule service (``broker.schedule``) later puts the message back into its real topic and queue.

What a delayed put stores (RocketMQ 4.x CommitLog / HookUtils.transformDelayLevelMessage)::

    topic     SCHEDULE_TOPIC_XXXX
    queue id  level - 1                   level = DELAY capped at the highest level of ``message_delay_level``
    REAL_TOPIC / REAL_QID properties      the topic and queue id the message was sent to
    DELAY property                        the capped level (rewritten only when capped)

Only messages that are not transactional, or are committed, are delayed (a prepared half message is not).
"""

from __future__ import annotations

from typing import NamedTuple

from broker_store.protocol.codes import MSG_FLAG_TRANSACTION_COMMIT, MSG_FLAG_TRANSACTION_ROLLBACK
from broker_store.protocol.properties import PROPERTY_DELAY, put_property
from broker_store.store.delay_levels import SCHEDULE_TOPIC, DelayLevels, queue_id_of_level, requested_level

PROPERTY_REAL_TOPIC = "REAL_TOPIC"
"""MessageConst.PROPERTY_REAL_TOPIC: the topic a delayed message is delivered to."""
PROPERTY_REAL_QUEUE_ID = "REAL_QID"
"""MessageConst.PROPERTY_REAL_QUEUE_ID: the queue id a delayed message is delivered to."""
_TRANSACTION_TYPE = MSG_FLAG_TRANSACTION_ROLLBACK
"""The two SYSFLAG bits of the transaction type (0 = none, 4 prepared, 8 commit, 12 rollback)."""
SEND_BACK_FIRST_LEVEL = 3
"""CONSUMER_SEND_MSG_BACK with delayLevel 0 waits level 3 + reconsumeTimes (RocketMQ's rule: 10 s first)."""


class Placement(NamedTuple):
    """Where a put goes and with which properties."""

    topic: str
    queue_id: int
    properties: bytes


def send_back_level(requested: int, reconsume_times: int) -> int:
    """The delay level of a send-back that is not going to the DLQ: the consumer's, or 3 + reconsumeTimes."""
    return requested if requested != 0 else SEND_BACK_FIRST_LEVEL + reconsume_times


def delays(sys_flag: int) -> bool:
    """Whether a message of this SYSFLAG may be delayed: not transactional, or a commit."""
    transaction = sys_flag & _TRANSACTION_TYPE
    return transaction == 0 or transaction == MSG_FLAG_TRANSACTION_COMMIT


class DelayedSend:
    """Diverts puts of messages asking for a delay level into SCHEDULE_TOPIC_XXXX (one per broker)."""

    def __init__(self, levels: DelayLevels) -> None:
        self.levels = levels

    def place(self, topic: str, queue_id: int, props: bytes, sys_flag: int) -> Placement:
        """The put of a message with a DELAY property: diverted when its level is > 0 and its SYSFLAG allows
        it, unchanged otherwise. ValueError when DELAY is not an integer."""
        level = requested_level(props)
        if level is None or level <= 0 or not delays(sys_flag):
            return Placement(topic, queue_id, props)
        capped = self.levels.cap(level)
        if capped != level:
            props = put_property(props, PROPERTY_DELAY, str(capped))
        props = put_property(props, PROPERTY_REAL_TOPIC, topic)
        props = put_property(props, PROPERTY_REAL_QUEUE_ID, str(queue_id))
        return Placement(SCHEDULE_TOPIC, queue_id_of_level(capped), props)


def batch_delay_refusal(header_props: str) -> str | None:
    """Why a SEND_BATCH_MESSAGE whose own (header) properties ask for a delay level is illegal, None if they do
    not: RocketMQ's putMessages answers MESSAGE_ILLEGAL for it."""
    try:
        level = requested_level(header_props.encode())
    except ValueError as exc:
        return str(exc)
    if level is not None and level > 0:
        return f"a batch cannot be delayed (DELAY={level})"
    return None

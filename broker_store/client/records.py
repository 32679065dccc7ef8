"""Immutable records the client hands to its callers: queue addresses, send and pull results.

Shared by the producer, the pull consumer and the admin client; the connectors key their offsets,
placements and checkpoints by ``MessageQueue`` too, on the driver and on Spark executors (declared with the
wire types in ``protocol.message_queue``: GET_TOPIC_STATS_INFO answers are keyed by it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from broker_store.protocol.codes import ResponseCode
from broker_store.protocol.message import StoredMessage
from broker_store.protocol.message_queue import MessageQueue

__all__ = ["MessageQueue", "PullResult", "PullStatus", "SendResult", "SendStatus"]


class SendStatus(Enum):
    """How durable a stored message is (RocketMQ's SendStatus); every value means *stored*."""

    SEND_OK = "SEND_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    """Stored, but not fsynced within the broker's timeout (SYNC_FLUSH brokers)."""
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    """Stored on the primary, but not acknowledged by enough replicas in time."""
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"
    """Stored on the primary; no replica to ship it to (SYNC_MASTER without a replica)."""


SEND_STATUS_BY_CODE: dict[int, SendStatus] = {
    ResponseCode.SUCCESS: SendStatus.SEND_OK,
    ResponseCode.FLUSH_DISK_TIMEOUT: SendStatus.FLUSH_DISK_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: SendStatus.FLUSH_SLAVE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: SendStatus.SLAVE_NOT_AVAILABLE,
}


@dataclass(frozen=True, slots=True)
class SendResult:
    """Outcome of a send or batch send that the broker stored."""

    status: SendStatus
    msg_id: str
    """Client unique id (UNIQ_KEY); for a batch the ids of all its messages, comma-joined (as Java)."""
    offset_msg_id: str
    """Broker's id: store host + commit-log offset, comma-joined for a batch."""
    message_queue: MessageQueue
    """The queue the message landed in (queue id as the broker reported it)."""
    queue_offset: int
    """ConsumeQueue offset of the (first) message."""
    msg_ids: tuple[str, ...] = field(default=())
    """UNIQ_KEY of each message, in send order (one element for a single send)."""
    offset_msg_ids: tuple[str, ...] = field(default=())
    """Offset message id of each message, as the broker returned them."""

    @property
    def ok(self) -> bool:
        return self.status is SendStatus.SEND_OK


class PullStatus(Enum):
    FOUND = "FOUND"
    NO_NEW_MSG = "NO_NEW_MSG"
    """Offset is at the queue's max offset (PULL_NOT_FOUND)."""
    NO_MATCHED_MSG = "NO_MATCHED_MSG"
    """Messages exist but none passed the broker's tag-hash filter (PULL_RETRY_IMMEDIATELY)."""
    OFFSET_ILLEGAL = "OFFSET_ILLEGAL"
    """Offset below min or above max (PULL_OFFSET_MOVED); resume from ``next_begin_offset``."""


PULL_STATUS_BY_CODE: dict[int, PullStatus] = {
    ResponseCode.SUCCESS: PullStatus.FOUND,
    ResponseCode.PULL_NOT_FOUND: PullStatus.NO_NEW_MSG,
    ResponseCode.PULL_RETRY_IMMEDIATELY: PullStatus.NO_MATCHED_MSG,
    ResponseCode.PULL_OFFSET_MOVED: PullStatus.OFFSET_ILLEGAL,
}


@dataclass(frozen=True, slots=True)
class PullResult:
    """One pull from one queue. ``messages`` is empty unless ``status`` is FOUND (and may be then,
    when every message failed the client-side tag re-filter). A pull with ``decode=False`` leaves
    ``messages`` empty and returns the stored records undecoded in ``raw``."""

    status: PullStatus
    next_begin_offset: int
    """Offset to pull from next time (past every message returned, filtered ones included)."""
    min_offset: int
    max_offset: int
    messages: list[StoredMessage]
    suggest_which_broker_id: int
    """Broker id the broker suggests for the next pull of this queue (0 = primary)."""
    raw: bytes = b""
    """``decode=False`` only: the stored records (V1 layout, back to back) that passed the tag filter."""

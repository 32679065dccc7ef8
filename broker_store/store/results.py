"""What a put or a get returns: the statuses and result records of ``MessageStore``.

Read by the broker's send and pull processors, which translate them into remoting responses, and by
replication (``PutResult.durable`` is where its replica acks are folded in, see ``store.durability``).
"""

from __future__ import annotations

import concurrent.futures
import enum
from dataclasses import dataclass
from typing import NamedTuple


class PutStatus(enum.Enum):
    PUT_OK = "PUT_OK"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    """Body too large, bad topic or host, or record larger than a segment (remark says which)."""
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    """Store not started, shut down, or turned read-only after an I/O error."""
    UNKNOWN_ERROR = "UNKNOWN_ERROR"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    """Durability only (``PutResult.durable``): written, but not fsynced within ``flush_timeout_ms``."""
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    """Durability only (replication's step): stored on the primary, but fewer than needAck-1 replicas acked
    it within ``ha.slave_timeout_ms``: FLUSH_SLAVE_TIMEOUT (12). The message stays stored and keeps
    replicating."""
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"
    """RocketMQ 4.x compatibility, code SLAVE_NOT_AVAILABLE (11). 4.x answered it when a SYNC_MASTER stored
    a message while no slave was connected, or the best slave was more than haSlaveFallbehindMax (256 MiB)
    behind. The RocketMQ 5 quorum rules implemented in ``broker_store.ha.quorum`` never produce it: in that
    situation currentInSync is 1, so a put needing a replica is refused before the append with
    IN_SYNC_REPLICAS_NOT_ENOUGH (or, with automatic downgrade, accepted with fewer copies). It is kept, with
    its code, so the status table is complete: the send path maps it, clients decode it, and a 4.x-style
    policy could return it without a new code."""
    IN_SYNC_REPLICAS_NOT_ENOUGH = "IN_SYNC_REPLICAS_NOT_ENOUGH"
    """Fewer copies in sync than the put needs (``ha.quorum``), decided before the append, so the message is
    NOT stored (RocketMQ 5 refuses before appending). No dedicated wire code exists: answered SYSTEM_ERROR (1)
    with a remark naming the status, which clients retry on another broker."""


DurableFuture = concurrent.futures.Future[PutStatus]
"""Resolves to PUT_OK once a put is durable under the broker's policy, else to the status of the first
durability step that failed, e.g. FLUSH_DISK_TIMEOUT (see ``store.durability``). Resolved on whichever
thread met the last step: await it on a loop with ``asyncio.wrap_future``."""

_RESOLVED: dict[PutStatus, DurableFuture] = {}


def resolved(status: PutStatus) -> DurableFuture:
    """A shared, already resolved future of ``status`` (no allocation on the put path)."""
    future = _RESOLVED.get(status)
    if future is None:
        future = concurrent.futures.Future()
        future.set_result(status)
        _RESOLVED[status] = future
    return future


@dataclass(frozen=True)
class PutResult:
    status: PutStatus
    remark: str = ""
    msg_ids: tuple[str, ...] = ()
    """Offset message ids, one per message, in order."""
    queue_offset: int = -1
    """ConsumeQueue offset of the first message."""
    count: int = 0
    wrote_offset: int = -1
    """CommitLog offset of the first record."""
    end_offset: int = -1
    """CommitLog offset just past the last record."""
    durable: DurableFuture = resolved(PutStatus.PUT_OK)
    """Completes when the put is durable under the store's ``DurabilityPolicy`` (flush, later replica acks)
    with PUT_OK or the failing step's status; for a failed put it is already resolved to ``status``.
    A result built without it needs no waiting."""


class GetStatus(enum.Enum):
    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"
    MESSAGE_DAMAGED = "MESSAGE_DAMAGED"
    """The record at the pulled offset fails its checks (``store.record_check``): not served; the remark names
    the file, the offset and the fault. Not a RocketMQ status (its store serves what it reads)."""


@dataclass(frozen=True)
class GetResult:
    status: GetStatus
    next_begin_offset: int
    """Queue offset the consumer should pull from next."""
    min_offset: int
    max_offset: int
    body: bytes = b""
    """Concatenated stored records exactly as in the CommitLog (this IS the pull response body)."""
    count: int = 0
    max_physical_offset_lag: int = 0
    """CommitLog max offset minus the physical offset of the last record returned (or scanned)."""
    remark: str = ""
    """Why nothing was served, for MESSAGE_DAMAGED."""


class QueueEntry(NamedTuple):
    """One ConsumeQueue entry as ``MessageStore.get_queue_entries`` returns it."""

    queue_offset: int
    """Its index in the queue."""
    physical_offset: int
    """Where its record starts in the CommitLog."""
    size: int
    """The record's size, bytes."""
    tags_code: int
    """The TAGS hash; for SCHEDULE_TOPIC the delivery time, ms (``store.delay_levels``)."""

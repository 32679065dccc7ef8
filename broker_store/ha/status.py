"""The outcomes of a put's replication step and the remoting response codes they are answered with.

Produced by ``quorum`` / ``ack_tracker``; read by the broker's send path. The members are the
replication members of the store's ``PutStatus`` on the seams branch (same names and values), and the
helpers below are functions rather than methods, so that once merged this enum can become an alias,
``ReplicationStatus = PutStatus``, and HA's futures fit the store's ``DurableFuture`` unchanged.
"""

from __future__ import annotations

import enum

from broker_store.protocol.codes import ResponseCode


class ReplicationStatus(enum.Enum):
    PUT_OK = "PUT_OK"
    """Enough copies hold the message (or none beyond the primary were needed): SUCCESS."""
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    """Stored on the primary, but fewer than needAck-1 replicas acked it within the slave timeout:
    FLUSH_SLAVE_TIMEOUT (12). The message stays stored and keeps replicating."""
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"
    """RocketMQ 4.x compatibility, code SLAVE_NOT_AVAILABLE (11). 4.x answered it when a SYNC_MASTER
    stored a message while no slave was connected, or the best slave was more than
    haSlaveFallbehindMax (256 MiB) behind. The RocketMQ 5 rules implemented here never produce it:
    in that situation the quorum's currentInSync is 1, so a put needing a replica is refused up front
    with IN_SYNC_REPLICAS_NOT_ENOUGH (or, with automatic downgrade, accepted with fewer copies). It is
    kept, with its code, so the status table is complete: the send path maps it, clients decode it,
    and a 4.x-style policy could return it without a new code."""
    IN_SYNC_REPLICAS_NOT_ENOUGH = "IN_SYNC_REPLICAS_NOT_ENOUGH"
    """Fewer copies in sync than the put needs, decided before waiting (RocketMQ 5 decides it before
    appending). No dedicated wire code exists: answered SYSTEM_ERROR (1) with a remark saying so, which
    clients retry on another broker."""


def response_code(status: ReplicationStatus) -> ResponseCode:
    """The remoting response code a put with this replication outcome is answered with."""
    return _CODES[status]


def remark(status: ReplicationStatus, detail: str = "") -> str:
    """The response remark: empty for PUT_OK, else the status name and ``detail``."""
    if status is ReplicationStatus.PUT_OK:
        return ""
    return f"{status.name}: {detail}" if detail else status.name


_CODES: dict[ReplicationStatus, ResponseCode] = {
    ReplicationStatus.PUT_OK: ResponseCode.SUCCESS,
    ReplicationStatus.FLUSH_SLAVE_TIMEOUT: ResponseCode.FLUSH_SLAVE_TIMEOUT,
    ReplicationStatus.SLAVE_NOT_AVAILABLE: ResponseCode.SLAVE_NOT_AVAILABLE,
    ReplicationStatus.IN_SYNC_REPLICAS_NOT_ENOUGH: ResponseCode.SYSTEM_ERROR,
}

"""HA's error classes, all under broker_store's one root (``protocol/errors.py``).

Raised by the shipping decoders (``wire``), the replica start decision (``replica_start``) and the
I/O services; callers act on the root's behaviour flags::

    RocketMQError                         retriable  invalid_route
    +-- ProtocolError
    |   +-- HAProtocolError                          (malformed shipping bytes: drop the link)
    +-- TransportError                    yes        yes
    |   +-- HALinkError                   yes        yes   (link closed, refused or silent too long)
    +-- StoreError
        +-- ReplicaLogDivergedError                  (replica ahead of the primary: operator's call)
"""

from __future__ import annotations

from broker_store.protocol.errors import ProtocolError, StoreError, TransportError


class HAProtocolError(ProtocolError):
    """The peer of an HA link sent bytes that are not the shipping format (bad size, negative offset).

    The link is unusable from that byte on: close it; the replica reconnects and reports again.
    """


class HALinkError(TransportError):
    """An HA link failed: connection refused, reset, closed, or nothing heard within the dead-link timeout."""


class HALinkClosedError(HALinkError):
    """The primary closed the link: its clean stop, a restart or a crash alike (a replica cannot tell which; a
    crashed primary then refuses the reconnection, which is reported as a failure of its own)."""


class ReplicaLogDivergedError(StoreError):
    """A replica's log reaches past the primary's (or starts past its end).

    Without epochs (non-controller mode) there is no way to find the last consistent offset, so the
    replica refuses to follow rather than truncate silently; an operator (or, later, the controller's
    epoch handshake) decides.
    """

    def __init__(self, message: str, *, replica_min: int, replica_max: int, primary_min: int,
                 primary_max: int) -> None:
        super().__init__(message)
        self.replica_min = replica_min
        self.replica_max = replica_max
        self.primary_min = primary_min
        self.primary_max = primary_max

"""When a remoting server connection may run its next request, and how much of its answers the kernel may hold.
Pure (no sockets): ``net.server`` asks ``hold`` before each request it dispatches and applies the socket option.

A request is held (left undispatched, and the connection's socket no longer read) for one of two reasons:

- ``Hold.ANSWERS``: the peer leaves ``max_queued_answer_bytes`` or more of answers untaken (queued by the server,
  or the transport reported its buffer over its high-water mark). Served again when the transport drains (asyncio
  flow control: ``resume_writing``), i.e. when the peer reads: a peer that never reads costs nothing past this.
- ``Hold.TURN``: the connection ran ``max_requests_per_pass`` requests in this pass of the event loop. Served
  again in the next pass, after the other connections had theirs (Netty reads at most 16 messages per read).

What the server counts only works if the kernel does not absorb the answers first: Linux grows a socket's send
buffer to ``net.ipv4.tcp_wmem``'s maximum (4 MiB by default) whatever the peer does, so a peer that never reads
would be served that much (hundreds of pulls) before the server's transport saw any backlog. ``kernel_unsent_bytes``
caps the bytes the kernel holds *unsent* (``TCP_NOTSENT_LOWAT``): past it the socket reports itself full, the
answers stay in the transport, and flow control sees them. Bytes sent and awaiting their ACK are not capped, so a
long fat link keeps its full window; a reading peer on loopback keeps nothing unsent.

While a connection is held its requests wait as the bytes they came in: the server decodes at most
``max_decoded_ahead`` of them at a time, and reads nothing more from the socket, so what a held peer costs is one
read's bytes (asyncio reads up to 256 KiB), not hundreds of decoded requests.
"""

from __future__ import annotations

import enum
import socket
from dataclasses import dataclass


class Hold(enum.Enum):
    ANSWERS = "the peer is not taking its answers"
    TURN = "the connection had its turn in this pass"


@dataclass(frozen=True)
class AnswerFlow:
    max_queued_answer_bytes: int = 256 * 1024
    """Answers queued for one connection (not yet taken by its peer) past which its next requests wait."""
    max_requests_per_pass: int | None = 16
    """Requests one connection runs per event-loop pass before the others' turn (None: no limit)."""
    kernel_unsent_bytes: int | None = 128 * 1024
    """``TCP_NOTSENT_LOWAT`` of accepted sockets (None: the system's, unlimited by default)."""
    max_decoded_ahead: int = 16
    """Requests decoded at a time from a connection's bytes: the most that can wait decoded while it is held (the
    rest wait undecoded). More than ``max_requests_per_pass`` would be decoded only to wait for the next pass."""

    def __post_init__(self) -> None:
        if self.max_queued_answer_bytes <= 0:
            raise ValueError(f"max_queued_answer_bytes must be positive, not {self.max_queued_answer_bytes}")
        if self.max_requests_per_pass is not None and self.max_requests_per_pass <= 0:
            raise ValueError(f"max_requests_per_pass must be positive or None, not {self.max_requests_per_pass}")
        if self.max_decoded_ahead <= 0:
            raise ValueError(f"max_decoded_ahead must be positive, not {self.max_decoded_ahead}")
        if self.kernel_unsent_bytes is not None and self.kernel_unsent_bytes <= 0:
            raise ValueError(f"kernel_unsent_bytes must be positive or None, not {self.kernel_unsent_bytes}")

    def hold(self, *, queued_bytes: int, writer_paused: bool, run_this_pass: int) -> Hold | None:
        """Why the next request of a connection must wait, or None to run it now.

        ``queued_bytes``: answers queued and not yet taken by the kernel (the server's pending writes plus the
        transport's buffer); ``writer_paused``: the transport said ``pause_writing`` and not yet
        ``resume_writing``; ``run_this_pass``: requests of this connection run since it last yielded the loop.
        The answers' reason comes first: a peer that does not read waits for its drain, not for a turn.
        """
        if writer_paused or queued_bytes >= self.max_queued_answer_bytes:
            return Hold.ANSWERS
        if self.max_requests_per_pass is not None and run_this_pass >= self.max_requests_per_pass:
            return Hold.TURN
        return None

    def socket_options(self) -> list[tuple[int, int, int]]:
        """``(level, option, value)`` to set on an accepted TCP socket (none where the platform lacks them)."""
        lowat = getattr(socket, "TCP_NOTSENT_LOWAT", None)
        if self.kernel_unsent_bytes is None or lowat is None:
            return []
        return [(socket.IPPROTO_TCP, lowat, self.kernel_unsent_bytes)]


DEFAULT_FLOW = AnswerFlow()

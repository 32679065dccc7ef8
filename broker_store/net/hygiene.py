"""Connection hygiene of a remoting server: when a connection is closed for idling or for a frame that never
completes, and when a request or a connection is refused as an overload. Pure (times are passed in, read by the
caller from its injected clock); ``net.server`` applies it.

- idle: a connection on which nothing was received or sent for ``max_idle_seconds`` and that has no request in
  flight (a held pull is not idleness, until its suspend timeout answers it) is closed (RocketMQ's
  serverChannelMaxIdleTimeSeconds, 120 s). A peer that sends requests and never reads the answers is held by
  ``net.answer_flow`` (nothing more read or dispatched): idle from its last answer written.
- partial frame: bytes of a frame that has not completed ``partial_frame_seconds`` after its first byte arrived
  close the connection: a peer cannot park up to a 16 MiB buffer per connection forever. The deadline runs only
  while the server reads the socket: a connection held by ``net.answer_flow`` (its peer reads its answers
  slowly) cannot complete its frame, and its time starts again when the server reads again.
- caps: past ``max_connections`` open connections a new one is answered SYSTEM_BUSY for its requests and closed;
  past ``max_requests_in_flight`` requests awaiting their answer on one connection, the next is answered
  SYSTEM_BUSY. Both remarks start with RocketMQ's ``[OVERLOAD]``, which its clients treat as retriable.

``None`` turns a rule off.
"""

from __future__ import annotations

from dataclasses import dataclass

OVERLOAD = "[OVERLOAD]"


@dataclass(frozen=True)
class ConnectionLimits:
    max_idle_seconds: float | None = 120.0
    partial_frame_seconds: float | None = 30.0
    max_connections: int | None = None
    max_requests_in_flight: int | None = None

    @property
    def sweeps(self) -> bool:
        """Whether a timer must look at connections (an idle or a partial-frame deadline is set)."""
        return self.max_idle_seconds is not None or self.partial_frame_seconds is not None

    def sweep_interval(self) -> float:
        """How often to look: a quarter of the shortest deadline (a close comes at most that late), 0.05-5 s."""
        deadlines = [d for d in (self.max_idle_seconds, self.partial_frame_seconds) if d is not None]
        return min(max(min(deadlines, default=5.0) / 4, 0.05), 5.0)


def close_reason(limits: ConnectionLimits, now: float, *, last_activity: float, partial_since: float | None,
                 in_flight: int, reading: bool = True) -> str | None:
    """Why a connection must be closed now, or None. ``reading``: the server reads the connection's socket (not
    held: see the module docstring)."""
    partial = limits.partial_frame_seconds
    if partial is not None and partial_since is not None and reading and now - partial_since >= partial:
        return f"a frame begun {now - partial_since:.1f} s ago is still incomplete (limit {partial:g} s)"
    idle = limits.max_idle_seconds
    if idle is not None and in_flight == 0 and now - last_activity >= idle:
        return f"idle for {now - last_activity:.1f} s (server_channel_max_idle_seconds {idle:g})"
    return None


def connection_overload(limits: ConnectionLimits, open_connections: int) -> str | None:
    """The SYSTEM_BUSY remark for a new connection when ``open_connections`` (others) are open, or None."""
    cap = limits.max_connections
    if cap is not None and open_connections >= cap:
        return f"{OVERLOAD} this server holds {open_connections} connections (server_max_connections {cap}); try later"
    return None


def request_overload(limits: ConnectionLimits, in_flight: int) -> str | None:
    """The SYSTEM_BUSY remark for a request arriving with ``in_flight`` others unanswered on its connection."""
    cap = limits.max_requests_in_flight
    if cap is not None and in_flight >= cap:
        return (f"{OVERLOAD} {in_flight} requests of this connection are in flight "
                f"(server_max_requests_in_flight {cap}); try later")
    return None

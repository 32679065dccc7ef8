"""PrimaryLease: whether a controller-mode primary may still append, from what its controllers said and when.

Pure: events in (with the monotonic send time of the request they answer), a refusal remark or None out; the
clock is read only by ``refusal``. ``broker.controller_agent`` feeds it; the send path (``send_processor``) asks it
before appending anything, so a primary that may have been replaced refuses with SERVICE_NOT_AVAILABLE (clients
retry another broker after refreshing the route) instead of appending and answering FLUSH_SLAVE_TIMEOUT.

Why: a primary frozen (SIGSTOP, a long GC) past its controller's heartbeat timeout is replaced; on thaw it still
thinks itself primary until a controller's answer arrives, and sends queued during the freeze would be appended
under the old epoch and then cut. RocketMQ 5's brokers heartbeat their controller but do not fence on it (only
the replicas' epoch check stops an old primary's acks); this lease closes that window without breaking the rule
that brokers keep serving while every controller is down (only elections stop).

The rule. ``L`` is the controller's heartbeat timeout for this broker (the heartbeatTimeoutMills it sends, else the
controller's default): a controller elects another primary only after hearing no heartbeat of this one for ``L``.

    valid until    the send time of the newest heartbeat a controller accepted, + L, where that acceptance is
                   known to the controller that named this broker primary: either the lease was still valid when
                   the heartbeat's answer arrived (nobody could have deemed the broker inactive in between), or a
                   replica-info / register / election request sent after that answer named this broker primary
                   at the epoch it writes in (``confirmed``)
    deposed        a controller's answer named another primary, or none, at an epoch >= the broker's: refuse
                   (the agent demotes it next)
    refused        every controller refused a request at ``t`` (its port refused the connection, or it does not
                   lead): serve until ``t + L`` (renewed by each such answer). A controller back after ``t`` elects
                   another primary only after ``L`` without this broker's heartbeats, so not before ``t + L``
    lease ended    refuse, until a controller confirms it (above), or a request sent after the lease ended
                   reached no controller that could answer (unreachable, or none leading, timeouts included):
                   then the controllers are down or cut off and cannot elect anyone either, so the broker serves
                   (only elections stop), until a controller answers again
    otherwise      serve

Cost of the rule: when every controller is frozen at once (their requests time out rather than being refused),
sends are refused from the lease's end until a request sent after it has timed out (one request timeout), then
served again; controllers that are down (refused connections) cost nothing once one poll has seen it. A timeout
is not evidence before the lease ends: a broker frozen with a request in flight sees it time out on thaw (uvloop
runs due timers before reading sockets) although the controllers answered. A preferred-broker election by an
operator (not by inactivity) is only seen through the controller's push or the next poll; sends in that window
are the quorum's to refuse. A controller restarted with an empty table of live brokers is trusted to wait for
heartbeats before it counts a primary inactive.
"""

from __future__ import annotations

import math

from broker_store.clock import Clock


class PrimaryLease:
    """See the module docstring. ``length_s`` is ``L``; times are ``clock.monotonic()`` seconds."""

    def __init__(self, length_s: float, clock: Clock) -> None:
        if length_s <= 0:
            raise ValueError(f"a primary lease must be positive, not {length_s} s")
        self.length_s = length_s
        self._clock = clock
        self._valid_until = -math.inf
        self._last_beat = -math.inf
        """Send time of the newest accepted heartbeat whose answer has arrived."""
        self._confirmed_epoch: int | None = None
        self._deposed_epoch: int | None = None
        self._deposed_by: str = ""
        self._down_since: float | None = None
        """Send time of the newest request that reached no controller, None once one answered after it."""
        self._refused_at: float | None = None
        """When every controller last refused a request at once, None once one answered after it."""

    @property
    def last_beat(self) -> float:
        """Capture before sending a request whose answer may confirm this broker (pass it to ``confirmed``)."""
        return self._last_beat

    @property
    def valid_until(self) -> float:
        return self._valid_until

    # -- what the controllers said ----------------------------------------------------------------------------

    def heartbeat_accepted(self, sent_at: float) -> None:
        """A controller accepted the heartbeat sent at ``sent_at`` (its answer arrived now)."""
        self._last_beat = max(self._last_beat, sent_at)
        if self._clock.monotonic() < self._valid_until:
            self._valid_until = max(self._valid_until, sent_at + self.length_s)

    def confirmed(self, epoch: int, beat: float) -> None:
        """A controller named this broker primary at ``epoch`` in answer to a request sent after the heartbeat
        ``beat`` (``last_beat`` read before sending it) was accepted."""
        until = beat + self.length_s
        self._valid_until = max(self._valid_until, until) if epoch == self._confirmed_epoch else until
        self._confirmed_epoch = epoch
        if self._deposed_epoch is not None and self._deposed_epoch <= epoch:
            self._deposed_epoch = None
        self._down_since = self._refused_at = None

    def deposed(self, epoch: int, master: str | None) -> None:
        """A controller named ``master`` (None: no primary) at ``epoch``, not this broker."""
        if self._deposed_epoch is None or epoch >= self._deposed_epoch:
            self._deposed_epoch = epoch
            self._deposed_by = f"names {master} primary" if master else "names no primary"
        self._down_since = self._refused_at = None

    def unreachable(self, sent_at: float, *, refused_at: float | None = None) -> None:
        """No controller answered the request sent at ``sent_at`` (none reachable, or none leading); ``refused_at``:
        each refused it at once, seen at that time (see ``refused`` in the module docstring)."""
        if self._down_since is None or sent_at > self._down_since:
            self._down_since = sent_at
        if refused_at is not None and (self._refused_at is None or refused_at > self._refused_at):
            self._refused_at = refused_at

    # -- the decision -------------------------------------------------------------------------------------------

    def refusal(self, epoch: int) -> str | None:
        """None when the primary writing in ``epoch`` may append now; else why not (a SERVICE_NOT_AVAILABLE
        remark)."""
        if self._deposed_epoch is not None and self._deposed_epoch >= epoch:
            return (f"the controller {self._deposed_by} at epoch {self._deposed_epoch} (this broker writes in epoch "
                    f"{epoch}): it takes no messages; refresh the route and retry")
        now = self._clock.monotonic()
        if self._confirmed_epoch == epoch and now < self._valid_until:
            return None
        if self._refused_at is not None and now < self._refused_at + self.length_s:
            return None  # every controller refused just now: none can elect anyone before the lease would end
        if self._down_since is not None and self._down_since >= self._valid_until:
            return None  # no controller could answer since the lease ended: none can elect anyone either
        return (f"no controller has confirmed this primary (epoch {epoch}) within its lease of {self.length_s:g} s: "
                "it may have been replaced while it could not hear them; it takes no messages until a controller "
                "confirms it; refresh the route and retry")

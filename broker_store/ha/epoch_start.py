"""Where a replica starts following its primary in controller mode: the epoch handshake's decision.

Pure: epoch caches and offsets in, a decision out; no store, no socket. ``epoch_replica_client`` calls
``decide_epoch_start`` once per session, after the primary's handshake (its epoch entries and max offset)
arrived; the truncation it asks for is ``store.epoch_store.EpochStore.truncate_to`` (crash-safe order), then
the replica acks the resulting max offset and the primary starts shipping there with the classic rule
(``replica_start.decide_replica_start``: FOLLOW in its range, RESTART at its min offset when the replica's
log ends below it). This module is the controller-mode counterpart of ``replica_start``'s DIVERGED: with
epochs the consistent part of a longer log is provable, so it is cut rather than refused.

A replica's log is [rMin, rMax) with epoch cache L, the primary's [pMin, pMax) with cache P (pMin is not on
the wire: the primary applies it). In order::

    L empty, log empty        SHIP_FROM_PRIMARY: a new replica. It acks 0 and restarts its empty log at the
                              first frame's offset (the primary's min offset), as RocketMQ's does.
    L empty, log not empty    REFUSE: bytes without epochs (a store that ran in static mode) cannot be proven
                              to match; an operator empties the store directory to re-copy it.
    rMin > pMax               REFUSE: the replica's log starts past the primary's end: the primary lost data
                              (an unclean election); shipping would leave a hole or cut good records.
    consistent point -1       REFUSE: no epoch with the same start on both sides (``consistent_point``).
    otherwise                 FOLLOW from the consistent point C: truncate [C, rMax) if C < rMax (an old
                              primary's unconfirmed tail, or the fork of two primaries), then follow.

The six positions of [rMin, rMax) against [pMin, pMax] (docs/architecture.md, "Replication and quorum writes") all land
in the rows above: rMax <= pMin (offline for long, or new) FOLLOWs from C <= rMax and the primary RESTARTs it at pMin;
pMin < rMax <= pMax (fell behind) FOLLOWs, usually from rMax; rMax > pMax (old primary back, or a fork) truncates to C
<= pMax; rMin > pMax refuses. A REFUSE is never turned into a silent re-copy. """

from __future__ import annotations

import enum
from dataclasses import dataclass

from broker_store.ha.errors import ReplicaLogDivergedError
from broker_store.store import describe_cut
from broker_store.store.epoch_cache import NO_CONSISTENT_POINT, EpochCache, consistent_point

_NOT_HELD = "the primary does not hold under the same epoch"


class EpochStartAction(enum.Enum):
    FOLLOW = "FOLLOW"
    """Truncate the log to ``offset`` (nothing to cut when it is the max offset), then ack it and follow."""
    SHIP_FROM_PRIMARY = "SHIP_FROM_PRIMARY"
    """A new replica: ack 0, restart the empty log where the primary's first frame starts."""
    REFUSE = "REFUSE"
    """Do not follow, change nothing; ``reason`` is for an operator."""


@dataclass(frozen=True)
class EpochStartDecision:
    action: EpochStartAction
    offset: int
    """FOLLOW: the consistent point (truncate to it, ack it); SHIP_FROM_PRIMARY: 0 (the ack); REFUSE: -1."""
    reason: str
    """One line for logs, ``ha-status`` and the operator."""
    truncates: bool = False
    """FOLLOW only: bytes at or past ``offset`` are cut."""

    def raise_if_refused(self, *, replica_min: int, replica_max: int, primary_max: int) -> None:
        if self.action is EpochStartAction.REFUSE:
            raise ReplicaLogDivergedError(self.reason, replica_min=replica_min, replica_max=replica_max,
                                          primary_min=-1, primary_max=primary_max)


def decide_epoch_start(*, local: EpochCache, local_min: int, local_max: int, primary: EpochCache,
                       primary_max: int) -> EpochStartDecision:
    """The replica's decision (see the module docstring). ``local_max`` must not be below the local cache's
    newest start offset (the store's start cuts such entries: ``EpochStore.open``)."""
    if not 0 <= local_min <= local_max or primary_max < 0:
        raise ValueError(f"not a log range: replica [{local_min}, {local_max}), primary max {primary_max}")
    if not len(local):
        if local_min == local_max:
            return EpochStartDecision(EpochStartAction.SHIP_FROM_PRIMARY, 0,
                                      "no local epochs and an empty log: a new replica, shipping from the "
                                      "primary's min offset")
        return _refuse(f"the local log [{local_min}, {local_max}) has no epoch entries (written outside controller "
                       "mode?), so nothing proves it matches the primary's; not truncating or re-copying it: empty "
                       "the store directory to copy the primary's log, or elect this broker")
    if local_min > primary_max and local_min < local_max:
        return _refuse(f"the local log [{local_min}, {local_max}) starts past the primary's end {primary_max}: the "
                       "primary lost data (an unclean election?); an operator must decide which log to keep")
    point = consistent_point(local, local_max, primary, primary_max)
    if point == NO_CONSISTENT_POINT:
        return _refuse(f"no consistent point between the local epochs {list(map(str, local.entries))} and the "
                       f"primary's {list(map(str, primary.entries))}: the logs share no epoch with the same start; "
                       "an operator must decide which log to keep")
    if point < local_max:
        return EpochStartDecision(EpochStartAction.FOLLOW, point,
                                  f"truncating the local log: {describe_cut(point, local_max, _NOT_HELD)}, then "
                                  f"following from {point}",
                                  truncates=True)
    return EpochStartDecision(EpochStartAction.FOLLOW, point,
                              f"following from {point} (primary at {primary_max})")


def _refuse(reason: str) -> EpochStartDecision:
    return EpochStartDecision(EpochStartAction.REFUSE, -1, reason + "; the replica does not follow")

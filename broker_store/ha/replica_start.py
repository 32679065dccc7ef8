"""Where a replica starts following its primary, in the classic (non-controller) mode without epochs.

Pure decisions over offsets; no store, no socket. ``primary_service`` calls ``decide_replica_start``
when a replica reports its max offset (and again whenever retention moved the primary's min offset
past a lagging replica); ``replica_client`` calls ``interpret_batch_offset`` for every batch whose
offset is not its own max offset, which is how the primary's decision reaches it over the classic wire
(the wire carries only offsets). A replica's log is [rMin, rMax), the primary's [pMin, pMax)::

    rMax <  pMin          RESTART: the replica's log is entirely below the primary's (offline for long,
                          or new with pMin > 0): drop it and follow from pMin. Nothing it holds is lost
                          that the primary still has.
    pMin <= rMax <= pMax  FOLLOW from rMax: the replica fell behind (or is level). rMax == pMin keeps the
                          replica's older bytes: nothing is missing between them and the primary's log.
    rMax >  pMax          DIVERGED: the replica holds bytes the primary does not (an old primary that
                          came back after losing an asynchronous flush, two primaries during a partition,
                          or rMin > pMax after the primary lost its data). Without epochs nothing tells
                          which bytes are consistent, so the replica is not truncated silently: it
                          refuses to follow and the condition is reported for an operator.

Controller mode replaces DIVERGED by the epoch handshake (docs/architecture.md, "Replication and
quorum writes": truncate to the last
consistent point, then follow); that decision will live beside this one (e.g. ``epoch_start.py``),
and RESTART / FOLLOW keep their meaning.

On the classic wire the primary expresses RESTART by sending its first batch at pMin (the replica sees
an offset past its max), and DIVERGED by a heartbeat at pMax (an offset below the replica's max) before
closing the link.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from broker_store.ha.errors import ReplicaLogDivergedError


class StartAction(enum.Enum):
    FOLLOW = "FOLLOW"
    """Keep the replica's log; ship from ``offset`` (= the replica's max offset)."""
    RESTART = "RESTART"
    """Drop the replica's whole log; its CommitLog restarts empty at ``offset`` (= the primary's min)."""
    DIVERGED = "DIVERGED"
    """Refuse to follow: the replica's log reaches past the primary's; report it."""


@dataclass(frozen=True)
class StartDecision:
    """What to do with one replica's log, and from which offset shipping continues."""

    action: StartAction
    offset: int
    """Next CommitLog offset shipped; for DIVERGED the primary's max offset (shipping does not start)."""
    reason: str
    """One line for logs and the admin view."""

    def raise_if_diverged(self, *, replica_min: int, replica_max: int, primary_min: int,
                          primary_max: int) -> None:
        if self.action is StartAction.DIVERGED:
            raise ReplicaLogDivergedError(self.reason, replica_min=replica_min, replica_max=replica_max,
                                          primary_min=primary_min, primary_max=primary_max)


def decide_replica_start(*, replica_max: int, primary_min: int, primary_max: int,
                         replica_min: int | None = None) -> StartDecision:
    """Primary side: the decision for a replica that reported ``replica_max``.

    ``replica_min`` is only known on the replica; it sharpens the DIVERGED reason (rMin > pMax).
    """
    if not 0 <= primary_min <= primary_max:
        raise ValueError(f"primary log [{primary_min}, {primary_max}) is not a range")
    if replica_max < 0 or (replica_min is not None and not 0 <= replica_min <= replica_max):
        raise ValueError(f"replica log [{replica_min}, {replica_max}) is not a range")
    if replica_max < primary_min:
        return StartDecision(StartAction.RESTART, primary_min,
                             f"replica log ends at {replica_max}, below the primary's min offset {primary_min}: "
                             f"dropping it and following from {primary_min}")
    if replica_max <= primary_max:
        return StartDecision(StartAction.FOLLOW, replica_max,
                             f"following from {replica_max} (primary at {primary_max}, "
                             f"{primary_max - replica_max} bytes behind)")
    if replica_min is not None and replica_min > primary_max:
        detail = (f"replica log [{replica_min}, {replica_max}) starts past the primary's end {primary_max}: "
                  "the primary lost data")
    else:
        detail = (f"replica log ends at {replica_max}, past the primary's end {primary_max}: "
                  f"{replica_max - primary_max} bytes the primary does not have")
    return StartDecision(StartAction.DIVERGED, primary_max,
                         f"{detail}; not truncating without epochs (non-controller mode), operator action needed")


def interpret_batch_offset(*, replica_min: int, replica_max: int, batch_offset: int) -> StartDecision:
    """Replica side: what a batch (or heartbeat) at ``batch_offset`` means for a log [rMin, rMax).

    Equal to rMax: FOLLOW (append it). Past rMax: the primary's min offset is past the replica's log,
    RESTART there. Below rMax: the primary's end is below the replica's, DIVERGED.
    """
    if batch_offset == replica_max:
        return StartDecision(StartAction.FOLLOW, replica_max, f"following from {replica_max}")
    if batch_offset > replica_max:
        return decide_replica_start(replica_max=replica_max, replica_min=replica_min,
                                    primary_min=batch_offset, primary_max=batch_offset)
    return decide_replica_start(replica_max=replica_max, replica_min=replica_min,
                                primary_min=min(replica_min, batch_offset), primary_max=batch_offset)

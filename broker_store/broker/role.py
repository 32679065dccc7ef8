"""RoleState: the broker's role, id and epoch as runtime state, with one place where each changes.

Owned by ``BrokerServer``; read by the processors (only an unfenced PRIMARY takes writes; a fenced broker
serves pulls up to its confirm offset) and by the name-server registration (the broker id it registers).
A role change is never one assignment: ``broker.role_transition.RoleTransition`` drives it through a fenced
stage while it awaits the I/O (stop the replication side, truncate the invalid tail, append the epoch
entry, rebuild the ConsumeQueues), as RocketMQ 5's changeToMaster / changeToSlave do::

                begin_promotion(epoch)              finish()
    REPLICA ----------------------------> PROMOTING ------------> PRIMARY
       ^    <---------------------------- (fenced)                  |  |
       |                abort()                                     |  | begin_promotion(newer epoch)
       |   finish()                     begin_demotion(epoch)       |  v
       +------------- DEMOTING <----------------------------------+  PROMOTING (again: new epoch entry)
                      (fenced; abort() also ends in REPLICA)

This module is the pure part: the stages and their legal steps, the epoch rule (a change naming an epoch
older than the one in force is refused, ``StaleEpochError``; an equal one is accepted, so static groups
stay at epoch 0) and the broker id (settable: the controller assigns it). Listeners hear every change of
stage, id or epoch as (old, new) ``RoleView`` snapshots, synchronously, after the change.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable
from dataclasses import dataclass

from broker_store.protocol.errors import RocketMQError
from broker_store.protocol.route import MASTER_ID

log = logging.getLogger(__name__)


class BrokerRole(enum.Enum):
    PRIMARY = "PRIMARY"
    REPLICA = "REPLICA"


class RoleStage(enum.Enum):
    """Where a broker is in its role's life. The two fenced stages take no writes and serve pulls only up to
    the confirm offset: a promotion's I/O is not done yet, or a demotion has begun."""

    REPLICA = "REPLICA"
    PROMOTING = "PROMOTING"
    """Fenced, on the way to PRIMARY (from REPLICA, or from PRIMARY for a newer epoch)."""
    PRIMARY = "PRIMARY"
    DEMOTING = "DEMOTING"
    """Fenced, on the way to REPLICA."""

    @property
    def fenced(self) -> bool:
        return self is RoleStage.PROMOTING or self is RoleStage.DEMOTING

    @property
    def role(self) -> BrokerRole:
        """PRIMARY only while unfenced PRIMARY: a broker acts as primary (writes, schedule service, id 0) from
        the unfenced edge of its promotion to the fenced edge of its demotion."""
        return BrokerRole.PRIMARY if self is RoleStage.PRIMARY else BrokerRole.REPLICA


class StaleEpochError(RocketMQError):
    """A role change named an epoch older than the one in force (RocketMQ refuses these too: the request
    comes from a controller that has not seen the newer election)."""


class RoleTransitionError(RocketMQError):
    """A step asked of a stage it does not leave from (a second change while one is in flight)."""


@dataclass(frozen=True)
class RoleView:
    """One snapshot of a ``RoleState`` (what listeners compare)."""

    stage: RoleStage
    broker_id: int
    """The id registered with the name servers: 0 while primary, the replica id otherwise."""
    epoch: int
    """The master epoch in force (0 in static groups)."""


RoleListener = Callable[[RoleView, RoleView], None]
"""``listener(old, new)``, called on the thread that made the change, after it."""


class RoleState:
    """The stage, broker id and epoch in force now (see the module docstring).

    Starts unfenced: PRIMARY when ``configured_broker_id`` is 0, else REPLICA with that id; ``replica`` starts
    REPLICA whatever the id (controller mode: the controller promotes). ``epoch`` is the starting master epoch
    (the epoch file's newest entry in controller mode; 0 in static groups).
    """

    def __init__(self, configured_broker_id: int, *, epoch: int = 0, replica: bool = False) -> None:
        primary = configured_broker_id == MASTER_ID and not replica
        self._stage = RoleStage.PRIMARY if primary else RoleStage.REPLICA
        self._replica_id = max(configured_broker_id, 1)
        self._epoch = epoch
        self._primary_during_promotion = False
        """A PROMOTING stage that started from PRIMARY (a newer epoch) keeps registering as id 0."""
        self.listeners: list[RoleListener] = []

    # -- reads ------------------------------------------------------------------------------------------

    @property
    def stage(self) -> RoleStage:
        return self._stage

    @property
    def role(self) -> BrokerRole:
        return self._stage.role

    @property
    def is_primary(self) -> bool:
        """Unfenced PRIMARY: takes writes."""
        return self._stage is RoleStage.PRIMARY

    @property
    def fenced(self) -> bool:
        return self._stage.fenced

    @property
    def epoch(self) -> int:
        return self._epoch

    @property
    def replica_id(self) -> int:
        """The id this broker registers under while not primary (at least 1; a primary configured as 0
        registers as 1 after a demotion)."""
        return self._replica_id

    @property
    def broker_id(self) -> int:
        """0 while primary (and while re-promoting for a newer epoch); the replica id otherwise."""
        if self._stage is RoleStage.PRIMARY or (self._stage is RoleStage.PROMOTING and self._primary_during_promotion):
            return MASTER_ID
        return self._replica_id

    def view(self) -> RoleView:
        return RoleView(self._stage, self.broker_id, self._epoch)

    # -- settings the controller owns -------------------------------------------------------------------

    def set_broker_id(self, broker_id: int) -> None:
        """The replica id the controller assigned (RocketMQ 5.1.1+ ids start at 1)."""
        if broker_id < 1:
            raise ValueError(f"a replica id is at least 1 (0 is the primary's registered id), got {broker_id}")
        self._apply(lambda: setattr(self, "_replica_id", broker_id))

    def set_epoch(self, epoch: int) -> None:
        """Take a newer master epoch (a replica learning of an election). An older one is refused."""
        self._check_epoch(epoch)
        self._apply(lambda: setattr(self, "_epoch", epoch))

    # -- the transition's steps -------------------------------------------------------------------------

    def begin_promotion(self, epoch: int | None = None) -> bool:
        """Fence for a promotion to ``epoch`` (None: the one in force). True when the promotion must run;
        False when this broker already is PRIMARY at that epoch (nothing to do). From PRIMARY a newer epoch
        fences again, so its epoch entry starts at an offset no put can pass."""
        new_epoch = self._epoch if epoch is None else epoch
        self._check_epoch(new_epoch)
        stage = self._stage
        if stage is RoleStage.PRIMARY and new_epoch == self._epoch:
            return False
        if stage.fenced:
            raise RoleTransitionError(f"cannot begin a promotion while {stage.value}")

        def step() -> None:
            self._primary_during_promotion = stage is RoleStage.PRIMARY
            self._stage, self._epoch = RoleStage.PROMOTING, new_epoch
        self._apply(step)
        return True

    def begin_demotion(self, epoch: int | None = None) -> bool:
        """Fence for a demotion under ``epoch`` (None: the one in force: the new primary's). True when the
        demotion must run; False when this broker already is REPLICA (a newer epoch is recorded)."""
        new_epoch = self._epoch if epoch is None else epoch
        self._check_epoch(new_epoch)
        stage = self._stage
        if stage is RoleStage.REPLICA:
            if new_epoch != self._epoch:
                self._apply(lambda: setattr(self, "_epoch", new_epoch))
            return False
        if stage.fenced:
            raise RoleTransitionError(f"cannot begin a demotion while {stage.value}")

        def step() -> None:
            self._stage, self._epoch = RoleStage.DEMOTING, new_epoch
        self._apply(step)
        return True

    def finish(self) -> None:
        """Unfence: PROMOTING -> PRIMARY, DEMOTING -> REPLICA (every step of the change is done)."""
        stage = self._stage
        if not stage.fenced:
            raise RoleTransitionError(f"nothing to finish: {stage.value} is not fenced")
        self._apply(lambda: self._settle(RoleStage.PRIMARY if stage is RoleStage.PROMOTING else RoleStage.REPLICA))

    def abort(self) -> None:
        """A step of the change failed: end in REPLICA, which takes no writes (the controller elects again,
        or an operator retries). No-op when not fenced."""
        if self._stage.fenced:
            self._apply(lambda: self._settle(RoleStage.REPLICA))

    # -- internals --------------------------------------------------------------------------------------

    def _settle(self, stage: RoleStage) -> None:
        self._stage, self._primary_during_promotion = stage, False

    def _check_epoch(self, epoch: int) -> None:
        if epoch < self._epoch:
            raise StaleEpochError(f"role change for epoch {epoch} refused: epoch {self._epoch} is in force")

    def _apply(self, change: Callable[[], None]) -> None:
        old = self.view()
        change()
        new = self.view()
        if new == old:
            return
        log.info("broker role %s id %d epoch %d -> %s id %d epoch %d", old.stage.value, old.broker_id, old.epoch,
                 new.stage.value, new.broker_id, new.epoch)
        for listener in self.listeners:
            listener(old, new)

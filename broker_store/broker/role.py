"""RoleState: the broker's role (primary or replica) as runtime state, with one place where it changes.

Owned by ``BrokerServer``; read by the processors (a replica refuses writes and does not judge pull
offsets) and by the name-server registration (the broker id it registers). Its listeners start and stop
what runs on one role only: the replication side, the replica's metadata sync and the primary's schedule
service. ``change_role`` is the only writer: today nothing calls it after start (roles come from
``broker_id``); the controller (election) will drive it, as RocketMQ's changeToMaster / changeToSlave do.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable

from broker_store.protocol.route import MASTER_ID

log = logging.getLogger(__name__)


class BrokerRole(enum.Enum):
    PRIMARY = "PRIMARY"
    REPLICA = "REPLICA"


RoleListener = Callable[["BrokerRole", "BrokerRole"], None]
"""``listener(old, new)``, called on the thread that changed the role, after the change."""


class RoleState:
    """The role and broker id in force now; starts from the configured ``broker_id`` (0 = primary)."""

    def __init__(self, configured_broker_id: int) -> None:
        self._configured_id = configured_broker_id
        self._role = BrokerRole.PRIMARY if configured_broker_id == MASTER_ID else BrokerRole.REPLICA
        self.listeners: list[RoleListener] = []

    @property
    def role(self) -> BrokerRole:
        return self._role

    @property
    def is_primary(self) -> bool:
        return self._role is BrokerRole.PRIMARY

    @property
    def broker_id(self) -> int:
        """0 while primary; the configured id (at least 1) while replica."""
        return MASTER_ID if self.is_primary else max(self._configured_id, 1)

    def change_role(self, role: BrokerRole) -> None:
        """Switch to ``role`` and tell the listeners (re-registration with the name servers). No-op if same."""
        old = self._role
        if role is old:
            return
        self._role = role
        log.info("broker role changed %s -> %s", old.value, role.value)
        for listener in self.listeners:
            listener(old, role)

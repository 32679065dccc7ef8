"""What a controller-mode broker does with what the controller says: pure rules, no I/O, no clock.

Called by ``broker.controller_agent`` with every view of the group it gets (the answers of
CONTROLLER_REGISTER_BROKER, CONTROLLER_ELECT_MASTER and CONTROLLER_GET_REPLICA_INFO, and the pushed
NOTIFY_BROKER_ROLE_CHANGED), as RocketMQ 5's ReplicasManager.changeBrokerRole does::

    controller's master epoch older than the one in force   -> Keep (a stale answer or a late push)
    the master is this broker                                -> Promote(master epoch), unless already
                                                                PRIMARY at that epoch
    the master is another broker                             -> Follow(it, master epoch), unless already
                                                                REPLICA at that epoch following its address
    no master, and this broker could be elected              -> RequestElection (CONTROLLER_ELECT_MASTER)
    no master otherwise                                      -> Keep (the controller's scan elects)

Epochs order the controller's decisions: every election (also one that finds nobody) raises the master
epoch, so a view at an older epoch than the broker's own is one the broker has already moved past. A view at
the same epoch naming this broker promotes a broker that is REPLICA (it restarted as primary of that epoch
before the controller noticed: nobody else wrote in that epoch, so it goes on as its primary).

Also here: where a replica dials its primary's HA port (``primary_ha_address``), and the id assignment's
state walk (``id_step``) over ``identity_file.RegisterState``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from broker_store.address import split_host_port
from broker_store.broker.identity_file import RegisterState
from broker_store.broker.role import RoleStage, RoleView


@dataclass(frozen=True)
class ReplicaInfo:
    """A broker group as the controller reports it."""

    master_id: int | None
    """The primary's controller-assigned id; None: the group has no (live) primary."""
    master_address: str | None
    """The primary's remoting ``host:port`` (None with no primary)."""
    master_epoch: int
    """Raised by every election; 0: never elected."""
    sync_state_set: frozenset[int] = frozenset()
    sync_state_set_epoch: int = 0


@dataclass(frozen=True)
class Promote:
    """Become the group's primary at ``epoch`` (``BrokerServer.change_role(PRIMARY, epoch=...)``)."""

    epoch: int


@dataclass(frozen=True)
class Follow:
    """Be a replica under ``epoch``, following the primary ``master_id`` at ``master_address``."""

    master_id: int
    master_address: str
    epoch: int


@dataclass(frozen=True)
class RequestElection:
    """Ask the controller to elect (CONTROLLER_ELECT_MASTER with this broker as requester)."""


@dataclass(frozen=True)
class Keep:
    """Nothing to do; ``reason`` says why (for the log)."""

    reason: str


RoleAction = Promote | Follow | RequestElection | Keep


def decide_role(current: RoleView, own_id: int, info: ReplicaInfo, *, following: str | None) -> RoleAction:
    """The action for this broker (``own_id``, its assigned replica id; ``current``, its role now;
    ``following``, the primary's remoting address it follows now or None) given the controller's ``info``
    (see the module docstring)."""
    if info.master_epoch < current.epoch:
        return Keep(f"the controller's master epoch {info.master_epoch} is older than this broker's {current.epoch}")
    if current.stage.fenced:
        return Keep(f"a role change is in flight ({current.stage.value}); decided again after it")
    if info.master_id == own_id:
        if current.stage is RoleStage.PRIMARY and current.epoch == info.master_epoch:
            return Keep(f"already primary at epoch {info.master_epoch}")
        return Promote(info.master_epoch)
    if info.master_id is not None:
        if info.master_address is None:
            return Keep(f"the controller names master {info.master_id} without an address")
        if current.stage is RoleStage.REPLICA and current.epoch == info.master_epoch \
                and following == info.master_address:
            return Keep(f"already following {info.master_address} at epoch {info.master_epoch}")
        return Follow(info.master_id, info.master_address, info.master_epoch)
    if electable(own_id, info):
        return RequestElection()
    return Keep(f"no master, and broker {own_id} is not in the SyncStateSet {sorted(info.sync_state_set)}: "
                "the controller elects one of its members")


def electable(own_id: int, info: ReplicaInfo) -> bool:
    """Whether an election this broker asks for could elect it: it is in the SyncStateSet, or the group was
    never elected (the first election takes the requester). With the controller's unclean election other
    members are electable too; its own scan elects them, no request needed."""
    return own_id in info.sync_state_set or info.master_epoch == 0


def primary_ha_address(master_address: str, *, named_master: str | None, named_ha: str | None) -> str:
    """Where a replica dials the primary at ``master_address`` (its remoting address, from the controller):
    the HA address the name server names when its registration answer names this same primary (the primary
    registers its real HA address as haServerAddr), else the default HA port, the primary's listen port + 1
    (RocketMQ's 10912 for 10911; a primary with another ``ha.ha_listen_port`` is found once the name server
    names it)."""
    if named_ha and named_master == master_address:
        return named_ha
    host, port = split_host_port(master_address)
    return f"{host}:{port + 1}"


class IdStep(enum.Enum):
    """The next step of a broker id assignment (RocketMQ 5.1.1+'s registration, resumed from the files)."""

    ASK_NEXT_ID = "ASK_NEXT_ID"
    """No file: CONTROLLER_GET_NEXT_BROKER_ID, then keep that id and a new check code in brokerIdentity-temp."""
    APPLY = "APPLY"
    """brokerIdentity-temp only: CONTROLLER_APPLY_BROKER_ID with its id and check code (again after a restart:
    the controller accepts the same code twice); accepted: brokerIdentity, then the temp file removed;
    CONTROLLER_BROKER_ID_INVALID (taken meanwhile): the temp file removed, back to ASK_NEXT_ID."""
    DONE = "DONE"
    """brokerIdentity holds the id (a temp file a crash left beside it is stale: removed)."""


def id_step(state: RegisterState) -> IdStep:
    return {RegisterState.INITIAL: IdStep.ASK_NEXT_ID,
            RegisterState.CREATE_TEMP_METADATA_FILE_DONE: IdStep.APPLY,
            RegisterState.CREATE_METADATA_FILE_DONE: IdStep.DONE}[state]

"""The controller's rules for one broker group (RocketMQ 5.1.1+ semantics): broker ids, registration, the
election of a primary and the SyncStateSet. Pure: no I/O and no clock; every function takes the group's state
as read from the state store and the live brokers (``BrokerLiveInfo``, from the heartbeats), and returns an
``Outcome``: the response code and remark, and the new state to write (None: nothing changes). The caller
(``controller.service``) writes it with compare-and-set on the version it read and, when another controller
got there first, re-reads and decides again; so two controllers never both act on stale state.

State of a group (one key per broker name), versioned JSON::

    {"version": 1, "cluster": c, "brokerName": b,
     "members": {"<id>": {"address": a, "registerCheckCode": "addr;timestamp"}},
     "masterId": id | null, "masterEpoch": n, "syncStateSet": [ids], "syncStateSetEpoch": n}

Rules (and RocketMQ's response codes):

* ids: ``next_broker_id`` is 1 for a group never seen, else the highest id + 1; ``apply_broker_id`` is a
  compare-and-set of an id to a register check code ``addr;timestamp`` (an id taken by another code:
  CONTROLLER_BROKER_ID_INVALID; a group never seen accepts only id 1).
* ``register_broker``: the id must be a member (else CONTROLLER_BROKER_NEED_TO_BE_REGISTERED); the answer
  names the primary when it is alive; a changed address is recorded (an id survives an address change).
* ``elect_master`` (DefaultElectPolicy): the group's first election takes the requester. Otherwise the
  candidates are the SyncStateSet, or every member with ``unclean`` (enableElectUncleanMaster), alive only;
  a live old primary is kept unless a preferred broker is named; a named preferred broker wins if it is a
  live candidate, else the election fails (no fallback); else the highest epoch, then the highest max
  offset, then the lowest election priority, then the lowest id (compared, never subtracted: RocketMQ's
  comparator overflows past 2 GiB gaps). A new primary gets master epoch + 1, SyncStateSet epoch + 1 and
  SyncStateSet = {itself}; the old one kept: CONTROLLER_MASTER_STILL_EXIST. No candidate: the primary is
  cleared (master epoch + 1, SyncStateSet kept) with CONTROLLER_MASTER_NOT_AVAILABLE when the controller
  asked, CONTROLLER_ELECT_MASTER_FAILED when a broker or an operator did.
* ``alter_sync_state_set``, checks in RocketMQ's order: unchanged (CONTROLLER_ALTER_SYNC_STATE_SET_FAILED),
  master id (CONTROLLER_INVALID_MASTER), master epoch (CONTROLLER_FENCED_MASTER_EPOCH), SyncStateSet epoch
  (CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH), unknown replica (CONTROLLER_INVALID_REPLICAS), replica not alive
  (CONTROLLER_BROKER_NOT_ALIVE), master missing from the new set (CONTROLLER_ALTER_SYNC_STATE_SET_FAILED).
* ``needs_reelection``: the primary is not alive and some member is, or there is no primary and an eligible
  broker is alive.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from broker_store.protocol.codes import ResponseCode

STATE_VERSION = 1
FIRST_BROKER_ID = 1
"""RocketMQ's MixAll.FIRST_BROKER_CONTROLLER_ID: ids assigned by the controller start here; 0 is what clients
see for the primary, never an assigned id."""


@dataclass(frozen=True)
class Member:
    """One broker of a group, as the controller knows it."""

    address: str
    """host:port of its remoting listener (updated when it registers from another address)."""
    register_check_code: str
    """``addr;timestamp`` of the broker that applied for the id: the same broker may apply again."""


@dataclass(frozen=True)
class GroupState:
    """One broker group (RocketMQ's broker set) in the controller (see the module docstring)."""

    cluster: str
    broker_name: str
    members: Mapping[int, Member] = field(default_factory=dict)
    master_id: int | None = None
    master_epoch: int = 0
    """Raised by every election (also one that finds no primary); 0 = never elected."""
    sync_state_set: frozenset[int] = frozenset()
    sync_state_set_epoch: int = 0

    @property
    def master_address(self) -> str | None:
        member = None if self.master_id is None else self.members.get(self.master_id)
        return None if member is None else member.address

    def to_json(self) -> bytes:
        return json.dumps({
            "version": STATE_VERSION, "cluster": self.cluster, "brokerName": self.broker_name,
            "members": {str(i): {"address": m.address, "registerCheckCode": m.register_check_code}
                        for i, m in sorted(self.members.items())},
            "masterId": self.master_id, "masterEpoch": self.master_epoch,
            "syncStateSet": sorted(self.sync_state_set), "syncStateSetEpoch": self.sync_state_set_epoch,
        }, sort_keys=True).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> GroupState:
        """ValueError naming what is wrong for bytes that are not a version-1 group state."""
        try:
            d: dict[str, Any] = json.loads(raw)
            if d.get("version") != STATE_VERSION:
                raise ValueError(f"group state version {d.get('version')!r}, expected {STATE_VERSION}")
            return cls(str(d["cluster"]), str(d["brokerName"]),
                       {int(i): Member(str(m["address"]), str(m["registerCheckCode"]))
                        for i, m in d["members"].items()},
                       None if d["masterId"] is None else int(d["masterId"]), int(d["masterEpoch"]),
                       frozenset(int(i) for i in d["syncStateSet"]), int(d["syncStateSetEpoch"]))
        except (KeyError, TypeError, AttributeError, json.JSONDecodeError) as exc:
            raise ValueError(f"malformed group state: {exc!r}") from exc


@dataclass(frozen=True)
class BrokerLiveInfo:
    """What a broker's latest heartbeat said (``controller.heartbeats``); present only while it is alive."""

    broker_id: int
    address: str
    epoch: int = 0
    """The newest epoch in its epoch cache."""
    max_offset: int = 0
    confirm_offset: int = 0
    election_priority: int = 0
    """Lower is preferred (RocketMQ's electionPriority) among candidates equal in epoch and max offset."""


@dataclass(frozen=True)
class Outcome:
    """A rule's answer: ``code`` and ``remark`` for the response, ``state`` to write (None: no change)."""

    code: ResponseCode
    remark: str = ""
    state: GroupState | None = None
    """The group's new state, to be written with compare-and-set before anyone is answered."""
    answer: GroupState | None = None
    """The state the response describes (the new one, or the current one when nothing changes)."""
    broker_id: int | None = None
    """``next_broker_id``'s answer."""

    @property
    def ok(self) -> bool:
        return self.code is ResponseCode.SUCCESS


def next_broker_id(group: GroupState | None) -> Outcome:
    if group is None or not group.members:
        return Outcome(ResponseCode.SUCCESS, broker_id=FIRST_BROKER_ID)
    return Outcome(ResponseCode.SUCCESS, answer=group, broker_id=max(group.members) + 1)


def apply_broker_id(group: GroupState | None, cluster: str, broker_name: str, broker_id: int,
                    register_check_code: str) -> Outcome:
    address = register_check_code.split(";")[0]
    if not address or broker_id < FIRST_BROKER_ID:
        return Outcome(ResponseCode.CONTROLLER_BROKER_ID_INVALID,
                       f"broker id {broker_id} with register check code {register_check_code!r}: ids start at "
                       f"{FIRST_BROKER_ID} and the code is 'addr;timestamp'")
    if group is None:
        if broker_id != FIRST_BROKER_ID:
            return Outcome(ResponseCode.CONTROLLER_BROKER_ID_INVALID,
                           f"broker set {broker_name} is not registered in the controller, but broker tries to apply "
                           f"broker id {broker_id}")
        group = GroupState(cluster, broker_name)
    current = group.members.get(broker_id)
    if current is not None and current.register_check_code != register_check_code:
        return Outcome(ResponseCode.CONTROLLER_BROKER_ID_INVALID,
                       f"fail to apply broker id {broker_id} in broker set {broker_name}: taken by "
                       f"{current.register_check_code}")
    if current is not None:
        return Outcome(ResponseCode.SUCCESS, answer=group)  # the same broker applying again
    new = replace(group, members={**group.members, broker_id: Member(address, register_check_code)})
    return Outcome(ResponseCode.SUCCESS, state=new, answer=new)


def register_broker(group: GroupState | None, broker_name: str, broker_id: int, address: str,
                    alive: Collection[int]) -> Outcome:
    """The answer names the primary only while it is alive (``answer.master_id`` is None otherwise: the broker
    then asks for an election)."""
    if group is None:
        return Outcome(ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
                       f"broker set {broker_name} has not been registered in the controller")
    member = group.members.get(broker_id)
    if member is None:
        return Outcome(ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
                       f"broker id {broker_id} has not been registered in broker set {broker_name}")
    new = None
    if member.address != address:
        new = replace(group, members={**group.members, broker_id: replace(member, address=address)})
    shown = new or group
    if shown.master_id is not None and shown.master_id not in alive:
        shown = replace(shown, master_id=None)
    return Outcome(ResponseCode.SUCCESS, state=new, answer=shown)


def elect_policy(candidates: Iterable[int], live: Mapping[int, BrokerLiveInfo], old_master: int | None,
                 prefer: int | None) -> int | None:
    """DefaultElectPolicy over one candidate set (see the module docstring); None: no live candidate, or the
    preferred broker is not one."""
    alive = sorted(c for c in set(candidates) if c in live)
    if not alive:
        return None
    if old_master in alive and (prefer is None or prefer == old_master):
        return old_master
    if prefer is not None:
        return prefer if prefer in alive else None
    return min(alive, key=lambda c: (-live[c].epoch, -live[c].max_offset, live[c].election_priority, c))


def elect_master(group: GroupState | None, broker_name: str, live: Mapping[int, BrokerLiveInfo], *,
                 requester: int | None, designate: bool = False, unclean: bool = False) -> Outcome:
    """``requester``: the broker asking (its id), or None when the controller's scan asks; ``designate``: elect
    the requester by force (an operator's ``elect --prefer``), the policy's preferred broker."""
    if group is None:
        return Outcome(ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
                       f"broker set {broker_name} has not been registered in the controller")
    new_master: int | None = None
    if group.master_epoch == 0 and requester is not None and requester in group.members:
        new_master = requester  # the group's first election
    if new_master is None:
        prefer = requester if designate else None
        new_master = elect_policy(group.sync_state_set, live, group.master_id, prefer)
        if new_master is None and unclean:
            new_master = elect_policy(group.members, live, group.master_id, prefer)
    if new_master is not None and new_master == group.master_id:
        return Outcome(ResponseCode.CONTROLLER_MASTER_STILL_EXIST,
                       f"the old master {new_master} of {broker_name} is still alive: no election needed",
                       answer=group)
    if new_master is not None:
        new = replace(group, master_id=new_master, master_epoch=group.master_epoch + 1,
                      sync_state_set=frozenset({new_master}), sync_state_set_epoch=group.sync_state_set_epoch + 1)
        return Outcome(ResponseCode.SUCCESS, f"elected {new_master} master of {broker_name} at epoch "
                                             f"{new.master_epoch}", state=new, answer=new)
    if requester is None:
        cleared = replace(group, master_id=None, master_epoch=group.master_epoch + 1)
        return Outcome(ResponseCode.CONTROLLER_MASTER_NOT_AVAILABLE,
                       f"the master of {broker_name} is down and no broker of its SyncStateSet "
                       f"{sorted(group.sync_state_set)} is alive to take over", state=cleared, answer=cleared)
    return Outcome(ResponseCode.CONTROLLER_ELECT_MASTER_FAILED,
                   f"failed to elect a new master for {broker_name}: no eligible live broker"
                   + (f" (preferred broker {requester})" if designate else ""), answer=group)


def alter_sync_state_set(group: GroupState | None, broker_name: str, master_id: int, master_epoch: int,
                         new_set: Collection[int], new_set_epoch: int, alive: Collection[int]) -> Outcome:
    """The primary's request to change its SyncStateSet (``new_set_epoch``: the epoch it last saw)."""
    failed = ResponseCode.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED
    if group is None:
        return Outcome(failed, f"broker set {broker_name}: metadata does not exist")
    wanted = frozenset(new_set)
    if wanted == group.sync_state_set:
        return Outcome(failed, "the new SyncStateSet equals the old one: nothing to update", answer=group)
    if group.master_id is None or group.master_id != master_id:
        return Outcome(ResponseCode.CONTROLLER_INVALID_MASTER,
                       f"rejecting alter SyncStateSet: the current master is {group.master_id}, not {master_id}")
    if master_epoch != group.master_epoch:
        return Outcome(ResponseCode.CONTROLLER_FENCED_MASTER_EPOCH,
                       f"rejecting alter SyncStateSet: the current master epoch is {group.master_epoch}, "
                       f"not {master_epoch}")
    if new_set_epoch != group.sync_state_set_epoch:
        return Outcome(ResponseCode.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH,
                       f"rejecting alter SyncStateSet: the current SyncStateSet epoch is "
                       f"{group.sync_state_set_epoch}, not {new_set_epoch}")
    for replica in sorted(wanted):
        if replica not in group.members:
            return Outcome(ResponseCode.CONTROLLER_INVALID_REPLICAS,
                           f"rejecting alter SyncStateSet: replica {replica} does not exist")
        if replica not in alive:
            return Outcome(ResponseCode.CONTROLLER_BROKER_NOT_ALIVE,
                           f"rejecting alter SyncStateSet: replica {replica} is not alive")
    if group.master_id not in wanted:
        return Outcome(failed, f"rejecting alter SyncStateSet: the new set does not contain the master "
                               f"{group.master_id}")
    new = replace(group, sync_state_set=wanted, sync_state_set_epoch=group.sync_state_set_epoch + 1)
    return Outcome(ResponseCode.SUCCESS, state=new, answer=new)


def needs_reelection(group: GroupState, alive: Collection[int], *, unclean: bool = False) -> bool:
    """The controller's inactive-master scan: a primary that is not alive while some member is; or no primary
    (an election found none) while a broker that could be elected is alive again (RocketMQ leaves that to
    the broker's next registration; asking here saves a broker round trip)."""
    if group.master_id is not None:
        return group.master_id not in alive and any(m in alive for m in group.members)
    eligible = group.members if unclean else group.sync_state_set
    return group.master_epoch > 0 and any(m in alive for m in eligible)

"""Wire types of controller mode (RocketMQ 5.1.1+): the request / response headers of codes 1001-1013 and the
JSON bodies they carry, with RocketMQ's field names. The one owner of these formats: the controller's
processor (``broker_store.controller.processor``), the broker's controller client and the admin CLI use them.

Bodies (RocketMQ's RemotingSerializable JSON, numeric map keys as in route data)::

    SyncStateSet            {"syncStateSet": [ids], "syncStateSetEpoch": n}
    ElectMasterResponseBody {"brokerMemberGroup": {"cluster": c, "brokerName": b, "brokerAddrs": {id: addr}},
                             "syncStateSet": [ids]}
    BrokerReplicasInfo      {"replicasInfoTable": {brokerName: {"masterBrokerId", "masterAddress", "masterEpoch",
                             "syncStateSetEpoch", "inSyncReplicas": [ReplicaIdentity],
                             "notInSyncReplicas": [...]}}}
    ReplicaIdentity         {"brokerName", "brokerId", "brokerAddress", "alive"}

BROKER_HEARTBEAT (904) reuses ``headers.BrokerHeartbeatRequestHeader`` (its ``electionPriority`` included).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from broker_store.protocol.errors import ProtocolError
from broker_store.protocol.headers import Header


@dataclass(frozen=True, slots=True)
class ElectMasterRequestHeader(Header):
    """CONTROLLER_ELECT_MASTER (1002). ``broker_id`` -1: the controller's own scan; ``designate_elect``: elect
    ``broker_id`` by force (an operator's preferred broker)."""

    cluster_name: str = ""
    broker_name: str = ""
    broker_id: int = -1
    designate_elect: bool = False
    invoke_time: int | None = None


@dataclass(frozen=True, slots=True)
class ElectMasterResponseHeader(Header):
    master_broker_id: int | None = None
    master_address: str | None = None
    master_epoch: int | None = None
    sync_state_set_epoch: int | None = None


@dataclass(frozen=True, slots=True)
class AlterSyncStateSetRequestHeader(Header):
    """CONTROLLER_ALTER_SYNC_STATE_SET (1001); the body is the new SyncStateSet with the epoch the primary saw."""

    broker_name: str
    master_broker_id: int
    master_epoch: int
    invoke_time: int | None = None


@dataclass(frozen=True, slots=True)
class AlterSyncStateSetResponseHeader(Header):
    new_sync_state_set_epoch: int | None = None


@dataclass(frozen=True, slots=True)
class GetReplicaInfoRequestHeader(Header):
    """CONTROLLER_GET_REPLICA_INFO (1004)."""

    broker_name: str


@dataclass(frozen=True, slots=True)
class GetReplicaInfoResponseHeader(Header):
    """The body is the group's SyncStateSet."""

    master_broker_id: int | None = None
    master_address: str | None = None
    master_epoch: int | None = None


@dataclass(frozen=True, slots=True)
class GetNextBrokerIdRequestHeader(Header):
    """CONTROLLER_GET_NEXT_BROKER_ID (1012)."""

    cluster_name: str
    broker_name: str


@dataclass(frozen=True, slots=True)
class GetNextBrokerIdResponseHeader(Header):
    cluster_name: str | None = None
    broker_name: str | None = None
    next_broker_id: int | None = None


@dataclass(frozen=True, slots=True)
class ApplyBrokerIdRequestHeader(Header):
    """CONTROLLER_APPLY_BROKER_ID (1013): a compare-and-set of ``applied_broker_id`` to ``register_check_code``
    (``addr;timestamp``)."""

    cluster_name: str
    broker_name: str
    applied_broker_id: int
    register_check_code: str


@dataclass(frozen=True, slots=True)
class ApplyBrokerIdResponseHeader(Header):
    cluster_name: str | None = None
    broker_name: str | None = None


@dataclass(frozen=True, slots=True)
class RegisterBrokerToControllerRequestHeader(Header):
    """CONTROLLER_REGISTER_BROKER (1003)."""

    cluster_name: str
    broker_name: str
    broker_id: int
    broker_address: str
    invoke_time: int | None = None


@dataclass(frozen=True, slots=True)
class RegisterBrokerToControllerResponseHeader(Header):
    """``master_broker_id`` is set only while the group's primary is alive; the body is the SyncStateSet."""

    cluster_name: str | None = None
    broker_name: str | None = None
    master_broker_id: int | None = None
    master_address: str | None = None
    master_epoch: int | None = None
    sync_state_set_epoch: int | None = None


@dataclass(frozen=True, slots=True)
class NotifyBrokerRoleChangedRequestHeader(Header):
    """NOTIFY_BROKER_ROLE_CHANGED (1008), controller -> broker; the body is the SyncStateSet."""

    master_address: str | None = None
    master_epoch: int | None = None
    sync_state_set_epoch: int | None = None
    master_broker_id: int | None = None


@dataclass(frozen=True, slots=True)
class GetMetaDataResponseHeader(Header):
    """CONTROLLER_GET_METADATA_INFO (1005): which controller leads."""

    group: str | None = None
    controller_leader_id: str | None = None
    controller_leader_address: str | None = None
    is_leader: bool = False
    peers: str | None = None


@dataclass(frozen=True)
class SyncStateSet:
    """A group's SyncStateSet and its epoch: the replicas the controller may elect from, as it last confirmed
    them (body of 1001, 1003, 1004, 1008; the primary's tracker, ``ha.sync_state_set``, holds one too)."""

    members: frozenset[int]
    """Broker ids (the primary's own included)."""
    epoch: int
    """The SyncStateSet epoch an alter must name (the controller refuses a stale one)."""

    def encode(self) -> bytes:
        return json.dumps({"syncStateSet": sorted(self.members), "syncStateSetEpoch": self.epoch}).encode()

    @classmethod
    def decode(cls, body: bytes) -> SyncStateSet:
        d = _object(body, "SyncStateSet")
        try:
            return cls(frozenset(int(i) for i in d.get("syncStateSet") or ()), int(d.get("syncStateSetEpoch", 0)))
        except (TypeError, ValueError) as exc:
            raise ProtocolError(f"malformed SyncStateSet body: {exc}") from exc


def encode_elect_master_body(cluster: str, broker_name: str, addrs: Mapping[int, str],
                             sync_state_set: Iterable[int]) -> bytes:
    return json.dumps({"brokerMemberGroup": {"cluster": cluster, "brokerName": broker_name,
                                             "brokerAddrs": {str(i): a for i, a in sorted(addrs.items())}},
                       "syncStateSet": sorted(sync_state_set)}).encode()


def decode_elect_master_body(body: bytes) -> tuple[dict[int, str], frozenset[int]]:
    """The group's members (id -> address) and SyncStateSet from an ElectMasterResponseBody."""
    d = _object(body, "ElectMasterResponseBody")
    try:
        group = d.get("brokerMemberGroup") or {}
        addrs = {int(i): str(a) for i, a in (group.get("brokerAddrs") or {}).items()}
        return addrs, frozenset(int(i) for i in d.get("syncStateSet") or ())
    except (AttributeError, TypeError, ValueError) as exc:
        raise ProtocolError(f"malformed ElectMasterResponseBody: {exc!r}") from exc


@dataclass(frozen=True)
class ReplicaIdentity:
    broker_name: str
    broker_id: int
    broker_address: str
    alive: bool

    def to_json(self) -> dict[str, Any]:
        return {"brokerName": self.broker_name, "brokerId": self.broker_id, "brokerAddress": self.broker_address,
                "alive": self.alive}


@dataclass(frozen=True)
class ReplicasInfo:
    """One group in CONTROLLER_GET_SYNC_STATE_DATA's BrokerReplicasInfo."""

    master_broker_id: int | None
    master_address: str | None
    master_epoch: int
    sync_state_set_epoch: int
    in_sync: tuple[ReplicaIdentity, ...]
    not_in_sync: tuple[ReplicaIdentity, ...]

    def to_json(self) -> dict[str, Any]:
        return {"masterBrokerId": self.master_broker_id, "masterAddress": self.master_address,
                "masterEpoch": self.master_epoch, "syncStateSetEpoch": self.sync_state_set_epoch,
                "inSyncReplicas": [r.to_json() for r in self.in_sync],
                "notInSyncReplicas": [r.to_json() for r in self.not_in_sync]}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ReplicasInfo:
        def ids(rows: Any) -> tuple[ReplicaIdentity, ...]:
            return tuple(ReplicaIdentity(str(r["brokerName"]), int(r["brokerId"]), str(r["brokerAddress"]),
                                         bool(r.get("alive"))) for r in rows or ())
        master = d.get("masterBrokerId")
        return cls(None if master is None else int(master), d.get("masterAddress"), int(d.get("masterEpoch") or 0),
                   int(d.get("syncStateSetEpoch") or 0), ids(d.get("inSyncReplicas")), ids(d.get("notInSyncReplicas")))


def encode_replicas_info(table: Mapping[str, ReplicasInfo]) -> bytes:
    return json.dumps({"replicasInfoTable": {b: r.to_json() for b, r in sorted(table.items())}}).encode()


def decode_replicas_info(body: bytes) -> dict[str, ReplicasInfo]:
    d = _object(body, "BrokerReplicasInfo")
    try:
        return {str(b): ReplicasInfo.from_json(r) for b, r in (d.get("replicasInfoTable") or {}).items()}
    except (KeyError, TypeError, ValueError) as exc:
        raise ProtocolError(f"malformed BrokerReplicasInfo body: {exc!r}") from exc


def _object(body: bytes, what: str) -> dict[str, Any]:
    try:
        d = json.loads(body) if body else {}
    except ValueError as exc:
        raise ProtocolError(f"{what} body is not JSON: {exc}") from exc
    if not isinstance(d, dict):
        raise ProtocolError(f"{what} body is not a JSON object")
    return d

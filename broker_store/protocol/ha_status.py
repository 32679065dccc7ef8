"""A broker's replication status on the wire: the one owner of the GET_BROKER_HA_STATUS (907) body and of the
GET_BROKER_EPOCH_CACHE (1007) body, and the one in-sync rule every reader of them applies.

Written by the broker (``broker.replication.BrokerReplication.view``, ``broker.server``), read by the admin client
(``client.admin``), ``python -m broker_store ha-status`` and the launcher's in-sync wait. GET_BROKER_HA_STATUS's
JSON uses RocketMQ's HARuntimeInfo field names (a subset) plus ours::

    {"master": bool, "masterCommitLogMaxOffset": int, "inSyncSlaveNums": int,
     "haConnectionInfo": [{"addr": str, "slaveAckOffset": int, "diff": int, "inSync": bool}],
     "haClientRuntimeInfo": {"masterAddr": str, "maxOffset": int, "isActivated": bool},
     "role": "PRIMARY"|"REPLICA", "haRole": str, "haAddress": str, "minOffset": int, "maxOffset": int,
     "lastError": str, "haMaxGapNotInSync": int, "stage": str, "epoch": int,
     "brokerId": int, "confirmOffset": int, "syncStateSet": [int], "syncStateSetEpoch": int}

A primary's masterCommitLogMaxOffset is its own max offset (-1 on a replica); a replica's haClientRuntimeInfo
is its link to the primary (``isActivated``: a session is up). ``brokerId`` is the broker's own id (controller
mode: the one the controller assigned; a primary registers as 0 but keeps its id here); ``syncStateSet`` /
``syncStateSetEpoch`` are the set the broker holds (controller mode; empty / 0 otherwise). Fields added after a
reader was written are ignored by it; fields a reader expects and an older broker lacks take the defaults below.

GET_BROKER_EPOCH_CACHE's JSON is RocketMQ's EpochEntryCache::

    {"clusterName": str, "brokerName": str, "brokerId": int, "maxOffset": int,
     "epochList": [{"epoch": int, "startOffset": int, "endOffset": int}]}

where each entry ends where the next starts and the last one's ``endOffset`` is Java's Long.MAX_VALUE (RocketMQ's
open end; its real end is ``maxOffset``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from broker_store.protocol.errors import ProtocolError

OPEN_END_OFFSET = (1 << 63) - 1
"""RocketMQ's endOffset of the newest epoch entry (Long.MAX_VALUE): the epoch has not ended."""


def replica_in_sync(ack_offset: int, primary_max_offset: int, max_gap: int) -> bool:
    """The one in-sync rule (RocketMQ's ``haMaxGapNotInSync`` test): a replica that has acked (``ack_offset >= 0``)
    is in sync while it is less than ``max_gap`` bytes behind the primary's max offset (strictly less)."""
    return ack_offset >= 0 and primary_max_offset - ack_offset < max_gap


@dataclass(frozen=True)
class HALinkStatus:
    """One replica connected to a primary."""

    addr: str
    """``ip:port#n`` of the replica's HA connection."""
    slave_ack_offset: int
    """Highest CommitLog offset the replica reported holding (-1 before its first report)."""
    diff: int
    """Bytes the replica is behind the primary's max offset (-1 before its first report)."""
    in_sync: bool
    """``replica_in_sync`` of its ack."""


@dataclass(frozen=True)
class HAStatus:
    """One broker's replication state: the GET_BROKER_HA_STATUS body (see the module docstring)."""

    role: str
    """PRIMARY or REPLICA (runtime role; a fenced broker is REPLICA)."""
    ha_role: str
    """Configured role: ASYNC_MASTER, SYNC_MASTER or SLAVE."""
    ha_address: str
    """Primary: the HA address replicas dial; replica: the primary's HA address it follows."""
    min_offset: int
    max_offset: int
    """The broker's CommitLog range."""
    links: tuple[HALinkStatus, ...] = ()
    """Primary: its connected replicas."""
    connected: bool = False
    """Replica: a session with the primary is up."""
    last_error: str = ""
    """Replica without a session: why the last one ended (or could not start); set by readers on a failed ask."""
    ha_max_gap_not_in_sync: int = 0
    """The in-sync gap the broker judges with (bytes)."""
    stage: str = ""
    """``RoleStage``: PRIMARY, REPLICA, or fenced PROMOTING / DEMOTING."""
    epoch: int = 0
    """The master epoch in force (0 in static groups)."""
    broker_id: int = -1
    """The broker's own id (-1 from a broker that does not say)."""
    confirm_offset: int = -1
    """How far consumers may read (controller mode: the lowest ack of the SyncStateSet; else the max offset)."""
    sync_state_set: tuple[int, ...] = ()
    """Controller mode: the SyncStateSet the broker holds, ids ascending."""
    sync_state_set_epoch: int = 0

    @property
    def is_primary(self) -> bool:
        return self.role == "PRIMARY"

    @property
    def in_sync_replicas(self) -> int:
        """Primary: connected replicas in sync (RocketMQ's inSyncSlaveNums)."""
        return sum(1 for link in self.links if link.in_sync)

    def to_json(self) -> bytes:
        primary = self.is_primary
        return json.dumps({
            "master": primary,
            "masterCommitLogMaxOffset": self.max_offset if primary else -1,
            "inSyncSlaveNums": self.in_sync_replicas,
            "haConnectionInfo": [{"addr": link.addr, "slaveAckOffset": link.slave_ack_offset, "diff": link.diff,
                                  "inSync": link.in_sync} for link in self.links],
            "haClientRuntimeInfo": {"masterAddr": "" if primary else self.ha_address,
                                    "maxOffset": self.max_offset, "isActivated": self.connected},
            "role": self.role, "haRole": self.ha_role, "haAddress": self.ha_address,
            "minOffset": self.min_offset, "maxOffset": self.max_offset, "lastError": self.last_error,
            "haMaxGapNotInSync": self.ha_max_gap_not_in_sync, "stage": self.stage, "epoch": self.epoch,
            "brokerId": self.broker_id, "confirmOffset": self.confirm_offset,
            "syncStateSet": list(self.sync_state_set), "syncStateSetEpoch": self.sync_state_set_epoch,
        }).encode()

    @classmethod
    def from_json(cls, body: bytes, source: str = "broker") -> HAStatus:
        """Decode a GET_BROKER_HA_STATUS body; ProtocolError (naming ``source``) if it is not such a JSON object."""
        data = _object(body, "GET_BROKER_HA_STATUS", source)
        try:
            client = data.get("haClientRuntimeInfo") or {}
            links = tuple(HALinkStatus(str(link["addr"]), int(link["slaveAckOffset"]), int(link.get("diff", -1)),
                                       bool(link.get("inSync", False)))
                          for link in data.get("haConnectionInfo") or ())
            return cls(
                role=str(data.get("role", "PRIMARY" if data.get("master") else "REPLICA")),
                ha_role=str(data.get("haRole", "?")), ha_address=str(data.get("haAddress", "")),
                min_offset=int(data.get("minOffset", -1)), max_offset=int(data.get("maxOffset", -1)), links=links,
                connected=bool(client.get("isActivated", False)), last_error=str(data.get("lastError", "")),
                ha_max_gap_not_in_sync=int(data.get("haMaxGapNotInSync", 0)), stage=str(data.get("stage", "")),
                epoch=int(data.get("epoch", 0)), broker_id=int(data.get("brokerId", -1)),
                confirm_offset=int(data.get("confirmOffset", -1)),
                sync_state_set=tuple(sorted(int(i) for i in data.get("syncStateSet") or ())),
                sync_state_set_epoch=int(data.get("syncStateSetEpoch", 0)))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ProtocolError(f"GET_BROKER_HA_STATUS body from {source} is malformed: {exc!r}") from exc

    @classmethod
    def unreachable(cls, error: str) -> HAStatus:
        """What a reader shows for a member it could not ask."""
        return cls(role="?", ha_role="?", ha_address="", min_offset=-1, max_offset=-1, last_error=error)


@dataclass(frozen=True)
class EpochEntryStatus:
    epoch: int
    start_offset: int
    end_offset: int
    """Where the next epoch starts; ``OPEN_END_OFFSET`` for the newest."""


@dataclass(frozen=True)
class EpochEntryCacheStatus:
    """A broker's epoch entries and max offset: the GET_BROKER_EPOCH_CACHE body (see the module docstring)."""

    cluster_name: str
    broker_name: str
    broker_id: int
    max_offset: int
    entries: tuple[EpochEntryStatus, ...] = field(default=())

    @classmethod
    def of(cls, cluster_name: str, broker_name: str, broker_id: int, max_offset: int,
           entries: list[tuple[int, int]]) -> EpochEntryCacheStatus:
        """From ``(epoch, start_offset)`` pairs in order: each ends where the next starts, the last is open."""
        ends = [start for _, start in entries[1:]] + [OPEN_END_OFFSET] if entries else []
        return cls(cluster_name, broker_name, broker_id, max_offset,
                   tuple(EpochEntryStatus(e, s, end) for (e, s), end in zip(entries, ends, strict=True)))

    def to_json(self) -> bytes:
        return json.dumps({
            "clusterName": self.cluster_name, "brokerName": self.broker_name, "brokerId": self.broker_id,
            "maxOffset": self.max_offset,
            "epochList": [{"epoch": e.epoch, "startOffset": e.start_offset, "endOffset": e.end_offset}
                          for e in self.entries],
        }).encode()

    @classmethod
    def from_json(cls, body: bytes, source: str = "broker") -> EpochEntryCacheStatus:
        data = _object(body, "GET_BROKER_EPOCH_CACHE", source)
        try:
            return cls(str(data.get("clusterName", "")), str(data.get("brokerName", "")),
                       int(data.get("brokerId", -1)), int(data["maxOffset"]),
                       tuple(EpochEntryStatus(int(e["epoch"]), int(e["startOffset"]),
                                              int(e.get("endOffset", OPEN_END_OFFSET)))
                             for e in data.get("epochList") or ()))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ProtocolError(f"GET_BROKER_EPOCH_CACHE body from {source} is malformed: {exc!r}") from exc


def _object(body: bytes, what: str, source: str) -> dict[str, Any]:
    try:
        data = json.loads(body or b"{}")
    except ValueError as exc:
        raise ProtocolError(f"{what} body from {source} is not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ProtocolError(f"{what} body from {source} is not an object")
    return data

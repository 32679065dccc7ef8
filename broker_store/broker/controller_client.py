"""The broker's requests to the controller (RocketMQ 5's BrokerOuterAPI, controller half): typed calls over
the remoting client, nothing else. No decisions: ``broker.role_decision`` decides, ``broker.controller_agent``
drives; the HA side of a primary calls ``alter_sync_state_set``.

Addresses: the configured controllers (``controller.controller_addrs``, else the name servers: the embedded
controller), tried in order from the one that last answered; a controller that cannot be reached or answers
CONTROLLER_NOT_LEADER (a replicated controller that does not lead) passes the request to the next. When none
answers, ``TransportError``. Heartbeats go to every controller at once: each keeps its own table of live
brokers, so whichever leads (now or after a failover) has fresh ones. A heartbeat round ends when one controller
accepted it, never waiting for one that does not answer: a frozen controller (a paused container, a long GC)
would otherwise stretch every round to the request timeout, past the other controllers' heartbeat timeout, and
the leader would see live brokers expire and elect on stale offsets. A controller whose previous heartbeat is
still unanswered is not sent another.

Answers: a response code that is not the call's expected outcome raises ``BrokerResponseError`` (``.code``
names RocketMQ's code); the expected refusals are values (``apply_broker_id`` False for
CONTROLLER_BROKER_ID_INVALID, ``elect_master`` None for CONTROLLER_ELECT_MASTER_FAILED).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

from broker_store.broker.role_decision import ReplicaInfo
from broker_store.clock import SYSTEM_CLOCK, Clock
from broker_store.net.client import RemotingClient
from broker_store.net.tls_settings import TlsClientSettings
from broker_store.protocol.acl import SessionCredentials, sign
from broker_store.protocol.codes import RequestCode, ResponseCode
from broker_store.protocol.controller import (
    AlterSyncStateSetRequestHeader,
    AlterSyncStateSetResponseHeader,
    ApplyBrokerIdRequestHeader,
    ElectMasterRequestHeader,
    ElectMasterResponseHeader,
    GetNextBrokerIdRequestHeader,
    GetNextBrokerIdResponseHeader,
    GetReplicaInfoRequestHeader,
    GetReplicaInfoResponseHeader,
    NotifyBrokerRoleChangedRequestHeader,
    RegisterBrokerToControllerRequestHeader,
    RegisterBrokerToControllerResponseHeader,
    SyncStateSet,
    decode_elect_master_body,
)
from broker_store.protocol.errors import (
    BrokerResponseError,
    ProtocolError,
    RequestTimeoutError,
    RocketMQError,
    TransportError,
    error_for_response,
)
from broker_store.protocol.frame import RemotingCommand
from broker_store.protocol.headers import BrokerHeartbeatRequestHeader, Header

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BrokerBeat:
    """One BROKER_HEARTBEAT's content (what the controller elects by)."""

    cluster_name: str
    broker_name: str
    broker_addr: str
    """This broker's remoting ``host:port``: the controller pushes NOTIFY_BROKER_ROLE_CHANGED to it."""
    broker_id: int
    """The controller-assigned id (never 0: the primary's registered id is the name servers' business)."""
    epoch: int
    """The newest epoch of the broker's epoch cache (or the master epoch in force while it has none)."""
    max_offset: int
    confirm_offset: int
    election_priority: int
    heartbeat_timeout_ms: int | None = None
    """Sent as heartbeatTimeoutMills; None leaves it out (the controller's own timeout)."""


class ControllerClient:
    """Requests to the controllers at ``addresses`` (see the module docstring). Runs on the broker's loop; the
    request timeouts of a remoting client made here run on ``clock``."""

    def __init__(self, addresses: Sequence[str], *, request_timeout: float,
                 client: RemotingClient | None = None, tls: TlsClientSettings | None = None,
                 credentials: SessionCredentials | None = None, clock: Clock = SYSTEM_CLOCK) -> None:
        if not addresses:
            raise ValueError("a controller client needs at least one controller address")
        self.addresses = list(addresses)
        self.request_timeout = request_timeout
        self._client = client or RemotingClient(tls=tls, clock=clock)
        self._owns_client = client is None
        self._credentials = credentials
        """The broker's ``acl_credentials_file`` account: every request is signed with it (``controller.acl_file``)."""
        self._current = 0
        """Index of the controller that answered last (the leader, as far as this broker knows)."""
        self._beats: dict[str, asyncio.Task[bool]] = {}
        """The latest heartbeat to each controller, possibly still waiting for its answer."""

    async def close(self) -> None:
        for beat in self._beats.values():
            beat.cancel()
        if self._owns_client:
            await self._client.close()

    # -- requests ---------------------------------------------------------------------------------------

    async def heartbeat(self, beat: BrokerBeat) -> bool:
        """BROKER_HEARTBEAT (904) to every controller; True as soon as one accepted it, False when none did (see
        the module docstring: an unanswered one goes on in the background and blocks nothing)."""
        ext = BrokerHeartbeatRequestHeader(
            cluster_name=beat.cluster_name, broker_addr=beat.broker_addr, broker_name=beat.broker_name,
            broker_id=beat.broker_id, epoch=beat.epoch, max_offset=beat.max_offset,
            confirm_offset=beat.confirm_offset, heartbeat_timeout_mills=beat.heartbeat_timeout_ms,
            election_priority=beat.election_priority).to_ext()

        async def one(addr: str) -> bool:
            cmd = self._signed(RemotingCommand(code=RequestCode.BROKER_HEARTBEAT, ext_fields=dict(ext)))
            try:
                resp = await self._client.invoke(addr, cmd, self.request_timeout)
            except RocketMQError as exc:
                log.debug("heartbeat to controller %s failed: %s", addr, exc)
                return False
            if resp.code != ResponseCode.SUCCESS:
                log.debug("controller %s refused the heartbeat: %s %s", addr, resp.code, resp.remark)
            return resp.code == ResponseCode.SUCCESS

        sent: list[asyncio.Task[bool]] = []
        for addr in self.addresses:
            pending = self._beats.get(addr)
            if pending is None or pending.done():
                pending = self._beats[addr] = asyncio.create_task(one(addr))
            sent.append(pending)
        for answered in asyncio.as_completed(sent):
            if await answered:
                return True
        return False

    async def next_broker_id(self, cluster_name: str, broker_name: str) -> int:
        """CONTROLLER_GET_NEXT_BROKER_ID (1012): the id to apply for."""
        resp = await self._request(RequestCode.CONTROLLER_GET_NEXT_BROKER_ID,
                                   GetNextBrokerIdRequestHeader(cluster_name, broker_name))
        _expect(resp, ResponseCode.SUCCESS)
        h = _header(GetNextBrokerIdResponseHeader, resp)
        if h.next_broker_id is None:
            raise ProtocolError("CONTROLLER_GET_NEXT_BROKER_ID answered without nextBrokerId")
        return h.next_broker_id

    async def apply_broker_id(self, cluster_name: str, broker_name: str, broker_id: int, check_code: str) -> bool:
        """CONTROLLER_APPLY_BROKER_ID (1013): True when ``broker_id`` is this broker's (``check_code``,
        ``addr;timestamp``, is the one it applied with: applying again with it succeeds again); False when
        another broker holds it (CONTROLLER_BROKER_ID_INVALID)."""
        resp = await self._request(RequestCode.CONTROLLER_APPLY_BROKER_ID,
                                   ApplyBrokerIdRequestHeader(cluster_name, broker_name, broker_id, check_code))
        if resp.code == ResponseCode.CONTROLLER_BROKER_ID_INVALID:
            log.info("controller refused broker id %d for %s/%s: %s", broker_id, cluster_name, broker_name,
                     resp.remark)
            return False
        _expect(resp, ResponseCode.SUCCESS)
        return True

    async def register_broker(self, cluster_name: str, broker_name: str, broker_id: int,
                              address: str) -> ReplicaInfo:
        """CONTROLLER_REGISTER_BROKER (1003): the group as the controller knows it; ``master_id`` only while the
        primary is alive."""
        resp = await self._request(RequestCode.CONTROLLER_REGISTER_BROKER, RegisterBrokerToControllerRequestHeader(
            cluster_name, broker_name, broker_id, address))
        _expect(resp, ResponseCode.SUCCESS)
        h = _header(RegisterBrokerToControllerResponseHeader, resp)
        sync = _sync_state_set(resp)
        return ReplicaInfo(h.master_broker_id, h.master_address if h.master_broker_id is not None else None,
                           h.master_epoch or 0, sync.members, h.sync_state_set_epoch or sync.epoch)

    async def elect_master(self, cluster_name: str, broker_name: str, broker_id: int) -> ReplicaInfo | None:
        """CONTROLLER_ELECT_MASTER (1002) with this broker as the requester: the group after the election (a new
        master, or the live one kept: CONTROLLER_MASTER_STILL_EXIST); None when no eligible broker is alive
        (CONTROLLER_ELECT_MASTER_FAILED: the caller polls again later)."""
        resp = await self._request(RequestCode.CONTROLLER_ELECT_MASTER,
                                   ElectMasterRequestHeader(cluster_name, broker_name, broker_id))
        if resp.code == ResponseCode.CONTROLLER_ELECT_MASTER_FAILED:
            log.info("controller: no master elected for %s: %s", broker_name, resp.remark)
            return None
        _expect(resp, ResponseCode.SUCCESS, ResponseCode.CONTROLLER_MASTER_STILL_EXIST)
        h = _header(ElectMasterResponseHeader, resp)
        _addrs, members = decode_elect_master_body(resp.body) if resp.body else ({}, frozenset[int]())
        return ReplicaInfo(h.master_broker_id, h.master_address, h.master_epoch or 0, members,
                           h.sync_state_set_epoch or 0)

    async def get_replica_info(self, broker_name: str) -> ReplicaInfo:
        """CONTROLLER_GET_REPLICA_INFO (1004): the group's master (alive or not) and SyncStateSet."""
        resp = await self._request(RequestCode.CONTROLLER_GET_REPLICA_INFO, GetReplicaInfoRequestHeader(broker_name))
        _expect(resp, ResponseCode.SUCCESS)
        h = _header(GetReplicaInfoResponseHeader, resp)
        sync = _sync_state_set(resp)
        return ReplicaInfo(h.master_broker_id, h.master_address, h.master_epoch or 0, sync.members, sync.epoch)

    async def alter_sync_state_set(self, broker_name: str, master_id: int, master_epoch: int,
                                   new_set: frozenset[int], set_epoch: int) -> tuple[frozenset[int], int]:
        """CONTROLLER_ALTER_SYNC_STATE_SET (1001), asked by the primary ``master_id`` at ``master_epoch``:
        replace the SyncStateSet the primary last saw at ``set_epoch`` by ``new_set``; returns the set now in
        force and its epoch. A refusal raises ``BrokerResponseError`` with RocketMQ's code (e.g.
        CONTROLLER_FENCED_MASTER_EPOCH: this primary was replaced; CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH: re-read
        the set first)."""
        header = AlterSyncStateSetRequestHeader(broker_name, master_id, master_epoch)
        resp = await self._request(RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET, header,
                                   SyncStateSet(frozenset(new_set), set_epoch).encode())
        _expect(resp, ResponseCode.SUCCESS)
        h = _header(AlterSyncStateSetResponseHeader, resp)
        sync = _sync_state_set(resp)
        return sync.members, h.new_sync_state_set_epoch if h.new_sync_state_set_epoch is not None else sync.epoch

    # -- transport ---------------------------------------------------------------------------------------

    def _signed(self, cmd: RemotingCommand) -> RemotingCommand:
        return cmd if self._credentials is None else sign(cmd, self._credentials)

    async def _request(self, code: int, header: Header, body: bytes = b"") -> RemotingCommand:
        """Send to the controller that answered last, then the others in order (see the module docstring);
        ``NoControllerAnswered`` when none did."""
        problems = []
        refused = 0
        count = len(self.addresses)
        for step in range(count):
            index = (self._current + step) % count
            addr = self.addresses[index]
            cmd = self._signed(RemotingCommand(code=code, ext_fields=header.to_ext(), body=body))
            try:
                resp = await self._client.invoke(addr, cmd, self.request_timeout)
            except TransportError as exc:
                problems.append(f"{addr}: {exc}")
                refused += not isinstance(exc, RequestTimeoutError) and isinstance(exc.__cause__,
                                                                                   ConnectionRefusedError)
                continue
            if resp.code == ResponseCode.CONTROLLER_NOT_LEADER:
                problems.append(f"{addr}: not the leader ({resp.remark})")
                refused += 1
                continue
            self._current = index
            return resp
        raise NoControllerAnswered(f"no controller answered request {code}: " + "; ".join(problems),
                                   refused=refused == count)


class NoControllerAnswered(TransportError):
    """No controller took a request. ``refused``: each one said so at once (its port refused the connection, or
    it answered CONTROLLER_NOT_LEADER), so none of them could act at that moment; False when one timed out (it
    may only have been slow, or this broker frozen meanwhile)."""

    def __init__(self, message: str, *, refused: bool) -> None:
        super().__init__(message)
        self.refused = refused


def decode_role_notification(cmd: RemotingCommand) -> ReplicaInfo:
    """NOTIFY_BROKER_ROLE_CHANGED (1008), pushed by the controller: the group after an election. ProtocolError
    when the header or body does not decode."""
    h = NotifyBrokerRoleChangedRequestHeader.from_ext(cmd.ext_fields)
    sync = SyncStateSet.decode(cmd.body)
    return ReplicaInfo(h.master_broker_id, h.master_address, h.master_epoch or 0, sync.members,
                       h.sync_state_set_epoch if h.sync_state_set_epoch is not None else sync.epoch)


def _expect(resp: RemotingCommand, *codes: int) -> None:
    if resp.code not in codes:
        raise error_for_response(resp.code, resp.remark)


H = TypeVar("H", bound=Header)


def _header(kind: type[H], resp: RemotingCommand) -> H:
    return kind.from_ext(resp.ext_fields)


def _sync_state_set(resp: RemotingCommand) -> SyncStateSet:
    return SyncStateSet.decode(resp.body) if resp.body else SyncStateSet(frozenset(), 0)


__all__ = ["BrokerBeat", "BrokerResponseError", "ControllerClient", "decode_role_notification"]

"""The controller's remoting side: decodes controller requests (BROKER_HEARTBEAT 904, 1001-1006, 1009-1013), calls
``controller.service.Controller``, encodes RocketMQ's responses, and pushes NOTIFY_BROKER_ROLE_CHANGED to a
group's brokers after an election. Registered on the name server's remoting server (the embedded controller)
or on a standalone controller's (``controller.server``). With ``controller.allowed_peers`` every request from a
peer the list does not name is answered NO_PERMISSION before it is decoded (``acl.peers``); with
``controller.acl_file`` a request must then pass ACL 1.0's check against that file's accounts (signed by one).
With ``controller.acl_credentials_file`` the role-change pushes are signed with that account (ACL 1.0).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path

from broker_store.acl.decision import AclDenied, AclTable, check, remote_host
from broker_store.acl.peers import decide_peer
from broker_store.acl.plain_file import read_plain_acl
from broker_store.acl.refusal_log import RefusalLog, unlogged_suffix
from broker_store.clock import SYSTEM_CLOCK, Clock
from broker_store.controller.replicas import BrokerLiveInfo, GroupState, Outcome
from broker_store.controller.runtime_settings import settings_properties
from broker_store.controller.service import Controller
from broker_store.controller.state_store import StateStoreError
from broker_store.net.client import RemotingClient
from broker_store.net.server import Connection
from broker_store.net.tls_settings import TlsClientSettings
from broker_store.protocol.acl import SessionCredentials, sign
from broker_store.protocol.codes import RequestCode, ResponseCode
from broker_store.protocol.config_text import decode_config, encode_config
from broker_store.protocol.controller import (
    AlterSyncStateSetRequestHeader,
    AlterSyncStateSetResponseHeader,
    ApplyBrokerIdRequestHeader,
    ApplyBrokerIdResponseHeader,
    ElectMasterRequestHeader,
    ElectMasterResponseHeader,
    GetMetaDataResponseHeader,
    GetNextBrokerIdRequestHeader,
    GetNextBrokerIdResponseHeader,
    GetReplicaInfoRequestHeader,
    GetReplicaInfoResponseHeader,
    NotifyBrokerRoleChangedRequestHeader,
    RegisterBrokerToControllerRequestHeader,
    RegisterBrokerToControllerResponseHeader,
    ReplicaIdentity,
    ReplicasInfo,
    SyncStateSet,
    encode_elect_master_body,
    encode_replicas_info,
)
from broker_store.protocol.credentials_file import CredentialsFileError, read_credentials_file
from broker_store.protocol.errors import ConfigError, ProtocolError, RocketMQError
from broker_store.protocol.frame import RemotingCommand
from broker_store.protocol.headers import BrokerHeartbeatRequestHeader, Header

log = logging.getLogger(__name__)

NOTIFY_TIMEOUT_S = 1.0

Handler = Callable[[RemotingCommand, Connection], Awaitable[RemotingCommand]]


def _own_credentials(path: Path | None) -> SessionCredentials | None:
    """``controller.acl_credentials_file`` read (ConfigError naming the key when it cannot be), None without one."""
    if path is None:
        return None
    try:
        return read_credentials_file(path)
    except CredentialsFileError as exc:
        raise ConfigError(f"controller.acl_credentials_file: {exc}") from None


class ControllerProcessor:
    """Request handlers for one ``Controller`` (see the module docstring)."""

    def __init__(self, controller: Controller, *, address: str = "", peers: str | None = None,
                 tls: TlsClientSettings | None = None, clock: Clock = SYSTEM_CLOCK) -> None:
        self.controller = controller
        self.address = address
        """This controller's own remoting address (reported by CONTROLLER_GET_METADATA_INFO)."""
        self.peers = peers
        """Reported as CONTROLLER_GET_METADATA_INFO's ``peers``: where the replicated state lives (the etcd
        endpoints, ';'-separated; RocketMQ names its DLedger peers there), None for the embedded file store."""
        self._client = RemotingClient(tls=tls, clock=clock)
        """Role-change notices to brokers (with TLS when the process's ``tls.enable`` is on)."""
        self._brokers_by_conn: dict[Connection, set[str]] = {}
        self._allow_list = controller.settings.peer_allow_list()  # not a runtime setting: fixed here
        acl_file = controller.settings.acl_file
        self._acl: AclTable | None = None if acl_file is None else AclTable.compile(read_plain_acl(acl_file))
        """``controller.acl_file``'s accounts (read now: ConfigError stops the start), None: no signature asked."""
        self._credentials = _own_credentials(controller.settings.acl_credentials_file)
        """``controller.acl_credentials_file``'s account the role-change pushes are signed with; None: unsigned."""
        self._clock = clock
        self.refused = RefusalLog()
        """Requests refused by ``controller.allowed_peers`` (``refused.refusals``) and their log's rate limit."""

    def handlers(self) -> dict[int, Handler]:
        return {
            RequestCode.BROKER_HEARTBEAT: self.heartbeat,
            RequestCode.CONTROLLER_GET_NEXT_BROKER_ID: self._next_broker_id,
            RequestCode.CONTROLLER_APPLY_BROKER_ID: self._apply_broker_id,
            RequestCode.CONTROLLER_REGISTER_BROKER: self._register_broker,
            RequestCode.CONTROLLER_ELECT_MASTER: self._elect_master,
            RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET: self._alter_sync_state_set,
            RequestCode.CONTROLLER_GET_REPLICA_INFO: self._get_replica_info,
            RequestCode.CONTROLLER_GET_SYNC_STATE_DATA: self._get_sync_state_data,
            RequestCode.CONTROLLER_GET_METADATA_INFO: self._get_metadata,
            RequestCode.CLEAN_BROKER_DATA: self._clean_broker_data,
            RequestCode.UPDATE_CONTROLLER_CONFIG: self._update_config,
            RequestCode.GET_CONTROLLER_CONFIG: self._get_config,
        }

    def on_disconnect(self, conn: Connection) -> None:
        for address in self._brokers_by_conn.pop(conn, set()):
            self.controller.broker_closed(address)

    async def notify(self, group: GroupState, alive: Mapping[int, BrokerLiveInfo]) -> None:
        """NOTIFY_BROKER_ROLE_CHANGED to every live member of ``group`` (brokers also poll GET_REPLICA_INFO, so a
        lost notification only delays them)."""
        header = NotifyBrokerRoleChangedRequestHeader(group.master_address, group.master_epoch,
                                                      group.sync_state_set_epoch, group.master_id)
        body = SyncStateSet(group.sync_state_set, group.sync_state_set_epoch).encode()

        async def one(address: str) -> None:
            cmd = RemotingCommand(code=RequestCode.NOTIFY_BROKER_ROLE_CHANGED, ext_fields=header.to_ext(), body=body)
            if self._credentials is not None:
                sign(cmd, self._credentials)
            try:
                resp = await self._client.invoke(address, cmd, NOTIFY_TIMEOUT_S)
            except RocketMQError as exc:
                log.info("controller: notifying %s of %s's new role failed (it will poll): %s", address,
                         group.broker_name, exc)
                return
            if resp.code != ResponseCode.SUCCESS:  # e.g. a broker with ACL refusing an unsigned push
                log.info("controller: %s refused the notice of %s's new role (it will poll): code %d %s", address,
                         group.broker_name, resp.code, resp.remark)

        await asyncio.gather(*(one(info.address) for info in alive.values()))

    async def close(self) -> None:
        await self._client.close()

    # -- handlers ---------------------------------------------------------------------------------------

    def _refusal(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand | None:
        """None when ``conn``'s peer may send controller requests (``controller.allowed_peers``); else the answer:
        NO_PERMISSION naming the peer and the key, logged once per peer (repeats at most once a second)."""
        host = remote_host(conn.remote_addr)
        decision = decide_peer(host, self._allow_list, setting="controller.allowed_peers")
        if decision.allowed:
            return None if self._acl is None else self._acl_refusal(self._acl, cmd, conn, host)
        unlogged = self.refused.note(decision.reason, self._clock.monotonic())
        if unlogged is not None:
            log.warning("controller refused request code %d from %s: %s%s", cmd.code, conn.remote_addr,
                        decision.reason, unlogged_suffix(unlogged))
        return cmd.response(ResponseCode.NO_PERMISSION, f"controller {self.address or ''} refuses the request: "
                                                        f"{decision.reason}")

    def _acl_refusal(self, table: AclTable, cmd: RemotingCommand, conn: Connection,
                     host: str) -> RemotingCommand | None:
        """``controller.acl_file``'s check (ACL 1.0's rule, ``acl.decision``): None when ``cmd`` is signed by one of
        its accounts (or its address is whitelisted there); else SYSTEM_ERROR with RocketMQ's AclException text."""
        try:
            check(table, cmd, host)
        except AclDenied as exc:
            unlogged = self.refused.note(str(exc), self._clock.monotonic())
            if unlogged is not None:
                log.warning("controller refused request code %d from %s (controller.acl_file): %s%s", cmd.code,
                            conn.remote_addr, exc, unlogged_suffix(unlogged))
            return cmd.response(ResponseCode.SYSTEM_ERROR, exc.remark)
        return None

    async def _guarded(self, cmd: RemotingCommand, conn: Connection,
                       body: Callable[[], Awaitable[RemotingCommand]]) -> RemotingCommand:
        refusal = self._refusal(cmd, conn)
        if refusal is not None:
            return refusal
        try:
            return await body()
        except ProtocolError as exc:
            return cmd.response(ResponseCode.CONTROLLER_INVALID_REQUEST, str(exc))
        except StateStoreError as exc:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"controller state store: {exc}")

    async def heartbeat(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        """BROKER_HEARTBEAT (904): also called by the name server that embeds this controller."""
        async def run() -> RemotingCommand:
            h = BrokerHeartbeatRequestHeader.from_ext(cmd.ext_fields)
            if not h.is_controller_heartbeat:
                return cmd.response(ResponseCode.SUCCESS)  # a lite heartbeat: the name server's, not ours
            info = BrokerLiveInfo(h.broker_id or 0, h.broker_addr, h.epoch or 0, h.max_offset or 0,
                                  h.confirm_offset or 0, h.election_priority or 0)
            self.controller.heartbeat(h.cluster_name, h.broker_name, info, h.heartbeat_timeout_mills)
            self._brokers_by_conn.setdefault(conn, set()).add(h.broker_addr)
            return cmd.response(ResponseCode.SUCCESS)
        return await self._guarded(cmd, conn, run)

    async def _next_broker_id(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        async def run() -> RemotingCommand:
            h = GetNextBrokerIdRequestHeader.from_ext(cmd.ext_fields)
            out = await self.controller.next_broker_id(h.cluster_name, h.broker_name)
            return _answer(cmd, out, GetNextBrokerIdResponseHeader(h.cluster_name, h.broker_name, out.broker_id))
        return await self._guarded(cmd, conn, run)

    async def _apply_broker_id(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        async def run() -> RemotingCommand:
            h = ApplyBrokerIdRequestHeader.from_ext(cmd.ext_fields)
            out = await self.controller.apply_broker_id(h.cluster_name, h.broker_name, h.applied_broker_id,
                                                        h.register_check_code)
            return _answer(cmd, out, ApplyBrokerIdResponseHeader(h.cluster_name, h.broker_name))
        return await self._guarded(cmd, conn, run)

    async def _register_broker(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        async def run() -> RemotingCommand:
            h = RegisterBrokerToControllerRequestHeader.from_ext(cmd.ext_fields)
            out = await self.controller.register_broker(h.broker_name, h.broker_id, h.broker_address)
            g = out.answer
            header = RegisterBrokerToControllerResponseHeader(
                h.cluster_name, h.broker_name, None if g is None else g.master_id,
                None if g is None else g.master_address, None if g is None else g.master_epoch,
                None if g is None else g.sync_state_set_epoch)
            return _answer(cmd, out, header, _sync_state_set(g))
        return await self._guarded(cmd, conn, run)

    async def _elect_master(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        async def run() -> RemotingCommand:
            h = ElectMasterRequestHeader.from_ext(cmd.ext_fields)
            requester = None if h.broker_id < 0 else h.broker_id
            out = await self.controller.elect_master(h.broker_name, requester=requester, designate=h.designate_elect)
            g = out.answer
            if g is None:
                return _answer(cmd, out, ElectMasterResponseHeader())
            header = ElectMasterResponseHeader(g.master_id, g.master_address, g.master_epoch, g.sync_state_set_epoch)
            body = encode_elect_master_body(g.cluster, g.broker_name, {i: m.address for i, m in g.members.items()},
                                            g.sync_state_set)
            return _answer(cmd, out, header, body)
        return await self._guarded(cmd, conn, run)

    async def _alter_sync_state_set(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        async def run() -> RemotingCommand:
            h = AlterSyncStateSetRequestHeader.from_ext(cmd.ext_fields)
            wanted = SyncStateSet.decode(cmd.body)
            out = await self.controller.alter_sync_state_set(h.broker_name, h.master_broker_id, h.master_epoch,
                                                             wanted.members, wanted.epoch)
            g = out.state
            return _answer(cmd, out, AlterSyncStateSetResponseHeader(None if g is None else g.sync_state_set_epoch),
                           _sync_state_set(g))
        return await self._guarded(cmd, conn, run)

    async def _get_replica_info(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        async def run() -> RemotingCommand:
            h = GetReplicaInfoRequestHeader.from_ext(cmd.ext_fields)
            g, _ = await self.controller.read_group(h.broker_name)
            if g is None:
                return cmd.response(ResponseCode.CONTROLLER_BROKER_METADATA_NOT_EXIST,
                                    f"broker set {h.broker_name}: metadata does not exist")
            header = GetReplicaInfoResponseHeader(g.master_id, g.master_address, g.master_epoch)
            return cmd.response(ResponseCode.SUCCESS, None, header.to_ext(), _sync_state_set(g))
        return await self._guarded(cmd, conn, run)

    async def _get_sync_state_data(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        """Body: a JSON list of broker names (RocketMQ's), or empty for every group."""
        async def run() -> RemotingCommand:
            try:
                names = json.loads(cmd.body) if cmd.body else None
            except ValueError as exc:
                raise ProtocolError(f"CONTROLLER_GET_SYNC_STATE_DATA body is not a JSON list: {exc}") from exc
            groups = await self.controller.groups()
            table = {}
            for name, g in groups.items():
                if names is not None and name not in names:
                    continue
                alive = self.controller.live.alive(name)
                rows = [ReplicaIdentity(name, i, m.address, i in alive) for i, m in sorted(g.members.items())]
                table[name] = ReplicasInfo(g.master_id, g.master_address, g.master_epoch, g.sync_state_set_epoch,
                                           tuple(r for r in rows if r.broker_id in g.sync_state_set),
                                           tuple(r for r in rows if r.broker_id not in g.sync_state_set))
            return cmd.response(ResponseCode.SUCCESS, body=encode_replicas_info(table))
        return await self._guarded(cmd, conn, run)

    async def _get_metadata(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        async def run() -> RemotingCommand:
            store = self.controller.store
            leader = await asyncio.to_thread(store.leader)
            header = GetMetaDataResponseHeader(None, leader, self.address if leader == store.member_id else None,
                                               leader == store.member_id, self.peers)
            return cmd.response(ResponseCode.SUCCESS, None, header.to_ext())
        return await self._guarded(cmd, conn, run)

    async def _clean_broker_data(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        async def run() -> RemotingCommand:
            name = cmd.ext_fields.get("brokerName")
            if not name:
                raise ProtocolError("CLEAN_BROKER_DATA: required field 'brokerName' is missing")
            return _answer(cmd, await self.controller.clean_broker_data(name), None)
        return await self._guarded(cmd, conn, run)

    async def _update_config(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        """UPDATE_CONTROLLER_CONFIG (1009): the body is properties text (``protocol.config_text``) of the settings
        to change; ``Controller.update_settings`` applies it or refuses it whole. No body changes nothing (as
        RocketMQ)."""
        async def run() -> RemotingCommand:
            update = decode_config(cmd.body) if cmd.body else {}
            log.info("controller: UPDATE_CONTROLLER_CONFIG from %s: %s", conn.remote_addr, update)
            return _answer(cmd, await self.controller.update_settings(update), None)
        return await self._guarded(cmd, conn, run)

    async def _get_config(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        """GET_CONTROLLER_CONFIG (1010): this controller's settings as properties text (any controller answers:
        each has its own settings)."""
        refusal = self._refusal(cmd, conn)
        if refusal is not None:
            return refusal
        return cmd.response(ResponseCode.SUCCESS, body=encode_config(settings_properties(self.controller.settings)))


def _sync_state_set(g: GroupState | None) -> bytes:
    return b"" if g is None else SyncStateSet(g.sync_state_set, g.sync_state_set_epoch).encode()


def _answer(cmd: RemotingCommand, out: Outcome, header: Header | None, body: bytes = b"") -> RemotingCommand:
    return cmd.response(out.code, out.remark or None, None if header is None else header.to_ext(), body)

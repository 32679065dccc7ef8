"""The broker's side of the name-server protocol (RocketMQ's BrokerOuterAPI + registration timers).

Owned by ``BrokerServer``: a full REGISTER_BROKER with the whole topic table to every name
server at start, every ``register_interval_seconds`` and promptly after a topic change; a lite
BROKER_HEARTBEAT every ``heartbeat_interval_seconds`` (a name server that answers it does not know this broker
gets a registration at once); UNREGISTER_BROKER on clean shutdown.
A name server that is down is logged and retried on the next tick; it never blocks the broker.

A replica learns its primary from the registration answer, as RocketMQ's slaves do: REGISTER_BROKER's
response header carries the group primary's remoting address (``masterAddr``, kept in ``master_addr`` for
the metadata sync) and HA address (``haServerAddr``, handed to ``on_primary_ha_addr``; the broker's
replication follows it unless ``ha.ha_primary_address`` is configured). While ``awaiting_primary()`` says
the replica still has no primary to follow (it registered before its primary did), registrations repeat
every ``PRIMARY_UNKNOWN_RETRY`` seconds instead of ``register_interval``.
"""

from __future__ import annotations

import asyncio
import logging
import zlib
from collections.abc import Callable
from dataclasses import dataclass, replace

from broker_store.background import cancel_and_wait
from broker_store.clock import Clock
from broker_store.net.client import RemotingClient
from broker_store.protocol.codes import RequestCode, ResponseCode
from broker_store.protocol.errors import RocketMQError
from broker_store.protocol.frame import RemotingCommand
from broker_store.protocol.headers import (
    BrokerHeartbeatRequestHeader,
    BrokerHeartbeatResponseHeader,
    RegisterBrokerRequestHeader,
    RegisterBrokerResponseHeader,
    UnregisterBrokerRequestHeader,
)
from broker_store.protocol.topic import TopicConfigTable, encode_register_broker_body

log = logging.getLogger(__name__)

REQUEST_TIMEOUT = 3.0
UNKNOWN_REGISTER_INTERVAL = 5.0
"""At most one registration per this many seconds because a name server answered a heartbeat that it does not know
this broker (a registration it keeps ignoring, e.g. a stale one, must not repeat every heartbeat)."""
PRIMARY_UNKNOWN_RETRY = 1.0
"""Seconds between registrations while a replica does not know its primary yet (RocketMQ waits for its next
30 s round; a replica started together with its primary would idle that long)."""


@dataclass(frozen=True, slots=True)
class BrokerIdentity:
    """How this broker names itself to name servers."""

    cluster_name: str
    broker_name: str
    broker_id: int
    broker_addr: str
    """Advertised ``ip:port``."""
    ha_server_addr: str = ""
    state_version: int = 0
    """RocketMQ's ``DataVersion.stateVersion`` of the registration: the master epoch in force (0 in static
    groups). A name server ignores a registration for an id another address holds at a higher one, so a
    primary that was frozen while it was replaced cannot take id 0 back when it resumes."""


class NamesrvRegistration:
    """Registration with a fixed list of name servers.

    ``topic_table`` is called for each full registration (a snapshot of the topic table);
    ``broker_id`` is read on every call so a role change re-registers under the new id.
    ``on_primary_ha_addr`` is called with the primary's HA address of every answer that names one;
    ``awaiting_primary`` shortens the registration period while it returns True (see the module docstring).
    """

    def __init__(
        self,
        client: RemotingClient,
        namesrv_addrs: list[str],
        identity: Callable[[], BrokerIdentity],
        topic_table: Callable[[], TopicConfigTable],
        *,
        register_interval: float,
        heartbeat_interval: float,
        clock: Clock,
        on_primary_ha_addr: Callable[[str], None] = lambda _addr: None,
        awaiting_primary: Callable[[], bool] = lambda: False,
    ) -> None:
        self._client = client
        self.namesrv_addrs = list(namesrv_addrs)
        self._identity = identity
        self._topic_table = topic_table
        self.register_interval = register_interval
        self.heartbeat_interval = heartbeat_interval
        self._clock = clock
        """Times the register and heartbeat periods."""
        self._register_requested = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._on_primary_ha_addr = on_primary_ha_addr
        self._awaiting_primary = awaiting_primary
        self._heartbeat_asked_at: float | None = None
        """When a heartbeat's answer last asked for a registration (``UNKNOWN_REGISTER_INTERVAL``)."""
        self.master_addr: str | None = None
        """Primary address reported by the last registration (replicas)."""
        self.master_ha_addr: str | None = None
        """The primary's HA address reported by the last registration that named one (replicas)."""

    async def register_all(self) -> bool:
        """One full registration with every name server, concurrently; True if all accepted."""
        if not self.namesrv_addrs:
            return True
        ident = self._identity()
        table = self._topic_table()
        version = replace(table.data_version, state_version=ident.state_version)
        body = encode_register_broker_body(replace(table, data_version=version))
        header = RegisterBrokerRequestHeader(
            broker_name=ident.broker_name,
            broker_addr=ident.broker_addr,
            cluster_name=ident.cluster_name,
            ha_server_addr=ident.ha_server_addr,
            broker_id=ident.broker_id,
            compressed=False,
            body_crc32=zlib.crc32(body) & 0x7FFFFFFF,
        )
        results = await asyncio.gather(
            *(self._register_one(addr, header, body) for addr in self.namesrv_addrs)
        )
        return all(results)

    async def _register_one(self, addr: str, header: RegisterBrokerRequestHeader, body: bytes) -> bool:
        cmd = RemotingCommand(code=RequestCode.REGISTER_BROKER, ext_fields=header.to_ext(), body=body)
        try:
            resp = await self._client.invoke(addr, cmd, REQUEST_TIMEOUT)
        except RocketMQError as exc:
            log.warning("register broker %s with name server %s failed: %s", header.broker_name, addr, exc)
            return False
        if resp.code != ResponseCode.SUCCESS:
            log.warning(
                "name server %s refused registration of %s: code %s %s",
                addr,
                header.broker_name,
                resp.code,
                resp.remark,
            )
            return False
        try:
            rh = RegisterBrokerResponseHeader.from_ext(resp.ext_fields)
        except RocketMQError as exc:
            log.warning("name server %s sent an unreadable registration response: %s", addr, exc)
            return True
        if rh.master_addr:
            self.master_addr = rh.master_addr
        if rh.ha_server_addr:
            self.master_ha_addr = rh.ha_server_addr
            self._on_primary_ha_addr(rh.ha_server_addr)
        return True

    async def heartbeat_all(self) -> None:
        """Lite heartbeat to every name server, at once. One that answers it holds no registration of this
        broker (``BrokerHeartbeatResponseHeader.registered`` false) gets a full registration now: else its
        routes would miss this broker until the next ``register_interval``. Name servers that answer nothing
        of the kind (RocketMQ's) are heartbeated as before."""
        ident = self._identity()
        ext = BrokerHeartbeatRequestHeader(
            cluster_name=ident.cluster_name,
            broker_addr=ident.broker_addr,
            broker_name=ident.broker_name,
            broker_id=ident.broker_id,
        ).to_ext()

        async def one(addr: str) -> bool:
            try:
                resp = await self._client.invoke(
                    addr, RemotingCommand(code=RequestCode.BROKER_HEARTBEAT, ext_fields=dict(ext)),
                    min(REQUEST_TIMEOUT, self.heartbeat_interval))
                registered = BrokerHeartbeatResponseHeader.from_ext(resp.ext_fields).registered
            except RocketMQError as exc:
                log.debug("heartbeat to name server %s failed: %s", addr, exc)
                return False
            if resp.code == ResponseCode.SUCCESS and registered is False:
                log.info("name server %s does not know this broker (it restarted or expired it): registering now",
                         addr)
                return True
            return False

        if any(await asyncio.gather(*(one(a) for a in self.namesrv_addrs))):
            now = self._clock.monotonic()
            if self._heartbeat_asked_at is None or now - self._heartbeat_asked_at >= UNKNOWN_REGISTER_INTERVAL:
                self._heartbeat_asked_at = now
                self.request_register()

    async def unregister_all(self, ident: BrokerIdentity | None = None) -> None:
        """UNREGISTER_BROKER to every name server for this broker as it names itself now, or as ``ident``."""
        ident = ident or self._identity()
        ext = UnregisterBrokerRequestHeader(
            broker_name=ident.broker_name,
            broker_addr=ident.broker_addr,
            cluster_name=ident.cluster_name,
            broker_id=ident.broker_id,
        ).to_ext()

        async def one(addr: str) -> None:
            try:
                resp = await self._client.invoke(
                    addr,
                    RemotingCommand(code=RequestCode.UNREGISTER_BROKER, ext_fields=dict(ext)),
                    REQUEST_TIMEOUT,
                )
                if resp.code != ResponseCode.SUCCESS:
                    log.warning("name server %s refused unregistration: %s", addr, resp.remark)
            except RocketMQError as exc:
                log.warning("unregister from name server %s failed: %s", addr, exc)

        await asyncio.gather(*(one(a) for a in self.namesrv_addrs))

    def request_register(self) -> None:
        """Ask for a full registration soon (coalesces bursts of topic changes)."""
        self._register_requested.set()

    def start(self) -> None:
        if not self.namesrv_addrs:
            return
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._register_loop()), loop.create_task(self._heartbeat_loop())]

    async def stop(self) -> None:
        await cancel_and_wait(self._tasks)
        self._tasks = []

    async def _register_loop(self) -> None:
        while True:
            interval = PRIMARY_UNKNOWN_RETRY if self._awaiting_primary() else self.register_interval
            await self._clock.wait_for(self._register_requested.wait(), min(interval, self.register_interval))
            self._register_requested.clear()
            await self.register_all()

    async def _heartbeat_loop(self) -> None:
        while True:
            await self._clock.sleep(self.heartbeat_interval)
            await self.heartbeat_all()

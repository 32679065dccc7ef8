"""Name server process: RouteInfoManager behind a RemotingServer, plus the expiry scan.

Started by ``broker_store.cli`` through ``run_namesrv`` and by tests through ``NamesrvServer``
(``await start()`` / ``await stop()``; port 0 picks a free port, see ``addr``). Decoding and encoding
of request bodies happens here; all route state lives in ``RouteInfoManager``.
"""

from __future__ import annotations

import asyncio
import logging
import zlib
from collections.abc import Awaitable, Callable

from broker_store.background import cancel_and_wait
from broker_store.clock import SYSTEM_CLOCK, Clock
from broker_store.config import NamesrvConfig, split_host_port
from broker_store.controller.server import EmbeddedController
from broker_store.namesrv.route_info import BrokerKey, RouteInfoManager
from broker_store.net.server import Connection, RemotingServer
from broker_store.net.signals import wait_for_termination
from broker_store.net.tls import ServerTls
from broker_store.protocol.codes import RequestCode, ResponseCode
from broker_store.protocol.errors import ProtocolError
from broker_store.protocol.frame import RemotingCommand
from broker_store.protocol.headers import (
    BrokerHeartbeatRequestHeader,
    BrokerHeartbeatResponseHeader,
    QueryDataVersionRequestHeader,
    QueryDataVersionResponseHeader,
    RegisterBrokerRequestHeader,
    RegisterBrokerResponseHeader,
    TopicRequestHeader,
    UnregisterBrokerRequestHeader,
)
from broker_store.protocol.route import dumps_rocketmq
from broker_store.protocol.topic import DataVersion, decode_register_broker_body

log = logging.getLogger(__name__)

_Processor = Callable[[RemotingCommand, Connection], Awaitable[RemotingCommand]]
_EMPTY_KV_TABLE = dumps_rocketmq({"table": {}})


class NamesrvServer:
    """One name server. ``clock`` is the one clock of its timers: brokers' liveness stamps and the expiry
    scan (``broker_store.clock``; tests pass a ``ManualClock``)."""

    def __init__(self, config: NamesrvConfig, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self.config = config
        self._clock = clock
        self.routes = RouteInfoManager(default_timeout=config.broker_expiry_seconds, clock=clock)
        host, port = split_host_port(config.listen)
        self._server = RemotingServer(self._handle, host, port, tls=ServerTls.from_settings(config.tls.server))
        self._server.disconnect_listeners.append(self._on_disconnect)
        self._scan_task: asyncio.Task[None] | None = None
        # The connection each broker last registered on: a broker whose connection closes is removed
        # at once (RocketMQ's BrokerHousekeepingService), without waiting for the expiry scan. Only
        # the latest connection counts, so a stale close after a reconnect removes nothing.
        self._broker_conns: dict[BrokerKey, Connection] = {}
        self.controller: EmbeddedController | None = None
        if config.controller is not None:
            self.controller = EmbeddedController(config.controller, address=config.listen, clock=clock,
                                                 tls=config.tls.client_settings())
            self._server.disconnect_listeners.append(self.controller.on_disconnect)
        self._processors: dict[int, _Processor] = {
            RequestCode.REGISTER_BROKER: self._register_broker,
            RequestCode.UNREGISTER_BROKER: self._unregister_broker,
            RequestCode.BROKER_HEARTBEAT: self._broker_heartbeat,
            RequestCode.QUERY_DATA_VERSION: self._query_data_version,
            RequestCode.GET_ROUTEINFO_BY_TOPIC: self._get_route,
            RequestCode.GET_BROKER_CLUSTER_INFO: self._get_cluster_info,
            RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: self._get_all_topics,
            RequestCode.DELETE_TOPIC_IN_NAMESRV: self._delete_topic,
        }
        if self.controller is not None:  # BROKER_HEARTBEAT feeds both the routes and the controller
            for code, handler in self.controller.processor.handlers().items():
                self._processors.setdefault(code, handler)

    @property
    def addr(self) -> str:
        """``host:port`` actually bound (valid after start)."""
        return f"{self._server.host}:{self._server.port}"

    async def start(self) -> None:
        await self._server.start()
        self._scan_task = asyncio.get_running_loop().create_task(self.run_expiry_scan())
        if self.controller is not None:
            self.controller.start()
            try:
                await self.controller.serve_metrics(self._server.host)
            except BaseException:  # the metrics port taken: nothing of this name server keeps running
                await self.stop()
                raise
        log.info("name server listening on %s", self.addr)

    async def stop(self) -> None:
        if self._scan_task is not None:
            await cancel_and_wait([self._scan_task])
            self._scan_task = None
        if self.controller is not None:
            await self.controller.stop()
        await self._server.stop()

    async def run_expiry_scan(self) -> None:
        """Every ``scan_interval_seconds`` of the clock, remove the brokers silent past their timeout, until
        cancelled. ``start`` runs it; a test runs it alone (no socket) and advances a ``ManualClock``."""
        while True:
            await self._clock.sleep(self.config.scan_interval_seconds)
            for key in self.routes.scan_not_active_brokers():
                self._broker_conns.pop(key, None)
                log.warning(
                    "broker %s of cluster %s expired: no heartbeat for %.1fs",
                    key.addr,
                    key.cluster,
                    self.config.broker_expiry_seconds,
                )

    def _on_disconnect(self, conn: Connection) -> None:
        for key in [k for k, c in self._broker_conns.items() if c is conn]:
            del self._broker_conns[key]
            for live_key, live in self.routes.brokers_at(key.addr):
                if live_key == key:
                    log.info("broker %s (%s) disconnected; removing it", key.addr, live.broker_name)
                    self.routes.unregister_broker(
                        cluster=key.cluster,
                        broker_addr=key.addr,
                        broker_name=live.broker_name,
                        broker_id=live.broker_id,
                    )

    async def _handle(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        processor = self._processors.get(cmd.code)
        if processor is None:
            return cmd.response(
                ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {cmd.code} not supported"
            )
        return await processor(cmd, conn)

    async def _register_broker(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        h = RegisterBrokerRequestHeader.from_ext(cmd.ext_fields)
        if h.compressed:
            return cmd.response(
                ResponseCode.SYSTEM_ERROR,
                "compressed RegisterBrokerBody is not supported by this name server; "
                "register with compressed=false (brokerConfig compressedRegister=false)",
            )
        if h.body_crc32 and (zlib.crc32(cmd.body) & 0x7FFFFFFF) != h.body_crc32:
            return cmd.response(ResponseCode.SYSTEM_ERROR, "crc32 not match")
        try:
            table = decode_register_broker_body(cmd.body)
        except ProtocolError as exc:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"malformed RegisterBrokerBody: {exc}")
        timeout = h.heartbeat_timeout_millis / 1000 if h.heartbeat_timeout_millis else None
        result = self.routes.register_broker(
            cluster=h.cluster_name,
            broker_addr=h.broker_addr,
            broker_name=h.broker_name,
            broker_id=h.broker_id,
            ha_server_addr=h.ha_server_addr,
            topic_configs=table.topic_configs,
            data_version=table.data_version,
            heartbeat_timeout=timeout,
        )
        if result.stale_over is not None:
            log.warning("ignored the registration of %s/%d at %s: %s holds that id at a newer master epoch "
                        "(state version %d is older); the broker has not heard of its replacement yet",
                        h.broker_name, h.broker_id, h.broker_addr, result.stale_over, table.data_version.state_version)
        else:
            self._broker_conns[BrokerKey(h.cluster_name, h.broker_addr)] = conn
        header = RegisterBrokerResponseHeader(
            ha_server_addr=result.ha_server_addr, master_addr=result.master_addr
        )
        return cmd.response(ResponseCode.SUCCESS, None, header.to_ext(), _EMPTY_KV_TABLE)

    async def _unregister_broker(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        h = UnregisterBrokerRequestHeader.from_ext(cmd.ext_fields)
        self.routes.unregister_broker(
            cluster=h.cluster_name,
            broker_addr=h.broker_addr,
            broker_name=h.broker_name,
            broker_id=h.broker_id,
        )
        self._broker_conns.pop(BrokerKey(h.cluster_name, h.broker_addr), None)
        return cmd.response(ResponseCode.SUCCESS)

    async def _broker_heartbeat(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        h = BrokerHeartbeatRequestHeader.from_ext(cmd.ext_fields)
        registered = self.routes.heartbeat(cluster=h.cluster_name, broker_addr=h.broker_addr)
        if self.controller is not None and h.is_controller_heartbeat:
            return await self.controller.processor.heartbeat(cmd, conn)
        return cmd.response(ResponseCode.SUCCESS, ext_fields=BrokerHeartbeatResponseHeader(registered).to_ext())

    async def _query_data_version(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        h = QueryDataVersionRequestHeader.from_ext(cmd.ext_fields)
        version = DataVersion.decode(cmd.body) if cmd.body else DataVersion()
        changed, held = self.routes.query_data_version(
            cluster=h.cluster_name, broker_addr=h.broker_addr, data_version=version
        )
        return cmd.response(
            ResponseCode.SUCCESS,
            None,
            QueryDataVersionResponseHeader(changed=changed).to_ext(),
            held.encode() if held is not None else b"",
        )

    async def _get_route(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        h = TopicRequestHeader.from_ext(cmd.ext_fields)
        route = self.routes.pickup_topic_route(h.topic)
        if route is None:
            return cmd.response(
                ResponseCode.TOPIC_NOT_EXIST, f"No topic route info in name server for the topic: {h.topic}"
            )
        return cmd.response(ResponseCode.SUCCESS, body=route.encode())

    async def _delete_topic(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        h = TopicRequestHeader.from_ext(cmd.ext_fields)
        self.routes.delete_topic(h.topic)
        return cmd.response(ResponseCode.SUCCESS)

    async def _get_cluster_info(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        return cmd.response(ResponseCode.SUCCESS, body=self.routes.cluster_info().encode())

    async def _get_all_topics(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        return cmd.response(
            ResponseCode.SUCCESS, body=dumps_rocketmq({"topicList": self.routes.all_topics()})
        )


async def run_namesrv(cfg: NamesrvConfig, ready: Callable[[str], None] | None = None) -> None:
    """Serve a name server until cancelled or SIGTERM; ``ready(addr)`` is called once it listens."""
    server = NamesrvServer(cfg)
    await server.start()
    try:
        if ready is not None:
            ready(server.addr)
        await wait_for_termination()
    finally:
        await server.stop()

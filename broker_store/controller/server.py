"""A controller's process side: builds the state store the settings name (the embedded file store, or etcd),
the ``Controller`` and its remoting processor, and runs the scan. Embedded in the name server
(``NamesrvConfig.controller``, RocketMQ's enableControllerInNamesrv) or run alone by
``python -m broker_store controller --config FILE`` (``config.ControllerConfig``, whose parts ``run_controller``
takes) for replicated controllers over etcd.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from broker_store.address import split_host_port
from broker_store.clock import SYSTEM_CLOCK, Clock
from broker_store.controller.file_store import FileStateStore
from broker_store.controller.metrics import ControllerMetrics
from broker_store.controller.processor import ControllerProcessor
from broker_store.controller.service import Controller
from broker_store.controller.settings import ControllerSettings
from broker_store.controller.state_store import StateStore
from broker_store.net.metrics_http import MetricsServer
from broker_store.net.server import Connection, RemotingServer
from broker_store.net.signals import wait_for_termination
from broker_store.net.tls import ServerTls
from broker_store.net.tls_settings import TlsClientSettings, TlsSettings
from broker_store.protocol.codes import ResponseCode
from broker_store.protocol.frame import RemotingCommand

log = logging.getLogger(__name__)

STATE_FILE = "controller-state.json"


def open_state_store(settings: ControllerSettings, member_id: str, clock: Clock = SYSTEM_CLOCK) -> StateStore:
    """The store ``settings`` name: etcd when configured (its retry deadlines on ``clock``), else the embedded file
    in ``state_dir``."""
    if settings.etcd is not None:
        from broker_store.controller.etcd_store import EtcdStateStore

        return EtcdStateStore([str(u).rstrip("/") for u in settings.etcd.endpoints], member_id,
                              prefix=settings.etcd.prefix, lease_ttl_s=settings.etcd.lease_ttl_seconds, clock=clock)
    return FileStateStore((settings.state_dir or Path("controller")) / STATE_FILE, member_id)


class EmbeddedController:
    """The controller inside another server's remoting listener: its handlers, its disconnect hook, its scan."""

    def __init__(self, settings: ControllerSettings, *, address: str, clock: Clock = SYSTEM_CLOCK,
                 store: StateStore | None = None, tls: TlsClientSettings | None = None) -> None:
        self.store = store or open_state_store(settings, member_id=address, clock=clock)
        peers = ";".join(str(u).rstrip("/") for u in settings.etcd.endpoints) if settings.etcd is not None else None
        self.processor = ControllerProcessor(Controller(self.store, settings, clock=clock), address=address,
                                             peers=peers, tls=tls, clock=clock)
        self.controller = self.processor.controller
        self.controller.set_notify(self.processor.notify)  # the processor owns the sockets
        self._clock = clock
        self.metrics: MetricsServer | None = None
        """With ``metrics_port``: the Prometheus endpoint (``controller.metrics``; valid after ``serve_metrics``)."""

    def on_disconnect(self, conn: Connection) -> None:
        self.processor.on_disconnect(conn)

    def start(self) -> None:
        self.controller.start()
        log.info("controller started (state: %s, leader: %s)", type(self.store).__name__, self.store.leader())

    async def serve_metrics(self, host: str) -> None:
        """With ``metrics_port`` set: serve the controller's metrics on ``host`` (its listener's host)."""
        port = self.controller.settings.metrics_port
        if port is not None:
            self.metrics = MetricsServer(ControllerMetrics(self.controller).collect, host, port, clock=self._clock)
            await self.metrics.start()

    async def stop(self) -> None:
        if self.metrics is not None:
            await self.metrics.stop()
        await self.controller.stop()
        await self.processor.close()
        self.store.resign()
        self.store.close()


async def run_controller(settings: ControllerSettings, listen: str, tls: TlsSettings,
                         ready: Callable[[str], None] | None = None) -> None:
    """Serve one standalone controller (a ``config.ControllerConfig``'s ``controller``, ``listen`` and ``tls``)
    until cancelled or SIGTERM; ``ready(addr)`` once it listens."""
    embedded = EmbeddedController(settings, address=listen, tls=tls.client_settings())
    handlers = embedded.processor.handlers()

    async def handle(cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        handler = handlers.get(cmd.code)
        if handler is None:
            return cmd.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {cmd.code} not supported")
        return await handler(cmd, conn)

    host, port = split_host_port(listen)
    server = RemotingServer(handle, host, port, tls=ServerTls.from_settings(tls.server))
    server.disconnect_listeners.append(embedded.on_disconnect)
    await server.start()
    embedded.start()
    try:
        await embedded.serve_metrics(host)
        if ready is not None:
            ready(f"{server.host}:{server.port}")
        await wait_for_termination()
    finally:
        await embedded.stop()
        await server.stop()

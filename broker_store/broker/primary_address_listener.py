"""The I/O of a controller-mode broker's primary address: binds and closes its listeners as
``broker.primary_address.PrimaryAddressPlan`` says.

Owned by ``broker.server.BrokerServer`` (only with the ``primary_address`` setting): ``role_changed`` is a
``RoleState`` listener, ``start`` and ``stop`` follow the broker's. The listeners are ordinary remoting servers with
the broker's handler, so a request arriving on the primary address is served like one on ``listen``. Runs on the
event loop; every wait reads the broker's clock.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

from broker_store.background import cancel_and_wait
from broker_store.broker.primary_address import PrimaryAddressPlan, StepKind
from broker_store.broker.role import RoleView
from broker_store.clock import Clock
from broker_store.net.server import RemotingServer
from broker_store.protocol.route import MASTER_ID

log = logging.getLogger(__name__)

ServerFactory = Callable[[str], RemotingServer]
"""A remoting server for one ``host:port`` (not started), serving what the broker's ``listen`` serves."""


class PrimaryAddressListener:
    """Serves ``addresses`` (the primary address and, with the fast port, its port - 2) while the plan wants them.
    ``describe`` names the broker in logs."""

    def __init__(self, addresses: Sequence[str], make_server: ServerFactory, clock: Clock, *, describe: str) -> None:
        self.addresses = list(addresses)
        self._make_server = make_server
        self._clock = clock
        self._describe = describe
        self.plan = PrimaryAddressPlan(clock)
        self._servers: list[RemotingServer] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def serving(self) -> bool:
        """The addresses are bound by this broker now."""
        return self.plan.held

    def role_changed(self, old: RoleView, new: RoleView) -> None:
        """RoleState listener: the address is wanted while the broker registers as id 0."""
        if (old.broker_id == MASTER_ID) != (new.broker_id == MASTER_ID):
            self.plan.role_changed(new.broker_id == MASTER_ID)
            self._wake.set()

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        """Close the addresses (if held) and stop following the role."""
        self.plan.stopping()
        if self._task is not None:
            await cancel_and_wait([self._task])
            self._task = None
        if self.plan.held:
            await self._release()

    async def _run(self) -> None:
        while True:
            step = self.plan.next_step()
            if step.kind is StepKind.BIND:
                await self._bind()
                continue
            if step.kind is StepKind.RELEASE:
                await self._release()
                continue
            self._wake.clear()
            if step.kind is StepKind.WAIT:
                await self._clock.wait_for(self._wake.wait(), max(0.0, step.at - self._clock.monotonic()))
            else:
                await self._wake.wait()

    async def _bind(self) -> None:
        servers: list[RemotingServer] = []
        try:
            for addr in self.addresses:
                server = self._make_server(addr)
                await server.start()
                servers.append(server)
        except OSError as exc:
            for server in servers:
                await server.stop()
            delay = self.plan.bind_failed()
            level = logging.WARNING if self.plan.failures in (1, 10) or self.plan.failures % 50 == 0 else logging.DEBUG
            log.log(level, "%s: cannot bind the primary address %s yet (%s; failure %d): another process may still "
                    "hold it (an old primary not demoted yet); retrying in %.2f s", self._describe,
                    self.addresses[len(servers)], exc.strerror or exc, self.plan.failures, delay)
            return
        except BaseException:  # cancelled by stop: nothing half-bound stays open
            for server in servers:
                await server.stop()
            raise
        self._servers = servers
        self.plan.bound()
        log.info("%s: serving the primary address %s", self._describe, ", ".join(self.addresses))

    async def _release(self) -> None:
        servers, self._servers = self._servers, []
        for server in servers:
            await server.stop()  # closes the connections accepted on it too: clients reconnect to the new holder
        self.plan.released()
        log.info("%s: closed the primary address %s", self._describe, ", ".join(self.addresses))

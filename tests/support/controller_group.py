"""A controller-mode broker group for integration tests: its configs and the questions tests ask of it.

One owner of what a test's controller-mode group looks like (a name server with the embedded controller at
test timing, SYNC_MASTER brokers with no fixed id), used by the partition and restart tests; the fault
checker (benchmarks/failover.py, its own configs) asks its questions here too. The processes themselves are
``tests.support.processes`` ones (``ClusterProcess`` / ``Broker``), on loopback or, with ``wrap``, inside a
network namespace.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar

from broker_store.client import AsyncAdmin
from broker_store.client.controller_admin import sync_state_data
from broker_store.config import BrokerConfig, NamesrvConfig
from broker_store.deploy.launcher import HOST, free_port
from broker_store.net.client import RemotingClient
from broker_store.protocol.controller import ReplicasInfo
from broker_store.protocol.errors import RocketMQError
from tests.support.processes import Broker, ClusterProcess, broker_listen_port

T = TypeVar("T")

CONTROLLER_TIMING: Mapping[str, Any] = {"heartbeat_timeout_ms": 1500, "scan_interval_ms": 200}
"""Test timing: a frozen or cut-off primary is replaced within ~2 s (a killed one at once)."""

CP_HA: Mapping[str, Any] = {
    "role": "SYNC_MASTER", "total_replicas": 3, "in_sync_replicas": 2, "min_in_sync_replicas": 2,
    "ha_send_heartbeat_interval_ms": 500, "ha_housekeeping_interval_ms": 2000,
    "ha_max_time_slave_not_catchup_ms": 4000, "metadata_sync_interval_ms": 1000}
"""CP: every SEND_OK on two copies, no downgrade below it."""

AP_HA: Mapping[str, Any] = {**CP_HA, "min_in_sync_replicas": 1, "enable_auto_in_sync_replicas": True}
"""AP: the primary downgrades to acknowledging alone when its replicas are gone."""


class Deployment(Protocol):
    """Processes a test starts and stops as one (``ClusterProcess``-like)."""

    def start(self) -> Any: ...
    def stop(self) -> Any: ...
    def logs(self) -> str: ...


class Started(Protocol):
    """A process a test starts and stops (``ClusterProcess`` / ``Broker``)."""

    name: str

    def start(self) -> Any: ...
    def stop(self) -> Any: ...
    def log_tail(self) -> str: ...


class Members:
    """Processes started in the given order (a name server before its brokers) and stopped in the reverse one."""

    def __init__(self, *processes: Started) -> None:
        self.processes = processes

    def start(self) -> None:
        for p in self.processes:
            p.start()

    def stop(self) -> None:
        for p in reversed(self.processes):
            p.stop()

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}:\n{p.log_tail()}" for p in self.processes)


def run_started(deployment: Deployment, main: Callable[[], Awaitable[T]]) -> T:
    """Start ``deployment``, run ``main`` on a fresh event loop and return its result, print the processes' logs
    when anything fails (the only trace a CI failure leaves of what the brokers and controllers did), stop them."""
    async def run() -> T:
        return await main()

    try:
        deployment.start()
        return asyncio.run(run())
    except BaseException:
        print(deployment.logs())
        raise
    finally:
        deployment.stop()


def namesrv_config(listen: str, state_dir: Path, **controller: Any) -> NamesrvConfig:
    """A name server with the embedded controller at test timing (``controller`` overrides)."""
    return NamesrvConfig(listen=listen, broker_expiry_seconds=3.0,
                         controller={**CONTROLLER_TIMING, "state_dir": str(state_dir), **controller})


def broker_config(listen: str, namesrv: str, store_dir: Path, *, cluster: str, group: str,
                  ha: Mapping[str, Any] = CP_HA, controllers: Sequence[str] | None = None,
                  link: Mapping[str, Any] | None = None, **options: Any) -> BrokerConfig:
    """A controller-mode member of ``group`` (no id, no fixed role) whose controller is the name server, or
    ``controllers`` (standalone ones); ``link`` adds to its ``controller:`` section."""
    return BrokerConfig(cluster_name=cluster, broker_name=group, listen=listen, store_dir=store_dir,
                        namesrv_addrs=[namesrv], enable_controller_mode=True,
                        controller={"controller_addrs": list(controllers or [namesrv]),
                                    "replica_info_poll_interval_ms": 500, **(link or {})},
                        fast_listen_enable=False, store={"commit_log_segment_size": 8 * 1024 * 1024}, ha=dict(ha),
                        **options)


async def until(check: Callable[[], Awaitable[T | None]], what: Callable[[], str] | str,
                timeout: float = 30.0) -> T:
    """``check()`` again every 0.1 s until it returns something truthy; that value."""
    deadline = time.monotonic() + timeout
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"after {timeout} s: {what() if callable(what) else what}")
        await asyncio.sleep(0.1)


async def master_addr(admin: AsyncAdmin, group: str) -> str | None:
    """The group's primary as the name server lists it (None while none is, or the name server is down)."""
    try:
        info = await admin.cluster_info()
    except RocketMQError:
        return None
    data = info.broker_addr_table.get(group)
    return None if data is None else data.master_addr


async def replicas_info(client: RemotingClient, controller: str, group: str) -> ReplicasInfo | None:
    """The controller's view of the group (CONTROLLER_GET_SYNC_STATE_DATA); None while it does not answer."""
    try:
        return (await sync_state_data(client, controller, [group])).get(group)
    except RocketMQError:
        return None


CLUSTER, GROUP, TOPIC = "rc", "rc-a", "Restarts"


class Group:
    """A name server with the embedded controller and three controller-mode brokers b1..b3 of group ``GROUP``
    (cluster ``CLUSTER``); ``run`` creates ``TOPIC`` on it."""

    def __init__(self, root: Path, ha: Mapping[str, Any] = CP_HA, broker_options: Mapping[str, Any] | None = None,
                 **controller: object) -> None:
        listen = f"{HOST}:{free_port()}"
        self.namesrv = ClusterProcess("namesrv", namesrv_config(listen, root / "controller", **controller), root,
                                      "namesrv")
        self.addr = listen
        self.brokers = {
            name: Broker("broker", broker_config(f"{HOST}:{broker_listen_port(False)}", listen, root / name,
                                                 cluster=CLUSTER, group=GROUP, ha=ha, **(broker_options or {})),
                          root, name)
            for name in ("b1", "b2", "b3")}

    def by_listen(self, addr: str) -> Broker:
        return next(b for b in self.brokers.values() if b.listen == addr)

    def start(self) -> None:
        self.namesrv.start()
        for b in self.brokers.values():
            b.start()

    def stop(self) -> None:
        for p in (*self.brokers.values(), self.namesrv):
            p.kill()

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}:\n{p.log_tail()}" for p in (*self.brokers.values(), self.namesrv))

    def run(self, scenario: Callable[[AsyncAdmin, RemotingClient, str], Awaitable[None]]) -> None:
        """Start the group, wait for its first primary, all three brokers in the SyncStateSet and the topic
        routed, then run ``scenario(admin, client, primary)``. Every process's log tail is printed when anything
        fails; the admin, the client and every process are gone afterwards."""
        async def main() -> None:
            admin, client = AsyncAdmin(self.addr), RemotingClient()
            await admin.start()
            try:
                primary = await until(lambda: master_addr(admin, GROUP), "a primary elected")
                await until(lambda: in_sync_ids(client, self, 3), "all three in the SyncStateSet")
                await admin.create_topic(TOPIC, 4, cluster=CLUSTER)
                await admin.wait_for_route(TOPIC, timeout=30)
                await scenario(admin, client, primary)
            finally:
                await admin.close()
                await client.close()

        run_started(self, main)


async def in_sync_ids(client: RemotingClient, group: Group, n: int) -> set[int] | None:
    info = await replicas_info(client, group.addr, GROUP)
    ids = None if info is None else {r.broker_id for r in info.in_sync}
    return ids if ids is not None and len(ids) == n else None

"""Controller mode end to end: three brokers in controller mode (real processes) form one group through a
controller, elect, fail over after a kill -9 and take the old primary back as a replica.

The controller runs in the test process (a RemotingServer dispatching ``ControllerProcessor`` over a
``Controller`` on a ``FileStateStore``, as the name server will embed it), beside an in-process name server;
the brokers are processes of ``tests.support.processes``. The SyncStateSet grows by itself: the primary's HA
side asks the controller (CONTROLLER_ALTER_SYNC_STATE_SET) as its replicas catch up.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from broker_store.broker.controller_client import ControllerClient
from broker_store.client import AsyncAdmin, AsyncProducer, SendStatus, new_message
from broker_store.config import BrokerConfig, NamesrvConfig
from broker_store.controller.file_store import FileStateStore
from broker_store.controller.processor import ControllerProcessor
from broker_store.controller.replicas import GroupState
from broker_store.controller.service import Controller
from broker_store.controller.settings import ControllerSettings
from broker_store.deploy.launcher import HOST, wait_in_sync
from broker_store.namesrv import NamesrvServer
from broker_store.net.server import Connection, HandlerResult, RemotingServer
from broker_store.protocol.codes import ResponseCode
from broker_store.protocol.errors import RocketMQError
from broker_store.protocol.frame import RemotingCommand
from tests.support.processes import Broker, broker_listen_port

pytestmark = pytest.mark.integration

GROUP, CLUSTER, TOPIC = "g", "c", "Failover"
WAIT = 30.0


class InProcessController:
    """A controller on a loopback port of the test's loop (the embedded controller's wiring)."""

    def __init__(self, state_dir: Path) -> None:
        settings = ControllerSettings(heartbeat_timeout_ms=2000, scan_interval_ms=250)
        self.controller = Controller(FileStateStore(state_dir / "controller-state.json"), settings,
                                     notify=lambda group, alive: self.processor.notify(group, alive))
        self.processor = ControllerProcessor(self.controller)
        self.handlers = self.processor.handlers()
        self.server = RemotingServer(self._handle, HOST, 0)
        self.server.disconnect_listeners.append(self.processor.on_disconnect)

    def _handle(self, cmd: RemotingCommand, conn: Connection) -> HandlerResult:
        handler = self.handlers.get(cmd.code)
        if handler is None:
            return cmd.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f"request code {cmd.code} not supported")
        return handler(cmd, conn)

    @property
    def addr(self) -> str:
        return f"{HOST}:{self.server.port}"

    async def start(self) -> None:
        await self.server.start()
        self.controller.start()

    async def stop(self) -> None:
        await self.controller.stop()
        await self.server.stop()
        await self.processor.close()
        self.controller.store.close()

    async def group(self) -> GroupState | None:
        group, _ = await self.controller.read_group(GROUP)
        return group


def broker(root: Path, name: str, namesrv: str, controller: str, store_dir: Path | None = None) -> Broker:
    config = BrokerConfig(
        cluster_name=CLUSTER, broker_name=GROUP, listen=f"{HOST}:{broker_listen_port(False)}",
        store_dir=store_dir or root / name, namesrv_addrs=[namesrv], enable_controller_mode=True,
        controller={"controller_addrs": [controller], "replica_info_poll_interval_ms": 1000},
        fast_listen_enable=False, store={"commit_log_segment_size": 8 * 1024 * 1024, "max_message_size": 1024 * 1024},
        ha={"metadata_sync_interval_ms": 500, "ha_send_heartbeat_interval_ms": 500,
            "ha_housekeeping_interval_ms": 3000})
    return Broker("broker", config, root, name)


async def eventually(check: Callable[[], Awaitable[bool]], what: Callable[[], str] | str,
                     timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"after {timeout} s: {what() if callable(what) else what}")
        await asyncio.sleep(0.1)


def test_three_controlled_brokers_elect_fail_over_and_take_the_old_primary_back(tmp_path: Path) -> None:
    async def main() -> None:
        ns = NamesrvServer(NamesrvConfig(listen=f"{HOST}:0", broker_expiry_seconds=3.0))
        await ns.start()
        ctl = InProcessController(tmp_path / "controller")
        await ctl.start()
        admin = AsyncAdmin(ns.addr)
        await admin.start()
        client = ControllerClient([ctl.addr], request_timeout=3.0)
        members = {name: broker(tmp_path, name, ns.addr, ctl.addr) for name in ("b1", "b2", "b3")}
        running = list(members.values())
        seen: Any = None

        async def listed() -> dict[int, str]:
            nonlocal seen
            try:
                info = await admin.cluster_info()
            except RocketMQError as exc:
                seen = exc
                return {}
            group = info.broker_addr_table.get(GROUP)
            seen = dict(group.broker_addrs) if group is not None else {}
            return seen  # type: ignore[no-any-return]

        def logs() -> str:
            return "\n".join(f"--- {b.name}:\n{b.log_tail(2500)}" for b in running)

        try:
            # -- join: ids 1, 2, 3; the first is elected at epoch 1 and registers as id 0 -------------
            b1, b2, b3 = members["b1"], members["b2"], members["b3"]
            await asyncio.to_thread(b1.start)

            async def first_elected() -> bool:
                group = await ctl.group()
                return group is not None and (group.master_id, group.master_epoch) == (1, 1) \
                    and await listed() == {0: b1.listen}
            await eventually(first_elected, lambda: f"b1 primary at epoch 1, name server lists {seen}\n{logs()}")
            for replica in (b2, b3):  # one after the other, so the ids are known
                await asyncio.to_thread(replica.start)

                async def has_id(replica: Broker = replica) -> bool:
                    return (replica.store_dir / "brokerIdentity").exists()
                await eventually(has_id, lambda: f"an id for the next replica\n{logs()}")
            expected = {0: b1.listen, 2: b2.listen, 3: b3.listen}

            async def all_listed() -> bool:
                return await listed() == expected
            await eventually(all_listed, lambda: f"name server lists {expected}, got {seen}\n{logs()}")
            assert [(b.store_dir / "brokerIdentity").read_text() for b in (b1, b2, b3)] == \
                [f"{CLUSTER}#{GROUP}#{i}" for i in (1, 2, 3)]
            assert (b1.store_dir / "epochFileCheckpoint").read_text().splitlines()[2:] == ["1-0"]
            for replica in (b2, b3):
                status = await admin.ha_status(replica.listen)
                assert (status.stage, status.epoch) == ("REPLICA", 1)
                assert status.ha_address == f"{HOST}:{b1.config.ha_port()}"  # the controller's primary

            # -- writes replicate; the replicas join the SyncStateSet (the HA side's job, asked by hand) --
            await admin.create_topic(TOPIC, 2, cluster=CLUSTER)
            async with AsyncProducer(ns.addr) as producer:
                for i in range(20):
                    assert (await producer.send(new_message(TOPIC, b"before %d" % i))).status is SendStatus.SEND_OK
            await asyncio.to_thread(wait_in_sync, b1.listen, 2, WAIT)

            async def caught_up() -> bool:
                top = (await admin.ha_status(b1.listen)).max_offset
                for replica in (b2, b3):
                    status = await admin.ha_status(replica.listen)
                    if status.max_offset != top or TOPIC not in await admin.all_topic_config(replica.listen):
                        return False
                return True
            await eventually(caught_up, "replicas hold the primary's log and topics")

            async def grown() -> bool:  # the primary's HA side asks the controller as its replicas catch up
                group = await ctl.group()
                return group is not None and group.sync_state_set == frozenset({1, 2, 3})

            await eventually(grown, lambda: f"the SyncStateSet grew to every member; controller has {seen}")

            # -- kill -9 the primary: a SyncStateSet member takes sends within seconds ---------------
            await asyncio.to_thread(b1.kill)
            running.remove(b1)
            killed = time.monotonic()
            async with AsyncProducer(ns.addr) as producer:
                while True:
                    try:
                        result = await producer.send(new_message(TOPIC, b"after"))
                        if result.status is SendStatus.SEND_OK:
                            break
                    except RocketMQError:
                        pass  # the send's own timeout ran out while no primary was registered: try again
                    assert time.monotonic() - killed < WAIT, f"no send accepted after the kill\n{logs()}"
                    await asyncio.sleep(0.05)
            failover_s = time.monotonic() - killed
            print(f"failover: first SEND_OK {failover_s:.2f} s after kill -9 of the primary")
            group = await ctl.group()
            assert group is not None and group.master_id in (2, 3) and group.master_epoch == 2
            new, other = (b2, b3) if group.master_id == 2 else (b3, b2)
            assert failover_s < 10.0, f"failover took {failover_s:.1f} s"
            assert (await listed())[0] == new.listen
            lines = (new.store_dir / "epochFileCheckpoint").read_text().splitlines()
            # epoch 1 copied from the old primary's link, epoch 2 starting where its log ended
            assert lines[0] == "2" and lines[2] == "1-0" and lines[3].startswith("2-"), lines

            async def follows_new() -> bool:
                status = await admin.ha_status(other.listen)
                return (status.stage, status.epoch, status.ha_address) == \
                    ("REPLICA", 2, f"{HOST}:{new.config.ha_port()}")
            await eventually(follows_new, lambda: f"{other.name} follows {new.name}\n{logs()}")

            # -- the old primary restarts on a new port: same id 1, a replica of the new primary -------
            back = broker(tmp_path, "b1-again", ns.addr, ctl.addr, store_dir=b1.store_dir)
            await asyncio.to_thread(back.start)
            running.append(back)

            async def rejoined() -> bool:
                group = await ctl.group()
                if group is None or group.members[1].address != back.listen:
                    return False
                if (await listed()).get(1) != back.listen:
                    return False
                status = await admin.ha_status(back.listen)
                return (status.stage, status.epoch, status.ha_address) == \
                    ("REPLICA", 2, f"{HOST}:{new.config.ha_port()}")
            await eventually(rejoined, lambda: f"b1 back as replica 1 at {back.listen}, listed {seen}\n{logs()}")
            group = await ctl.group()
            assert group is not None and sorted(group.members) == [1, 2, 3] and group.master_epoch == 2
            assert (back.store_dir / "brokerIdentity").read_text() == f"{CLUSTER}#{GROUP}#1"
        finally:
            for process in [*members.values(), *running]:
                await asyncio.to_thread(process.kill)
            await client.close()
            await admin.close()
            await ctl.stop()
            await ns.stop()

    asyncio.run(main())

"""The controller embedded in a name server (NamesrvConfig.controller), over real sockets: a broker group's
join protocol (next id, apply, register, heartbeat, first election), the SyncStateSet altered by its primary,
a primary whose connection closes replaced at once by a SyncStateSet member that is notified, and the admin
commands ``controller-status`` and ``elect`` reading and acting on the same state, and ``controller-config``
changing the controller's settings at runtime."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from broker_store.config import NamesrvConfig
from broker_store.controller.settings import ControllerSettings
from broker_store.deploy.launcher import free_port
from broker_store.namesrv.server import NamesrvServer
from broker_store.net.client import RemotingClient
from broker_store.net.server import Connection, RemotingServer
from broker_store.protocol.codes import RequestCode, ResponseCode
from broker_store.protocol.controller import (
    AlterSyncStateSetRequestHeader,
    ApplyBrokerIdRequestHeader,
    ElectMasterRequestHeader,
    ElectMasterResponseHeader,
    GetNextBrokerIdRequestHeader,
    GetNextBrokerIdResponseHeader,
    NotifyBrokerRoleChangedRequestHeader,
    RegisterBrokerToControllerRequestHeader,
    SyncStateSet,
)
from broker_store.protocol.frame import RemotingCommand
from broker_store.protocol.headers import BrokerHeartbeatRequestHeader

HOST = "127.0.0.1"


class FakeBroker:
    """The controller-facing half of a broker in controller mode: its own listener (for the controller's
    NOTIFY_BROKER_ROLE_CHANGED) and one connection to the controller."""

    def __init__(self) -> None:
        self.notified: list[NotifyBrokerRoleChangedRequestHeader] = []
        self.server = RemotingServer(self._handle, HOST, free_port())
        self.client = RemotingClient()
        self.broker_id = -1

    async def _handle(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        self.notified.append(NotifyBrokerRoleChangedRequestHeader.from_ext(cmd.ext_fields))
        return cmd.response(ResponseCode.SUCCESS)

    @property
    def addr(self) -> str:
        return f"{self.server.host}:{self.server.port}"

    async def call(self, controller: str, code: int, ext: dict[str, str], body: bytes = b"") -> RemotingCommand:
        return await self.client.invoke(controller, RemotingCommand(code=code, ext_fields=ext, body=body), 5.0)

    async def join(self, controller: str) -> None:
        resp = await self.call(controller, RequestCode.CONTROLLER_GET_NEXT_BROKER_ID,
                               GetNextBrokerIdRequestHeader("c", "g").to_ext())
        self.broker_id = GetNextBrokerIdResponseHeader.from_ext(resp.ext_fields).next_broker_id or -1
        resp = await self.call(controller, RequestCode.CONTROLLER_APPLY_BROKER_ID,
                               ApplyBrokerIdRequestHeader("c", "g", self.broker_id, f"{self.addr};1").to_ext())
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        resp = await self.call(controller, RequestCode.CONTROLLER_REGISTER_BROKER,
                               RegisterBrokerToControllerRequestHeader("c", "g", self.broker_id, self.addr).to_ext())
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        await self.beat(controller)

    async def beat(self, controller: str, max_offset: int = 0) -> None:
        resp = await self.call(controller, RequestCode.BROKER_HEARTBEAT, BrokerHeartbeatRequestHeader(
            "c", self.addr, "g", self.broker_id, 1, max_offset, max_offset, 10_000, 0).to_ext())
        assert resp.code == ResponseCode.SUCCESS, resp.remark


async def cli(namesrv: str, *args: str, code: int = 0) -> str:
    """The admin command's output (stdout, or stderr when it is expected to fail with ``code``)."""
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "broker_store", *args, "-n", namesrv,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate()
    assert proc.returncode == code, (out + err).decode()
    return (out if code == 0 else err).decode()


def test_a_group_joins_elects_and_fails_over_through_the_name_servers_controller(tmp_path: Path) -> None:
    async def scenario() -> None:
        settings = ControllerSettings(state_dir=tmp_path / "controller", heartbeat_timeout_ms=10_000,
                                      scan_interval_ms=50)
        namesrv = NamesrvServer(NamesrvConfig(listen=f"{HOST}:{free_port()}", controller=settings))
        await namesrv.start()
        brokers = [FakeBroker() for _ in range(3)]
        try:
            for b in brokers:
                await b.server.start()
                await b.join(namesrv.addr)
            assert [b.broker_id for b in brokers] == [1, 2, 3]
            first = await brokers[0].call(namesrv.addr, RequestCode.CONTROLLER_ELECT_MASTER,
                                          ElectMasterRequestHeader("c", "g", 1).to_ext())
            header = ElectMasterResponseHeader.from_ext(first.ext_fields)
            assert (first.code, header.master_broker_id, header.master_epoch) == (ResponseCode.SUCCESS, 1, 1)
            alter = await brokers[0].call(namesrv.addr, RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET,
                                          AlterSyncStateSetRequestHeader("g", 1, 1).to_ext(),
                                          SyncStateSet(frozenset({1, 3}), 1).encode())
            assert alter.code == ResponseCode.SUCCESS, alter.remark
            status = json.loads(await cli(namesrv.addr, "controller-status", "--json"))
            assert (status["listed"], status["answering"]) == (1, 1), status
            [group] = status["groups"]
            assert [group[c] for c in ("group", "master", "masterEpoch", "syncStateSetEpoch")] == ["g", "1", "1", "2"]
            assert sorted(r.split("@")[0] for r in group["inSync"].split(",")) == ["1", "3"], status
            human = await cli(namesrv.addr, "controller-status")  # for people: lines and a table, no tabs
            assert "controllers: 1 listed, 1 answering" in human and "\t" not in human, human

            await brokers[0].client.close()  # the primary's connection closes: inactive at once
            for _ in range(100):
                if len(brokers[2].notified) == 2:
                    break
                await asyncio.sleep(0.05)
            assert [(n.master_broker_id, n.master_epoch) for n in brokers[2].notified] == [(1, 1), (3, 2)]
            [group] = json.loads(await cli(namesrv.addr, "controller-status", "--json"))["groups"]
            assert [group[c] for c in ("group", "master", "masterEpoch", "syncStateSetEpoch")] == ["g", "3", "2", "3"]
            assert group["inSync"].startswith("3@"), group

            refused = await cli(namesrv.addr, "elect", "-b", "g", "-c", "c", "--prefer", "2", code=1)
            assert "ELECT_MASTER_FAILED" in refused or "failed to elect" in refused, refused  # 2 is not in {3}
            still = await cli(namesrv.addr, "elect", "-b", "g", "-c", "c", "--prefer", "3")
            assert "master 3" in still and "unchanged" in still, still
        finally:
            for b in brokers:
                await b.client.close()
                await b.server.stop()
            await namesrv.stop()

    asyncio.run(scenario())


def test_controller_config_shows_and_changes_the_embedded_controllers_settings(tmp_path: Path) -> None:
    """``controller-config``: GET_CONTROLLER_CONFIG shows the settings by RocketMQ's names; an update of
    enableElectUncleanMaster is in force at the next scan (the replica outside the SyncStateSet of a dead
    primary is elected); a setting that cannot change at runtime is refused by name."""
    async def scenario() -> None:
        settings = ControllerSettings(state_dir=tmp_path / "controller", heartbeat_timeout_ms=10_000,
                                      scan_interval_ms=50)
        namesrv = NamesrvServer(NamesrvConfig(listen=f"{HOST}:{free_port()}", controller=settings))
        await namesrv.start()
        assert namesrv.controller is not None
        controller = namesrv.controller.controller
        brokers = [FakeBroker() for _ in range(2)]
        try:
            for b in brokers:
                await b.server.start()
                await b.join(namesrv.addr)
            first = await brokers[0].call(namesrv.addr, RequestCode.CONTROLLER_ELECT_MASTER,
                                          ElectMasterRequestHeader("c", "g", 1).to_ext())
            assert first.code == ResponseCode.SUCCESS, first.remark  # SyncStateSet {1}: 2 is not in sync
            shown = await cli(namesrv.addr, "controller-config")
            assert f"# controller {namesrv.addr}\n" in shown and "enableElectUncleanMaster=false\n" in shown, shown
            assert "scanInactiveMasterInterval=50\n" in shown, shown

            await brokers[0].client.close()  # the primary is gone; CP: no SyncStateSet member to elect
            for _ in range(100):
                group, _ = await controller.read_group("g")
                if group is not None and group.master_id is None:
                    break
                await asyncio.sleep(0.05)
            assert group is not None and group.master_id is None, group
            assert [(n.master_broker_id, n.master_epoch) for n in brokers[1].notified] == [(1, 1)]

            refused = await cli(namesrv.addr, "controller-config", "--set", "controllerStorePath=/elsewhere", code=1)
            assert "controllerStorePath" in refused and "at runtime" in refused, refused
            changed = await cli(namesrv.addr, "controller-config", "--set", "enableElectUncleanMaster=true")
            assert "enableElectUncleanMaster=true\n" in changed, changed
            for _ in range(100):
                if len(brokers[1].notified) == 2:
                    break
                await asyncio.sleep(0.05)
            assert [(n.master_broker_id, n.master_epoch) for n in brokers[1].notified] == [(1, 1), (2, 3)]
        finally:
            for b in brokers:
                await b.client.close()
                await b.server.stop()
            await namesrv.stop()

    asyncio.run(scenario())

"""GET_CONTROLLER_CONFIG / UPDATE_CONTROLLER_CONFIG without sockets: the properties text
(``protocol.config_text``), the update rules (``controller.runtime_settings``, every refusal naming its key),
``Controller.update_settings`` taking effect on the next decision (heartbeat expiry, unclean election, the scan
interval) with time advanced by hand, and the processor's two handlers."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from broker_store.clock import ManualClock
from broker_store.controller.file_store import FileStateStore
from broker_store.controller.processor import ControllerProcessor
from broker_store.controller.replicas import BrokerLiveInfo, Outcome
from broker_store.controller.runtime_settings import (
    SettingsUpdateRefused,
    settings_properties,
    updated_settings,
)
from broker_store.controller.service import Controller
from broker_store.controller.settings import ControllerSettings, EtcdSettings
from broker_store.controller.state_store import StateStore
from broker_store.net.server import Connection, RemotingServer
from broker_store.protocol.codes import RequestCode
from broker_store.protocol.codes import ResponseCode as R
from broker_store.protocol.config_text import decode_config, encode_config
from broker_store.protocol.errors import ConfigError, ProtocolError
from broker_store.protocol.frame import RemotingCommand

SETTINGS = ControllerSettings(heartbeat_timeout_ms=2000, scan_interval_ms=500)

# -- the properties text ------------------------------------------------------------------------------------


def test_properties_text_reads_java_syntax() -> None:
    text = (b"# a comment\n! another\n\n  enableElectUncleanMaster = true\nscanInactiveMasterInterval:250\n"
            b"notifyBrokerRoleChanged false\nlong=a\\\n    b\\\\\nesc\\=aped\\ key=\\u00e9\\tx\r\nlast=1\nlast=2")
    assert decode_config(text) == {"enableElectUncleanMaster": "true", "scanInactiveMasterInterval": "250",
                                   "notifyBrokerRoleChanged": "false", "long": "ab\\", "esc=aped key": "\u00e9\tx",
                                   "last": "2"}
    assert decode_config(b"") == {}


@pytest.mark.parametrize("entries", [
    {"a": "1", "b": ""},
    {"key with = and : and spaces": " leading blank, #hash, !bang, \\ back\nslash\t\u00e9"},
    {"#notacomment": "=starts with equals", "!x": ":"},
])
def test_properties_text_round_trips(entries: dict[str, str]) -> None:
    assert decode_config(encode_config(entries)) == entries


@pytest.mark.parametrize("body, problem", [
    (b"\xff=1", "not UTF-8"),
    (b"k=\\u12", "malformed \\uXXXX"),
    (b"ok=1\n=value", "line 2: no key"),
])
def test_malformed_properties_text_is_refused_with_the_line(body: bytes, problem: str) -> None:
    with pytest.raises(ProtocolError, match=problem.replace("\\", "\\\\")):
        decode_config(body)


# -- the update rules ---------------------------------------------------------------------------------------


def test_the_settings_show_rocketmq_names_and_java_booleans() -> None:
    shown = settings_properties(ControllerSettings(state_dir=Path("/var/c")))
    assert shown == {"enableElectUncleanMaster": "false", "controllerHeartBeatTimeoutMills": "3000",
                     "scanInactiveMasterInterval": "500", "notifyBrokerRoleChanged": "true",
                     "controllerStorePath": "/var/c"}
    etcd = settings_properties(ControllerSettings(etcd=EtcdSettings.model_validate(
        {"endpoints": ["http://127.0.0.1:2379", "http://127.0.0.1:2380/"], "prefix": "p/"})))
    assert "controllerStorePath" not in etcd  # unset: left out, as RocketMQ leaves out nulls
    assert (etcd["etcdEndpoints"], etcd["etcdPrefix"], etcd["etcdLeaseTtlSeconds"]) == (
        "http://127.0.0.1:2379;http://127.0.0.1:2380", "p/", "3")


def test_runtime_settings_change_by_rocketmq_key_or_field_name() -> None:
    new = updated_settings(SETTINGS, {"enableElectUncleanMaster": "true", "scan_interval_ms": " 250 ",
                                      "controllerHeartBeatTimeoutMills": "9000", "notifyBrokerRoleChanged": "false"})
    assert (new.enable_elect_unclean_master, new.scan_interval_ms, new.heartbeat_timeout_ms,
            new.notify_broker_role_changed) == (True, 250, 9000, False)
    assert updated_settings(SETTINGS, {}) is SETTINGS
    assert updated_settings(new, settings_properties(new)) == new  # GET's answer is a valid update


@pytest.mark.parametrize("update, code, names", [
    ({"enableElectUncleanMastr": "true"}, R.CONTROLLER_INVALID_REQUEST, ["'enableElectUncleanMastr'", "unknown"]),
    ({"controllerStorePath": "/tmp/x"}, R.NO_PERMISSION, ["'controllerStorePath'", "state_dir", "at runtime"]),
    ({"state_dir": "/tmp/x"}, R.NO_PERMISSION, ["'state_dir'", "at runtime"]),
    ({"etcdEndpoints": "http://h:1"}, R.NO_PERMISSION, ["'etcdEndpoints'", "etcd"]),
    ({"etcd": "x"}, R.CONTROLLER_INVALID_REQUEST, ["'etcd'", "unknown"]),
    ({"scanInactiveMasterInterval": "5", "scan_interval_ms": "50"}, R.CONTROLLER_INVALID_REQUEST,
     ["scan_interval_ms given twice"]),
    ({"controllerHeartBeatTimeoutMills": "50"}, R.CONTROLLER_INVALID_REQUEST,
     ["'controllerHeartBeatTimeoutMills'", "heartbeat_timeout_ms", "greater than or equal to 100"]),
    ({"enableElectUncleanMaster": "maybe"}, R.CONTROLLER_INVALID_REQUEST,
     ["'enableElectUncleanMaster'", "enable_elect_unclean_master", "'maybe'"]),
    ({"scanInactiveMasterInterval": "1.5"}, R.CONTROLLER_INVALID_REQUEST, ["scan_interval_ms", "integer"]),
])
def test_refusals_name_the_key(update: dict[str, str], code: int, names: list[str]) -> None:
    with pytest.raises(SettingsUpdateRefused) as refused:
        updated_settings(SETTINGS, {"notifyBrokerRoleChanged": "false"} | update)
    assert refused.value.code == code
    for name in names:
        assert name in str(refused.value), str(refused.value)


# -- the controller: leader only, and in force at the next decision -----------------------------------------


def addr(broker_id: int) -> str:
    return f"127.0.0.1:{20000 + broker_id}"


def beat(controller: Controller, broker_id: int, max_offset: int = 0) -> None:
    controller.heartbeat("c", "g", BrokerLiveInfo(broker_id, addr(broker_id), 1, max_offset))


async def two_brokers_1_primary(controller: Controller) -> None:
    """Brokers 1 (primary, SyncStateSet {1}) and 2 (replica, not in sync), both alive."""
    for broker_id in (1, 2):
        assert (await controller.apply_broker_id("c", "g", broker_id, f"{addr(broker_id)};1")).ok
        assert (await controller.register_broker("g", broker_id, addr(broker_id))).ok
        beat(controller, broker_id)
    assert (await controller.elect_master("g", requester=1)).ok


def test_an_update_is_in_force_at_the_next_expiry_and_election(tmp_path: Path) -> None:
    async def scenario() -> None:
        clock = ManualClock()
        controller = Controller(FileStateStore(tmp_path / "state.json"), SETTINGS, clock=clock)
        await two_brokers_1_primary(controller)
        clock.advance(1.0)
        beat(controller, 2)
        assert (await controller.update_settings({"controllerHeartBeatTimeoutMills": "900"})).ok
        # 1 expired under the new timeout (1 s > 0.9 s; the old 2 s would keep it); 2 is no SyncStateSet member
        assert [o.code for o in await controller.scan_once()] == [R.CONTROLLER_MASTER_NOT_AVAILABLE]
        assert set(controller.live.alive("g")) == {2}
        assert await controller.scan_once() == []  # CP: the group waits for a SyncStateSet member
        group, _ = await controller.read_group("g")
        assert group is not None and group.master_id is None

        assert (await controller.update_settings({"enableElectUncleanMaster": "true"})).ok
        assert [o.code for o in await controller.scan_once()] == [R.SUCCESS]
        group, _ = await controller.read_group("g")
        assert group is not None and (group.master_id, group.master_epoch) == (2, 3)

        refused = await controller.update_settings({"enableElectUncleanMaster": "true", "state_dir": "/x"})
        assert (refused.code, "'state_dir'" in refused.remark) == (R.NO_PERMISSION, True)
        assert controller.settings.heartbeat_timeout_ms == 900  # nothing of a refused update is applied

    asyncio.run(scenario())


def test_a_changed_scan_interval_retimes_the_running_scan(tmp_path: Path) -> None:
    async def scenario() -> None:
        clock = ManualClock()
        slow = ControllerSettings(heartbeat_timeout_ms=2000, scan_interval_ms=60_000)
        controller = Controller(FileStateStore(tmp_path / "state.json"), slow, clock=clock)
        scans: list[float] = []

        async def counted() -> list[Outcome]:  # when the loop scans is the point here, not what a scan does
            scans.append(clock.monotonic())
            return []

        controller.scan_once = counted  # type: ignore[method-assign]

        async def settle() -> None:
            for _ in range(20):
                await asyncio.sleep(0)

        controller.start()
        try:
            await settle()
            clock.advance(1.0)
            await settle()
            assert scans == []  # 59 s to go
            assert (await controller.update_settings({"scanInactiveMasterInterval": "500"})).ok
            await settle()
            assert scans == [1001.0]  # overdue under the new interval: at once
            clock.advance(0.5)
            await settle()
            assert scans == [1001.0, 1001.5]
        finally:
            await controller.stop()

    asyncio.run(scenario())


class _Follower(FileStateStore):
    def campaign(self) -> bool:
        return False

    def leader(self) -> str | None:
        return "other:1"


def test_a_follower_refuses_updates_and_keeps_its_settings(tmp_path: Path) -> None:
    async def scenario() -> None:
        store: StateStore = _Follower(tmp_path / "state.json", "me:1")
        controller = Controller(store, SETTINGS, clock=ManualClock())
        out = await controller.update_settings({"enableElectUncleanMaster": "true"})
        assert out.code == R.CONTROLLER_NOT_LEADER and "other:1" in out.remark
        assert controller.settings == SETTINGS
        bad = await controller.update_settings({"nope": "1"})  # a bad request is refused as such anywhere
        assert bad.code == R.CONTROLLER_INVALID_REQUEST

    asyncio.run(scenario())


# -- the processor ------------------------------------------------------------------------------------------


def test_the_processor_answers_and_applies_properties_bodies(tmp_path: Path) -> None:
    async def scenario() -> None:
        controller = Controller(FileStateStore(tmp_path / "state.json"), SETTINGS, clock=ManualClock())
        processor = ControllerProcessor(controller, address="127.0.0.1:9876")
        handlers = processor.handlers()
        conn = Connection(RemotingServer(handlers[RequestCode.GET_CONTROLLER_CONFIG]))

        async def call(code: int, body: bytes = b"") -> RemotingCommand:
            return await handlers[code](RemotingCommand(code=code, body=body), conn)

        got = await call(RequestCode.GET_CONTROLLER_CONFIG)
        assert got.code == R.SUCCESS
        assert decode_config(got.body)["controllerHeartBeatTimeoutMills"] == "2000"

        done = await call(RequestCode.UPDATE_CONTROLLER_CONFIG, b"enableElectUncleanMaster=true\n")
        assert done.code == R.SUCCESS, done.remark
        assert controller.settings.enable_elect_unclean_master
        assert decode_config((await call(RequestCode.GET_CONTROLLER_CONFIG)).body)["enableElectUncleanMaster"] \
            == "true"
        assert (await call(RequestCode.UPDATE_CONTROLLER_CONFIG)).code == R.SUCCESS  # no body: no change

        refused = await call(RequestCode.UPDATE_CONTROLLER_CONFIG, b"controllerStorePath=/elsewhere")
        assert refused.code == R.NO_PERMISSION and "controllerStorePath" in (refused.remark or "")
        garbled = await call(RequestCode.UPDATE_CONTROLLER_CONFIG, b"x=\\uZZZZ")
        assert garbled.code == R.CONTROLLER_INVALID_REQUEST and "line 1" in (garbled.remark or "")
        await processor.close()

    asyncio.run(scenario())


def test_a_bad_controller_credentials_file_stops_the_start_naming_the_key(tmp_path: Path) -> None:
    """``controller.acl_credentials_file`` is read when the processor is built: a missing or malformed file is a
    ConfigError naming the key and the file, never its content; a good one is shown, not runtime-changeable."""
    bad = tmp_path / "controller-credentials.yml"
    bad.write_text("accessKey: controllerAK01\nsecretKey: the-secret\npassword: x\n")
    bad.chmod(0o600)
    controller = Controller(FileStateStore(tmp_path / "state.json"),
                            SETTINGS.model_copy(update={"acl_credentials_file": bad}), clock=ManualClock())
    with pytest.raises(ConfigError, match="controller.acl_credentials_file: .*unknown key") as refused:
        ControllerProcessor(controller, address="127.0.0.1:9876")
    assert "the-secret" not in str(refused.value)
    missing = Controller(FileStateStore(tmp_path / "state2.json"),
                         SETTINGS.model_copy(update={"acl_credentials_file": tmp_path / "none.yml"}),
                         clock=ManualClock())
    with pytest.raises(ConfigError, match="controller.acl_credentials_file: cannot read"):
        ControllerProcessor(missing, address="127.0.0.1:9876")
    bad.write_text("accessKey: controllerAK01\nsecretKey: the-secret\n")
    good = Controller(FileStateStore(tmp_path / "state3.json"),
                      SETTINGS.model_copy(update={"acl_credentials_file": bad}), clock=ManualClock())
    ControllerProcessor(good, address="127.0.0.1:9876")
    assert settings_properties(good.settings)["controllerAclCredentialsFile"] == str(bad)

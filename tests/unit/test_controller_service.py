"""broker_store.controller.service: elections driven by heartbeats and the scan over a real file state store,
time advanced by hand (no sockets, no sleeps)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from broker_store.clock import ManualClock
from broker_store.controller.file_store import FileStateStore
from broker_store.controller.processor import ControllerProcessor
from broker_store.controller.replicas import BrokerLiveInfo, GroupState
from broker_store.controller.server import EmbeddedController
from broker_store.controller.service import Controller
from broker_store.controller.settings import ControllerSettings
from broker_store.controller.state_store import Versioned
from broker_store.protocol.codes import ResponseCode as R

SETTINGS = ControllerSettings(heartbeat_timeout_ms=2000, scan_interval_ms=500)


def addr(broker_id: int) -> str:
    return f"127.0.0.1:{20000 + broker_id}"


async def join(controller: Controller, broker_id: int) -> None:
    """A broker's start in controller mode: get an id, apply it, register, heartbeat."""
    assert (await controller.next_broker_id("c", "g")).broker_id == broker_id
    assert (await controller.apply_broker_id("c", "g", broker_id, f"{addr(broker_id)};1")).ok
    assert (await controller.register_broker("g", broker_id, addr(broker_id))).ok
    beat(controller, broker_id)


def beat(controller: Controller, broker_id: int, epoch: int = 1, max_offset: int = 0) -> None:
    controller.heartbeat("c", "g", BrokerLiveInfo(broker_id, addr(broker_id), epoch, max_offset))


def test_a_silent_primary_is_replaced_after_the_heartbeat_timeout_and_the_group_is_notified(tmp_path: Path) -> None:
    async def scenario() -> None:
        clock = ManualClock()
        notified: list[GroupState] = []

        async def notify(group: GroupState, alive: object) -> None:
            notified.append(group)

        controller = Controller(FileStateStore(tmp_path / "state.json"), SETTINGS, clock=clock, notify=notify)
        for broker_id in (1, 2, 3):
            await join(controller, broker_id)
        first = await controller.elect_master("g", requester=1)
        assert first.ok and first.state is not None and first.state.master_id == 1
        assert (await controller.alter_sync_state_set("g", 1, 1, frozenset({1, 2}), 1)).ok

        for _ in range(3):  # 2 and 3 keep heartbeating; 1 froze
            clock.advance(0.9)
            beat(controller, 2, max_offset=50)
            beat(controller, 3, max_offset=90)
            assert [o.code for o in await controller.scan_once()] == ([] if clock.monotonic() - 1000 < 2.1 else
                                                                        [R.SUCCESS])
        group, _ = await controller.read_group("g")
        assert group is not None and group.master_id == 2  # 3 has more data but is not in the SyncStateSet
        assert (group.master_epoch, group.sync_state_set, group.sync_state_set_epoch) == (2, frozenset({2}), 3)
        assert [g.master_id for g in notified] == [1, 2]
        assert await controller.scan_once() == []  # nothing more to do

    asyncio.run(scenario())


def test_the_embedded_controller_notifies_through_its_processor(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """EmbeddedController builds the Controller before the processor that owns the sockets and hands it the
    processor's notify (Controller.set_notify)."""
    notified: list[int | None] = []

    async def notify(self: ControllerProcessor, group: GroupState, alive: object) -> None:
        notified.append(group.master_id)

    monkeypatch.setattr(ControllerProcessor, "notify", notify)

    async def scenario() -> None:
        embedded = EmbeddedController(SETTINGS, address="127.0.0.1:9876", clock=ManualClock(),
                                      store=FileStateStore(tmp_path / "state.json"))
        await join(embedded.controller, 1)
        assert (await embedded.controller.elect_master("g", requester=1)).ok
        await embedded.processor.close()

    asyncio.run(scenario())
    assert notified == [1]


def test_a_closed_connection_makes_the_primary_inactive_at_once(tmp_path: Path) -> None:
    async def scenario() -> None:
        controller = Controller(FileStateStore(tmp_path / "state.json"), SETTINGS, clock=ManualClock())
        for broker_id in (1, 2):
            await join(controller, broker_id)
        await controller.elect_master("g", requester=1)
        assert (await controller.alter_sync_state_set("g", 1, 1, frozenset({1, 2}), 1)).ok
        controller.broker_closed(addr(1))  # kill -9: no timeout to wait for
        outcomes = await controller.scan_once()
        assert [(o.code, o.state and o.state.master_id) for o in outcomes] == [(R.SUCCESS, 2)]

    asyncio.run(scenario())


def test_no_live_candidate_clears_the_master_until_one_returns(tmp_path: Path) -> None:
    async def scenario() -> None:
        clock = ManualClock()
        controller = Controller(FileStateStore(tmp_path / "state.json"), SETTINGS, clock=clock)
        for broker_id in (1, 2):
            await join(controller, broker_id)
        await controller.elect_master("g", requester=1)  # SyncStateSet {1}: 2 never caught up
        controller.broker_closed(addr(1))
        assert [o.code for o in await controller.scan_once()] == [R.CONTROLLER_MASTER_NOT_AVAILABLE]
        group, _ = await controller.read_group("g")
        assert group is not None and group.master_id is None and group.sync_state_set == frozenset({1})
        assert await controller.scan_once() == []  # 2 alone is not eligible without unclean election
        beat(controller, 1, epoch=1, max_offset=10)  # the old primary returns
        outcomes = await controller.scan_once()
        assert [(o.code, o.state and o.state.master_id) for o in outcomes] == [(R.SUCCESS, 1)]

    asyncio.run(scenario())


def test_the_state_survives_a_controller_restart_and_a_lost_race_is_decided_again(tmp_path: Path) -> None:
    async def scenario() -> None:
        store = FileStateStore(tmp_path / "state.json")
        controller = Controller(store, SETTINGS, clock=ManualClock())
        for broker_id in (1, 2):
            await join(controller, broker_id)
        await controller.elect_master("g", requester=1)
        store.close()
        again = Controller(FileStateStore(tmp_path / "state.json"), SETTINGS, clock=ManualClock())
        group, version = await again.read_group("g")
        assert group is not None and group.master_id == 1 and version is not None

        class Racing(FileStateStore):
            """Another controller writes the group between this one's read and its write, once."""
            raced = False

            def compare_and_set(self, key: str, expected_version: int | None, value: bytes) -> bool:
                if not self.raced:
                    self.raced = True
                    current = self.get(key)
                    assert current is not None
                    other = GroupState.from_json(current.value)
                    super().compare_and_set(key, current.version, other.to_json())
                return super().compare_and_set(key, expected_version, value)

        again.store.close()
        racing = Controller(Racing(tmp_path / "state.json"), SETTINGS, clock=ManualClock())
        beat(racing, 1)
        beat(racing, 2)
        outcome = await racing.alter_sync_state_set("g", 1, 1, frozenset({1, 2}), 1)
        assert outcome.ok  # the lost round was decided again on the new version
        found = racing.store.get("controller/groups/g")
        assert isinstance(found, Versioned) and GroupState.from_json(found.value).sync_state_set == frozenset({1, 2})

    asyncio.run(scenario())

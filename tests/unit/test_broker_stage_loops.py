"""broker.stage_loops: the metadata sync runs only while unfenced REPLICA, the schedule service only while unfenced
PRIMARY, each stops at the fence (the schedule persisting its delay offsets) and none starts once the broker stops;
broker.request_routing's answer to a code without a processor."""

from __future__ import annotations

import asyncio
from typing import cast

from broker_store.broker.metadata_sync import MetadataSync
from broker_store.broker.request_routing import unrouted
from broker_store.broker.role import RoleStage
from broker_store.broker.schedule import ScheduleService
from broker_store.broker.stage_loops import StageLoops
from broker_store.protocol.codes import ResponseCode
from broker_store.protocol.frame import RemotingCommand


class Loop:
    """A loop that records whether it runs."""

    def __init__(self) -> None:
        self.running = False

    async def run(self) -> None:
        self.running = True
        try:
            await asyncio.Event().wait()
        finally:
            self.running = False


def test_each_loop_runs_only_in_its_unfenced_stage() -> None:
    async def scenario() -> None:
        sync, schedule, persisted = Loop(), Loop(), []
        stopping = False
        loops = StageLoops(cast(MetadataSync, sync), cast(ScheduleService, schedule),
                           persist_delay_offsets=lambda: persisted.append(1), stopping=lambda: stopping)

        async def follow(stage: RoleStage) -> tuple[bool, bool]:
            loops.follow(stage)
            for _ in range(3):
                await asyncio.sleep(0)  # let started tasks run and cancelled ones unwind
            return sync.running, schedule.running

        assert await follow(RoleStage.REPLICA) == (True, False)
        assert await follow(RoleStage.PROMOTING) == (False, False) and persisted == []
        assert await follow(RoleStage.PRIMARY) == (False, True)
        assert await follow(RoleStage.DEMOTING) == (False, False) and persisted == [1]
        assert await follow(RoleStage.REPLICA) == (True, False)
        tasks = loops.detach()
        assert len(tasks) == 1
        stopping = True
        assert await follow(RoleStage.PRIMARY) == (True, False), "nothing starts once the broker stops"
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    asyncio.run(scenario())


def test_a_code_without_a_processor_is_unavailable_while_starting_or_stopping_else_unsupported() -> None:
    cmd = RemotingCommand(code=9999)
    assert unrouted(cmd, broker_name="b", started=False, stopping=False).code == ResponseCode.SERVICE_NOT_AVAILABLE
    assert unrouted(cmd, broker_name="b", started=True, stopping=True).remark == "broker b is stopping"
    assert unrouted(cmd, broker_name="b", started=True, stopping=False).code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED

"""The broker's loops that follow its role stage: the metadata sync runs while unfenced REPLICA, the schedule
service (delivery of delayed messages) while unfenced PRIMARY; each starts at an unfenced edge and stops at the
fence.

Owned by ``broker.server.BrokerServer``, which calls ``follow`` at start and from its ``RoleState`` listener and
``detach`` when it stops. Runs on the event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from broker_store.broker.metadata_sync import MetadataSync
from broker_store.broker.role import RoleStage
from broker_store.broker.schedule import ScheduleService


class StageLoops:
    """Starts and cancels the two stage-bound loops. ``persist_delay_offsets`` runs when the schedule service
    stops at a fence; ``stopping()`` true means no loop starts any more."""

    def __init__(self, metadata_sync: MetadataSync, schedule: ScheduleService, *,
                 persist_delay_offsets: Callable[[], None], stopping: Callable[[], bool]) -> None:
        self._metadata_sync = metadata_sync
        self._schedule = schedule
        self._persist_delay_offsets = persist_delay_offsets
        self._stopping = stopping
        self._metadata_sync_task: asyncio.Task[None] | None = None
        self._schedule_task: asyncio.Task[None] | None = None

    def follow(self, stage: RoleStage) -> None:
        """Start or stop each loop for ``stage``."""
        self._metadata_sync_for(stage)
        self._schedule_for(stage)

    def detach(self) -> list[asyncio.Task[None]]:
        """The running loops, forgotten here: the stopping broker cancels them with its other tasks."""
        tasks = [task for task in (self._metadata_sync_task, self._schedule_task) if task is not None]
        self._metadata_sync_task = self._schedule_task = None
        return tasks

    def _metadata_sync_for(self, stage: RoleStage) -> None:
        """Run the metadata sync while unfenced REPLICA, and only then: a promotion stops it at the fence, so no
        copy of the old primary's tables lands after."""
        if stage is RoleStage.REPLICA and self._metadata_sync_task is None and not self._stopping():
            self._metadata_sync_task = asyncio.get_running_loop().create_task(self._metadata_sync.run())
        elif stage is not RoleStage.REPLICA and self._metadata_sync_task is not None:
            self._metadata_sync_task.cancel()
            self._metadata_sync_task = None

    def _schedule_for(self, stage: RoleStage) -> None:
        """Run the schedule service while unfenced PRIMARY, and only then: it writes, so it starts at a
        promotion's unfenced edge and stops at a demotion's fence. A replica keeps the primary's delay offsets
        (metadata sync), so stopping persists the table first."""
        if stage is RoleStage.PRIMARY and self._schedule_task is None and not self._stopping():
            self._schedule_task = asyncio.get_running_loop().create_task(self._schedule.run())
        elif stage is not RoleStage.PRIMARY and self._schedule_task is not None:
            self._schedule_task.cancel()
            self._schedule_task = None
            self._persist_delay_offsets()

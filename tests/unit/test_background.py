"""cancel_and_wait: how the servers stop their background loops."""

from __future__ import annotations

import asyncio
import logging

import pytest

from broker_store.background import cancel_and_wait


def test_running_loops_are_cancelled_and_a_failed_one_is_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    async def forever() -> None:
        await asyncio.Event().wait()

    async def broken() -> None:
        raise RuntimeError("loop bug")

    async def main() -> list[asyncio.Task[None]]:
        tasks = [asyncio.create_task(forever()), asyncio.create_task(broken(), name="broken-loop")]
        await asyncio.sleep(0)
        await cancel_and_wait(tasks)
        await cancel_and_wait([])
        return tasks

    with caplog.at_level(logging.ERROR, logger="broker_store.background"):
        running, failed = asyncio.run(main())
    assert running.cancelled() and isinstance(failed.exception(), RuntimeError)
    assert "broken-loop had failed" in caplog.text


def test_the_callers_own_cancellation_propagates() -> None:
    async def stubborn() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            await asyncio.Event().wait()  # ignores the first cancellation

    async def main() -> None:
        loop_task = asyncio.create_task(stubborn())
        await asyncio.sleep(0)
        stopper = asyncio.create_task(cancel_and_wait([loop_task]))
        await asyncio.sleep(0)
        stopper.cancel()
        with pytest.raises(asyncio.CancelledError):
            await stopper
        loop_task.cancel()

    asyncio.run(main())

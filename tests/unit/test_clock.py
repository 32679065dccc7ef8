"""broker_store.clock: ManualClock drives sleepers, waits and stop signals only when advanced."""

from __future__ import annotations

import asyncio
import threading

from broker_store.clock import SYSTEM_CLOCK, ManualClock, StopSignal


def test_manual_sleep_and_wait_for_end_when_advanced() -> None:
    clock = ManualClock()

    async def main() -> None:
        sleeper = asyncio.ensure_future(clock.sleep(5))
        never: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiter = asyncio.ensure_future(clock.wait_for(never, 3))
        await asyncio.sleep(0.01)
        clock.advance(2.9)
        await asyncio.sleep(0.01)
        assert not sleeper.done() and not waiter.done()
        clock.advance(0.1)
        assert await waiter is False and not never.done()
        clock.advance(2)
        await sleeper
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        ready.set_result(None)
        assert await clock.wait_for(ready, 10) is True

    asyncio.run(main())


def test_stop_signal_sleeps_on_the_clock_and_stops_at_once() -> None:
    clock = ManualClock()
    stop = StopSignal(clock)
    results: list[bool] = []
    thread = threading.Thread(target=lambda: results.extend([stop.sleep(10), stop.sleep(10)]))
    thread.start()
    clock.advance(10)  # the first sleep ends; the second needs another 10 s or a stop
    stop.stop()
    thread.join(5)
    assert not thread.is_alive() and results[-1] is False and stop.is_set()


def test_system_clock_wait_for_cancels_a_timed_out_coroutine() -> None:
    async def main() -> None:
        event = asyncio.Event()
        assert await SYSTEM_CLOCK.wait_for(event.wait(), 0.01) is False
        await asyncio.sleep(0)  # the cancellation is delivered
        assert len(asyncio.all_tasks()) == 1  # only main: the waiter task was cancelled

    asyncio.run(main())

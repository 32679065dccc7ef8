"""broker_store.clock: ManualClock drives sleepers, waits, timeouts, timers and stop signals only when advanced."""

from __future__ import annotations

import asyncio
import pickle
import threading

import pytest

from broker_store.client.producer import BrokerFaultTable
from broker_store.clock import SYSTEM_CLOCK, ManualClock, StopSignal, SystemClock, ThreadClock


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


def test_manual_block_holds_the_thread_until_the_clock_has_moved_that_far() -> None:
    clock = ManualClock()
    thread_side: ThreadClock = clock  # the connectors' retry loops read it through this shape
    started = clock.monotonic()
    done = threading.Event()

    def blocked() -> None:
        thread_side.block(5)
        done.set()

    thread = threading.Thread(target=blocked)
    thread.start()
    while not done.is_set():
        assert clock.monotonic() - started < 60, "block never returned"
        clock.advance(0.5)
        done.wait(0.01)
    thread.join(5)
    assert clock.monotonic() - started >= 5


def test_system_clock_block_is_a_thread_sleep() -> None:
    thread_side: ThreadClock = SYSTEM_CLOCK
    thread_side.block(0)
    thread_side.block(-1)  # a spent budget's negative delay returns at once


def test_system_clock_wait_for_cancels_a_timed_out_coroutine() -> None:
    async def main() -> None:
        event = asyncio.Event()
        assert await SYSTEM_CLOCK.wait_for(event.wait(), 0.01) is False
        await asyncio.sleep(0)  # the cancellation is delivered
        assert len(asyncio.all_tasks()) == 1  # only main: the waiter task was cancelled

    asyncio.run(main())


async def _settle() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


def test_manual_timeout_raises_only_once_advanced_past_it() -> None:
    clock = ManualClock()

    async def main() -> None:
        never: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        async def guarded() -> None:
            async with clock.timeout(3):
                await never

        task = asyncio.ensure_future(guarded())
        await _settle()
        clock.advance(2.9)
        await _settle()
        assert not task.done()
        clock.advance(0.1)
        await _settle()
        assert isinstance(task.exception(), TimeoutError) and never.cancelled()

        errors: list[dict[str, object]] = []
        asyncio.get_running_loop().set_exception_handler(lambda _loop, context: errors.append(context))
        async with clock.timeout(3):  # a block that ends in time leaves nothing armed behind it
            await asyncio.sleep(0)
        async with clock.timeout(3):
            clock.advance(3)
            await asyncio.sleep(0)  # the timer resolves in this turn, the block ends before its expiry runs
        clock.advance(10)
        await _settle()
        assert errors == []
        with pytest.raises(TimeoutError):
            async with clock.timeout(0):  # already due: the block's first await is cancelled
                await asyncio.get_running_loop().create_future()

    asyncio.run(main())


def test_manual_call_later_runs_when_due_and_not_once_cancelled() -> None:
    clock = ManualClock()
    ran: list[str] = []

    async def main() -> None:
        clock.call_later(2, lambda: ran.append("due"))
        dropped = clock.call_later(1, lambda: ran.append("dropped"))
        clock.call_later(0, lambda: ran.append("now"))
        await _settle()
        assert ran == ["now"]
        dropped.cancel()
        clock.advance(1.9)
        await _settle()
        assert ran == ["now"]
        clock.advance(0.1)
        await _settle()
        assert ran == ["now", "due"]

    asyncio.run(main())


def test_system_clock_timeout_and_call_later_are_asyncio_s() -> None:
    async def main() -> None:
        with pytest.raises(TimeoutError):
            async with SYSTEM_CLOCK.timeout(0.01):
                await asyncio.Event().wait()
        fired = asyncio.Event()
        SYSTEM_CLOCK.call_later(0.01, fired.set)
        await asyncio.wait_for(fired.wait(), 5)
        SYSTEM_CLOCK.call_later(0, lambda: None).cancel()

    asyncio.run(main())


def test_the_clients_time_is_the_one_clock() -> None:
    # broker_store.client takes the Clock: a ManualClock drives the producer's fault isolation with no sleep.
    clock = ManualClock()
    faults = BrokerFaultTable(isolation=10.0, clock=clock)
    faults.mark_failed("b1")
    clock.advance(9.5)
    assert not faults.available("b1") and faults.available("b2")
    clock.advance(0.5)
    assert faults.available("b1")


def test_the_system_clock_pickles_as_itself() -> None:
    # the synchronous clients travel to Spark executors with their clock, and their runtime keeps one connection
    # pool per clock: a copy of SYSTEM_CLOCK must be SYSTEM_CLOCK
    assert pickle.loads(pickle.dumps(SYSTEM_CLOCK)) is SYSTEM_CLOCK
    assert pickle.loads(pickle.dumps(SystemClock())) is SYSTEM_CLOCK

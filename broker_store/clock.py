"""Clock: the one source of time for every timer the broker and its store run.

Passed by constructor (``BrokerServer(config, clock=...)`` hands it to the store, the registration, the
processors and the background loops), never read from a module global, so a test can drive time by hand
with ``ManualClock`` instead of sleeping. ``SYSTEM_CLOCK`` is the real one.

What uses it: message store timestamps, checkpoints and retention (``time``); flush deadlines and the
flush interval, client channel expiry, long-polling deadlines (``monotonic``); the asyncio loops for
heartbeats to the name servers, offset persistence and client scans (``sleep``, ``wait_for``); the
store's threads (``wait`` on a condition). The HA link (heartbeats both ways, dead-link detection, the quorum's
in-sync expiry and slave timeouts: ``sleep``, ``timeout``, ``call_later``) and the name server's broker expiry
take it the same way; ``BrokerServer`` and ``NamesrvServer`` default to ``SYSTEM_CLOCK``, the parts below them
take it by constructor without a default. The remoting layer too: request timeouts and the connect wait
(``call_later``, ``timeout``), the TLS acceptor's first-byte, handshake and refusal timers, and every timer of
``broker_store.client`` (TTLs, deadlines, back-offs, the consumer's heartbeat rounds) take a ``Clock`` that
defaults to ``SYSTEM_CLOCK``; the etcd state store's retry deadline reads the controller's. No other module of
``broker_store`` reads the time module or arms an asyncio timer (tests/unit/test_broker_store_clock.py), except
the process tools that start and wait for real processes.

Blocking code (the connectors: retry loops, Delta commits, heartbeats and checkpoints on Spark executors and the
driver, threads without an event loop) reads the same clocks through ``ThreadClock``, the thread-side part of the
shape: ``monotonic``, ``time``, ``block`` (sleep the calling thread) and ``wait`` (on a condition, so that a stop
can cut the wait short: ``StopSignal``). ``SystemClock`` and ``ManualClock`` are both; a test of such a loop may
pass a smaller fake that has those four.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import threading
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Protocol, TypeVar

T = TypeVar("T")


class TimerHandle(Protocol):
    """A pending ``Clock.call_later`` callback."""

    def cancel(self) -> object:
        """Drop the callback if it has not run yet (no effect afterwards)."""
        ...


class Clock(Protocol):
    """Time for timers. ``monotonic`` for intervals and deadlines, ``time`` for wall-clock stamps."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (deadlines, intervals)."""
        ...

    def time(self) -> float:
        """Seconds since the epoch (timestamps written to disk or the wire)."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Suspend the calling coroutine for ``seconds`` of this clock."""
        ...

    async def wait_for(self, awaitable: Awaitable[object], timeout: float) -> bool:
        """Wait for ``awaitable`` at most ``timeout`` seconds of this clock: True if it completed (a
        future's result or error is the caller's to read), False on timeout. On timeout a future is left
        as it is (the caller discards it); a coroutine is cancelled."""
        ...

    def timeout(self, seconds: float) -> AbstractAsyncContextManager[object]:
        """``async with clock.timeout(s):`` is ``asyncio.timeout(s)`` on this clock: once ``seconds`` have
        passed, the block's pending await is cancelled and ``TimeoutError`` leaves the block."""
        ...

    def call_later(self, seconds: float, callback: Callable[[], None]) -> TimerHandle:
        """Run ``callback`` on the running loop once ``seconds`` of this clock have passed (``loop.call_later``);
        call from the loop's thread."""
        ...

    def wait(self, cond: threading.Condition, timeout: float) -> None:
        """Thread side: ``cond.wait`` for at most ``timeout`` seconds of this clock. The caller holds
        ``cond`` and re-checks its predicate and the time afterwards (wake-ups may come early)."""
        ...


class ThreadClock(Protocol):
    """Time for blocking code (threads, no event loop: the connectors): the thread side of ``Clock``, plus
    ``block``. A protocol of its own, not ``Clock``, because ``Clock.sleep`` is a coroutine these threads cannot
    await, and a test fake of a blocking loop need not implement the event-loop half."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (deadlines, intervals)."""
        ...

    def time(self) -> float:
        """Seconds since the epoch (timestamps written to tables or the wire)."""
        ...

    def block(self, seconds: float) -> None:
        """Block the calling thread for ``seconds`` of this clock."""
        ...

    def wait(self, cond: threading.Condition, timeout: float) -> None:
        """``cond.wait`` for at most ``timeout`` seconds of this clock (as ``Clock.wait``): the caller holds
        ``cond`` and re-checks its predicate and the time afterwards."""
        ...


class SystemClock:
    """The real clock: ``time.monotonic``, ``time.time``, asyncio and threading timeouts.

    Every instance pickles as ``SYSTEM_CLOCK`` (the synchronous clients travel to Spark executors with their clock,
    and their shared event loop keeps one connection pool per clock: every copy must be the same one)."""

    def __reduce__(self) -> tuple[Callable[[], SystemClock], tuple[()]]:
        return _system_clock, ()

    def monotonic(self) -> float:
        return time.monotonic()

    def time(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    async def wait_for(self, awaitable: Awaitable[object], timeout: float) -> bool:
        target = asyncio.ensure_future(awaitable)
        try:
            done, _ = await asyncio.wait({target}, timeout=max(timeout, 0))
        finally:
            if target is not awaitable and not target.done():  # timed out, or the caller was cancelled
                target.cancel()
        return bool(done)

    def timeout(self, seconds: float) -> AbstractAsyncContextManager[object]:
        return asyncio.timeout(seconds)

    def call_later(self, seconds: float, callback: Callable[[], None]) -> TimerHandle:
        return asyncio.get_running_loop().call_later(seconds, callback)

    def wait(self, cond: threading.Condition, timeout: float) -> None:
        cond.wait(max(timeout, 0))

    def block(self, seconds: float) -> None:
        time.sleep(max(seconds, 0))


SYSTEM_CLOCK = SystemClock()


def _system_clock() -> SystemClock:
    return SYSTEM_CLOCK


class ManualClock:
    """A clock that moves only when a test calls ``advance`` (thread-safe). Sleepers and waiters whose
    deadline is reached are woken; ``wait`` callers are notified on every advance and re-check."""

    def __init__(self, wall: float = 1_700_000_000.0, monotonic: float = 1_000.0) -> None:
        self._lock = threading.Lock()
        self._mono = monotonic
        self._wall = wall
        self._seq = itertools.count()
        self._sleepers: list[tuple[float, int, asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self._conds: weakref.WeakSet[threading.Condition] = weakref.WeakSet()

    def monotonic(self) -> float:
        return self._mono

    def time(self) -> float:
        return self._wall

    def set_time(self, wall: float) -> None:
        """Set the wall clock alone (wall clocks may jump; ``monotonic`` does not move)."""
        self._wall = wall

    def advance(self, seconds: float) -> None:
        """Move both clocks forward and wake whatever became due."""
        if seconds < 0:
            raise ValueError("a clock does not go back")
        with self._lock:
            self._mono += seconds
            self._wall += seconds
            due = []
            while self._sleepers and self._sleepers[0][0] <= self._mono:
                due.append(heapq.heappop(self._sleepers))
            conds = list(self._conds)
        for _, _, loop, future in due:
            loop.call_soon_threadsafe(_resolve, future)
        for cond in conds:
            with cond:
                cond.notify_all()

    def _timer(self, seconds: float) -> asyncio.Future[None]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        with self._lock:
            if seconds <= 0:
                future.set_result(None)
            else:
                heapq.heappush(self._sleepers, (self._mono + seconds, next(self._seq), loop, future))
        return future

    async def sleep(self, seconds: float) -> None:
        timer = self._timer(seconds)
        try:
            await timer
        finally:
            timer.cancel()

    async def wait_for(self, awaitable: Awaitable[object], timeout: float) -> bool:
        target: asyncio.Future[Any] = asyncio.ensure_future(awaitable)
        timer: asyncio.Future[Any] = self._timer(timeout)
        finished = False
        try:
            await asyncio.wait({target, timer}, return_when=asyncio.FIRST_COMPLETED)
            finished = target.done()
        finally:
            timer.cancel()
            if target is not awaitable and not target.done():  # timed out, or the caller was cancelled
                target.cancel()
        return finished

    @asynccontextmanager
    async def timeout(self, seconds: float) -> AsyncIterator[object]:
        # asyncio's own timeout, left unarmed and fired by this clock: it cancels the block's await and
        # turns the cancellation into TimeoutError exactly as asyncio.timeout does.
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(None) as scope:
            inside = True

            def expire(timer: asyncio.Future[None]) -> None:
                if inside and not timer.cancelled():
                    scope.reschedule(loop.time())

            timer = self._timer(seconds)
            timer.add_done_callback(expire)
            try:
                yield scope
            finally:
                inside = False
                timer.cancel()

    def call_later(self, seconds: float, callback: Callable[[], None]) -> TimerHandle:
        timer = self._timer(seconds)
        timer.add_done_callback(lambda done: None if done.cancelled() else callback())
        return timer

    def wait(self, cond: threading.Condition, timeout: float) -> None:
        if timeout <= 0:
            return
        self._conds.add(cond)
        cond.wait()

    def block(self, seconds: float) -> None:
        """Returns once another thread has advanced this clock by ``seconds``."""
        StopSignal(self).sleep(seconds)


class StopSignal:
    """A stop flag that background threads sleep on: ``sleep`` returns early once ``stop`` is called. Waits on
    ``clock`` (either side's: it reads ``monotonic`` and ``wait`` only), so a ``ManualClock`` drives it."""

    def __init__(self, clock: Clock | ThreadClock) -> None:
        self._clock = clock
        self._cond = threading.Condition()
        self._stopped = False

    def is_set(self) -> bool:
        return self._stopped

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()

    def sleep(self, seconds: float) -> bool:
        """Sleep ``seconds`` of the clock; False (at once) if stopped meanwhile, True otherwise."""
        clock = self._clock
        deadline = clock.monotonic() + seconds
        with self._cond:
            while not self._stopped:
                now = clock.monotonic()
                if now >= deadline:
                    return True
                clock.wait(self._cond, deadline - now)
            return False


def poll(clock: ThreadClock, attempt: Callable[[], T | None], timeout: float, interval: float,
         waiting: Callable[[], None] | None = None) -> T | None:
    """Call ``attempt`` until it returns something other than None, which is returned; None once ``timeout`` s
    have passed on ``clock``'s monotonic time. ``attempt`` runs at least once, and once more at the deadline;
    between two calls ``waiting`` (a progress line) is called and the thread blocks ``interval`` s on ``clock``.
    The one poll-until-deadline loop of blocking code (``jobs.dr``'s waits), so a test drives it by hand."""
    deadline = clock.monotonic() + timeout
    while True:
        result = attempt()
        if result is not None:
            return result
        now = clock.monotonic()
        if now >= deadline:
            return None
        if waiting is not None:
            waiting()
        clock.block(min(interval, deadline - now))


def wall_ms(clock: Clock | ThreadClock) -> int:
    """``clock``'s wall time in milliseconds since the epoch (RocketMQ's stamps: data versions, timestamps)."""
    return int(clock.time() * 1000)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)

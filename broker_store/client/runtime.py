"""The event loop behind the synchronous clients: a daemon thread running asyncio plus one
``RemotingClient`` (one multiplexed connection per broker address) shared by every client on it, and
one more per distinct TLS settings or clock (``remoting_for``: clients of a TLS cluster share theirs; a
client given its own clock, a test's ``ManualClock``, gets request timeouts on that clock).

``Producer``, ``PullConsumer`` and ``Admin`` acquire the process-wide runtime when they start and
release it on close; the last release stops the thread. Any number of threads may call into the
same runtime at once: calls are submitted to the loop and waited on, so all client state is only
ever touched by the loop thread. A runtime does not survive ``fork()`` (Spark forks Python
workers); clients notice the new pid and start a fresh one in the child.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import threading
from collections.abc import Callable, Coroutine
from typing import Any, Generic, Self, TypeVar

from broker_store.clock import SYSTEM_CLOCK, Clock
from broker_store.net.client import RemotingClient
from broker_store.net.tls_settings import TlsClientSettings
from broker_store.protocol.errors import RequestTimeoutError

log = logging.getLogger(__name__)

T = TypeVar("T")
CoreT = TypeVar("CoreT")

_WAIT_MARGIN = 5.0
"""Seconds a caller waits beyond a call's own deadline before giving up on the loop itself."""


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


class ClientRuntime:
    """An asyncio loop in a daemon thread and the RemotingClient that lives on it."""

    def __init__(self, name: str = "broker-store-client") -> None:
        self.pid = os.getpid()
        self.loop = _new_loop()
        self.remoting = RemotingClient()
        """Plain connections on the system clock, shared by every client without TLS or a clock of its own."""
        self._remoting_by_key: dict[tuple[TlsClientSettings | None, Clock], RemotingClient] = {}
        self._remoting_lock = threading.Lock()
        self._stopped = False
        ready = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(ready,), name=name, daemon=True)
        self.thread.start()
        ready.wait()

    def _run(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(ready.set)
        try:
            self.loop.run_forever()
            pending = [t for t in asyncio.all_tasks(self.loop) if not t.done()]
            for task in pending:
                task.cancel()
            if pending:
                self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
        finally:
            self.loop.close()

    def remoting_for(self, tls: TlsClientSettings | None, clock: Clock = SYSTEM_CLOCK) -> RemotingClient:
        """The remoting client for clients with these TLS settings and clock (one per distinct pair, so a TLS
        cluster's connections and a plain cluster's never mix, and request timeouts count on the client's
        clock); ``self.remoting`` without TLS on the system clock."""
        if tls is None and clock is SYSTEM_CLOCK:
            return self.remoting
        with self._remoting_lock:
            client = self._remoting_by_key.get((tls, clock))
            if client is None:
                client = self._remoting_by_key[tls, clock] = RemotingClient(tls=tls, clock=clock)
            return client

    async def _close_remoting(self) -> None:
        for client in (self.remoting, *self._remoting_by_key.values()):
            await client.close()

    @property
    def alive(self) -> bool:
        return not self._stopped and self.pid == os.getpid() and self.thread.is_alive()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule ``coro`` on the loop; the returned future may be waited on from any thread."""
        if not self.alive:
            coro.close()
            raise RuntimeError("client runtime is stopped (closed client, or used across fork())")
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the loop and wait for it. ``timeout`` is the call's own deadline in
        seconds; the wait adds a margin so the coroutine's own timeout error wins."""
        if threading.current_thread() is self.thread:
            coro.close()
            raise RuntimeError("synchronous client method called from its own event loop; use the async API")
        fut = self.submit(coro)
        try:
            return fut.result(None if timeout is None else timeout + _WAIT_MARGIN)
        except concurrent.futures.TimeoutError as exc:
            fut.cancel()
            raise RequestTimeoutError(f"client call did not finish within {timeout}s") from exc
        except BaseException:
            fut.cancel()  # KeyboardInterrupt while waiting: do not leave the call running
            raise

    def stop(self, timeout: float = 5.0) -> None:
        if self._stopped:
            return
        self._stopped = True
        if self.pid != os.getpid() or not self.thread.is_alive():
            return
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(self._close_remoting(), self.loop).result(timeout)
        self.loop.call_soon_threadsafe(self.loop.stop)
        if threading.current_thread() is not self.thread:
            self.thread.join(timeout)


_lock = threading.Lock()
_shared: ClientRuntime | None = None
_refs = 0


def acquire_runtime() -> ClientRuntime:
    """The process-wide runtime, started on first use; pair every call with ``release_runtime``."""
    global _shared, _refs
    with _lock:
        if _shared is None or not _shared.alive:
            _shared = ClientRuntime()
            _refs = 0
        _refs += 1
        return _shared


def release_runtime(runtime: ClientRuntime) -> None:
    """Drop one reference; the last one stops the loop thread. Private runtimes stop at once."""
    global _shared, _refs
    with _lock:
        if runtime is _shared:
            _refs -= 1
            if _refs > 0:
                return
            _shared = None
            _refs = 0
    runtime.stop()


def _reset_after_fork() -> None:
    global _lock, _shared, _refs
    _lock = threading.Lock()
    _shared = None
    _refs = 0


os.register_at_fork(after_in_child=_reset_after_fork)


class SyncClient(Generic[CoreT]):
    """Base of the synchronous facades: lazy start on a runtime, picklable configuration, close.

    Subclasses keep their constructor arguments in ``self._init_kwargs`` (that is all that is
    pickled) and build their async core in ``_make_core``. Before ``start()`` (explicit or on
    first call) the object holds no thread, socket or loop.
    """

    _init_kwargs: dict[str, Any]

    def __init__(self, *, shared_runtime: bool = True) -> None:
        self._shared_runtime = shared_runtime
        self._start_lock = threading.Lock()
        self._runtime: ClientRuntime | None = None
        self._core: CoreT | None = None
        self._closed = False

    def _make_core(self, remoting: RemotingClient) -> CoreT:
        raise NotImplementedError

    async def _start_core(self, core: CoreT) -> None:
        """Hook run on the loop right after the core is built."""

    async def _close_core(self, core: CoreT) -> None:
        """Hook run on the loop before the runtime is released."""

    def start(self) -> Self:
        self._ensure_started()
        return self

    def _ensure_started(self) -> tuple[ClientRuntime, CoreT]:
        runtime, core = self._runtime, self._core
        if runtime is not None and core is not None and runtime.pid == os.getpid():
            return runtime, core
        with self._start_lock:
            if self._closed:
                raise RuntimeError(f"{type(self).__name__} is closed")
            if self._runtime is not None and self._runtime.pid != os.getpid():
                # Inherited through fork(): the parent's loop thread does not exist here.
                self._runtime, self._core = None, None
            if self._runtime is None or self._core is None:
                runtime = acquire_runtime() if self._shared_runtime else ClientRuntime()
                try:
                    core = self._make_core(runtime.remoting_for(self._init_kwargs.get("tls"),
                                                                self._init_kwargs.get("clock", SYSTEM_CLOCK)))
                    runtime.run(self._start_core(core), timeout=30.0)
                except BaseException:
                    release_runtime(runtime)
                    raise
                self._runtime, self._core = runtime, core
            return self._runtime, self._core

    def _call(self, factory: Callable[[CoreT], Coroutine[Any, Any, T]], timeout: float | None) -> T:
        runtime, core = self._ensure_started()
        return runtime.run(factory(core), timeout)

    def _submit(self, factory: Callable[[CoreT], Coroutine[Any, Any, T]]) -> concurrent.futures.Future[T]:
        runtime, core = self._ensure_started()
        return runtime.submit(factory(core))

    def close(self) -> None:
        """Release sockets and (for the last client) the loop thread. Idempotent."""
        with self._start_lock:
            if self._closed:
                return
            self._closed = True
            runtime, core = self._runtime, self._core
            self._runtime, self._core = None, None
        if runtime is None or core is None or runtime.pid != os.getpid():
            return
        try:
            if runtime.alive:
                runtime.run(self._close_core(core), timeout=10.0)
        except Exception as exc:  # noqa: BLE001 - closing must always release the runtime
            log.warning("error while closing %s: %s", type(self).__name__, exc)
        finally:
            release_runtime(runtime)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __getstate__(self) -> dict[str, Any]:
        return {"init_kwargs": self._init_kwargs, "shared_runtime": self._shared_runtime}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(**state["init_kwargs"], shared_runtime=state["shared_runtime"])  # type: ignore[misc]

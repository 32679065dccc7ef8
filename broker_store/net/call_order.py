"""Calls that wait on a shared resource return in call order (per key).

Used by ``RemotingClient`` (per broker address, while a connection is being opened) and by the client's
``RouteCache`` (per topic, while a route is fetched). Why it is needed: callers waiting on a shared future
resume a few loop turns after the resource is ready (each waiter's ``asyncio.shield`` adds hops), and a
call started inside that gap finds the resource ready at once and returns first. For a producer that
means a later send leaves before earlier ones to the same queue.

The contract, for one key: a call that ``enter``s while an earlier call of the key still holds a turn must
``wait_ahead`` before returning; every turn is ``end``ed (in a ``finally``). Calls that find no earlier
turn and the resource ready skip all of this (the fast path costs one dict lookup). Single loop, not
thread-safe.
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


class Turn(Generic[K]):
    """One waiting call's place in its key's queue."""

    __slots__ = ("_ahead", "_done", "_key", "_order")

    def __init__(self, order: CallOrder[K], key: K, ahead: asyncio.Future[None] | None,
                 done: asyncio.Future[None]) -> None:
        self._order = order
        self._key = key
        self._ahead = ahead
        self._done = done

    async def wait_ahead(self) -> None:
        """Return once every earlier call of the key has returned (or given up)."""
        if self._ahead is not None:
            await asyncio.shield(self._ahead)

    def end(self) -> None:
        """Let the next call of the key return. A call leaving early (cancelled, failed) while the one ahead
        of it still waits hands its place on: the next call still returns after that one."""
        ahead = self._ahead
        if ahead is None or ahead.done():
            self._release()
        else:
            ahead.add_done_callback(lambda _: self._release())

    def _release(self) -> None:
        self._done.set_result(None)
        self._order._released(self._key, self._done)


class CallOrder(Generic[K]):
    """Per-key queue of the calls still waiting (see the module docstring)."""

    def __init__(self) -> None:
        self._newest: dict[K, asyncio.Future[None]] = {}

    def waiting(self, key: K) -> bool:
        """True while some call of ``key`` holds a turn: a new call must ``enter`` too."""
        return key in self._newest

    def enter(self, key: K) -> Turn[K]:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        turn = Turn(self, key, self._newest.get(key), done)
        self._newest[key] = done
        return turn

    def _released(self, key: K, done: asyncio.Future[None]) -> None:
        if self._newest.get(key) is done:
            del self._newest[key]

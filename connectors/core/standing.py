"""Conditions that stand across the rounds of a polling connector (a refused change, an unreachable cluster):
which ones a round starts, changes and clears, so that a condition lasting many rounds is reported when it
starts and when it clears, not every round.

Pure: no I/O, no clock. Used by ``connectors.config_sync.standing`` (what a config-sync round records in the
``config_changes`` table; its standing comes from that table) and by ``connectors.checkpoint.committer``
(the checkpoint query's WARNING and INFO lines; its standing lives in memory, ``StandingConditions``).

A condition is a key (what it is about: a kind and a subject) and a value (what is said about it). A key
absent from what stood *starts*; one that stood with another value (by the caller's ``same``) *changes*; one
that stood and that the round no longer reports *clears*, but only when the round could have seen it
(``judged``): a round that could not read part of a cluster cannot tell that a condition there is over.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Hashable, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


def _always(_key: object) -> bool:
    return True


@dataclass(frozen=True)
class Transitions(Generic[K, V]):
    """What one round did to the standing conditions (each a (key, value) pair, in the round's order)."""

    started: tuple[tuple[K, V], ...]
    """Keys that did not stand, with their value this round."""
    changed: tuple[tuple[K, V], ...]
    """Keys that stood with another value, with their value this round."""
    cleared: tuple[tuple[K, V], ...]
    """Keys that stood, judged this round and not reported by it, with the value that stood."""
    unchanged: int
    """Keys reported again with the value that stood (nothing new to say about them)."""

    def __bool__(self) -> bool:
        """Something started, changed or cleared."""
        return bool(self.started or self.changed or self.cleared)


def transitions(standing: Mapping[K, V], current: Mapping[K, V], *, same: Callable[[V, V], bool] = operator.eq,
                judged: Callable[[K], bool] = _always) -> Transitions[K, V]:
    """``current`` (this round's conditions) against ``standing`` (what stood after the previous round); see
    the module docstring. ``judged(key)``: the round could have reported a standing key (default: every key)."""
    started: list[tuple[K, V]] = []
    changed: list[tuple[K, V]] = []
    unchanged = 0
    for key, value in current.items():
        if key not in standing:
            started.append((key, value))
        elif not same(standing[key], value):
            changed.append((key, value))
        else:
            unchanged += 1
    cleared = tuple((key, value) for key, value in standing.items() if key not in current and judged(key))
    return Transitions(tuple(started), tuple(changed), cleared, unchanged)


def advance(standing: MutableMapping[K, V], done: Transitions[K, V]) -> None:
    """Apply a round's ``transitions`` to ``standing`` (in place)."""
    for key, value in (*done.started, *done.changed):
        standing[key] = value
    for key, _ in done.cleared:
        standing.pop(key, None)


class StandingConditions(Generic[K, V]):
    """``transitions`` with the standing kept in memory, for an object that lives as long as its query (a
    driver-side committer): a restarted driver reports what stands again, once."""

    def __init__(self, same: Callable[[V, V], bool] = operator.eq) -> None:
        self._same = same
        self._standing: dict[K, V] = {}

    def update(self, current: Mapping[K, V], judged: Callable[[K], bool] = _always) -> Transitions[K, V]:
        """This round's conditions: what started, changed and cleared; the standing moves on."""
        done = transitions(self._standing, current, same=self._same, judged=judged)
        advance(self._standing, done)
        return done

    @property
    def standing(self) -> Mapping[K, V]:
        return dict(self._standing)

"""The pure accounting of the disaster-recovery drill (``benchmarks/dr_drill.py``): from the log of acknowledged
sends, the keys on the active side at the end and the application's log of reads, how many acknowledged messages
are lost, how many the application never saw, how many it saw twice and in which move; and the recovery times
from the journal's fence to the application's first answer on the other side. No clusters, no clock: the drill
records, this counts (``tests/unit/test_dr_drill_tally.py``).

A *stint* is one stretch of the application consuming on one side, started by a move: ``start`` (the first, on
A), ``switchover`` and ``failback`` (planned), ``failover`` (unplanned). A key read again is charged to the move
that started the stint of the repeated read: the message was delivered again because of that move.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

PLANNED = frozenset({"switchover", "failback"})
"""Moves made with the clusters healthy: a read twice after one of them is a defect (target 0)."""
FAILOVER = "failover"
START = "start"
MOVES = (START, *sorted(PLANNED), FAILOVER)


class Read(NamedTuple):
    """One message as the application got it."""

    key: str
    """The message's unique key (its UNIQ_KEY, kept byte-exact by the links and the recovery)."""
    at: float
    """Wall clock (s) of the pull answer that carried it."""
    stint: int
    """Index of the stint it was read in (``Stint.index``)."""


@dataclass(frozen=True)
class Stint:
    """One stretch of consuming on one side."""

    index: int
    side: str
    """Cluster name."""
    move: str
    """What started it: one of ``MOVES``."""
    started_at: float
    """Wall clock (s) when the operator started the application there."""
    first_answer_at: float | None = None
    """Wall clock (s) of the first pull answer on that side (the application running there); None: none came."""


@dataclass(frozen=True)
class Tally:
    acknowledged: int
    lost: int
    """Acknowledged sends whose key is not on the active side at the end."""
    gaps: int
    """Acknowledged sends the application never read."""
    read_twice: Mapping[str, int]
    """Per move (``MOVES``): reads of a key beyond its first, charged to the move that started their stint."""
    lost_sample: tuple[str, ...] = ()
    gap_sample: tuple[str, ...] = ()

    @property
    def read_twice_planned(self) -> int:
        return sum(n for move, n in self.read_twice.items() if move in PLANNED)

    @property
    def read_twice_failover(self) -> int:
        return self.read_twice.get(FAILOVER, 0)


def tally(acknowledged: Iterable[str], on_active: Iterable[str], reads: Sequence[Read],
          stints: Sequence[Stint], *, sample: int = 5) -> Tally:
    """Count by key. ``reads`` in the order the application got them; ``stints`` indexed by ``Stint.index``."""
    acked = set(acknowledged)
    present = set(on_active)
    move_of = {s.index: s.move for s in stints}
    seen: set[str] = set()
    twice: Counter[str] = Counter()
    for r in reads:
        if r.key in seen:
            twice[move_of.get(r.stint, START)] += 1
        else:
            seen.add(r.key)
    lost = sorted(acked - present)
    gaps = sorted(acked - seen)
    return Tally(len(acked), len(lost), len(gaps), {m: twice.get(m, 0) for m in MOVES},
                 tuple(lost[:sample]), tuple(gaps[:sample]))


def rto(fence_at: float | None, stint: Stint | None) -> float | None:
    """Seconds from the fence's start (the journal's wall clock) to the application's first answer on the other
    side; None when either is missing (the move did not happen or the application never ran there)."""
    if fence_at is None or stint is None or stint.first_answer_at is None:
        return None
    return max(0.0, stint.first_answer_at - fence_at)


def read_within(reads: Iterable[Read], stint: int, start: float, end: float) -> int:
    """Reads of ``stint`` with ``start <= at <= end``: what the application consumed in a window (the failover's
    bound: one checkpoint interval before the kill)."""
    return sum(1 for r in reads if r.stint == stint and start <= r.at <= end)


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _count(value: int | None) -> str:
    return "-" if value is None else str(value)


def summary_line(switchover_rto: float | None, failback_rto: float | None, rpo: int | None, recovered: int | None,
                 t: Tally) -> str:
    """The drill's last line; ``-`` for a figure of a step that did not run."""
    return (f"dr drill: switchover rto {_seconds(switchover_rto)} s, failback rto {_seconds(failback_rto)} s, "
            f"failover rpo {_count(rpo)}, recovered {_count(recovered)}, lost {t.lost}, gaps {t.gaps}, "
            f"read twice planned {t.read_twice_planned}, read twice failover {t.read_twice_failover}")


def missed_targets(switchover_rto: float | None, failback_rto: float | None, rpo: int | None,
                   recovered: int | None, t: Tally, failover_bound: int | None, *, rto_target_s: float) -> list[str]:
    """The targets (docs/benchmarks.md) a run missed, each as a short sentence; empty when all held. A figure of
    a step that did not run is not judged."""
    missed = []
    if t.lost:
        missed.append(f"lost {t.lost} > 0")
    if t.gaps:
        missed.append(f"gaps {t.gaps} > 0")
    if t.read_twice_planned:
        missed.append(f"read twice planned {t.read_twice_planned} > 0")
    for name, value in (("switchover", switchover_rto), ("failback", failback_rto)):
        if value is not None and value > rto_target_s:
            missed.append(f"{name} rto {value:.1f} s > {rto_target_s:g} s")
    if rpo is not None and recovered is not None and recovered < rpo:
        missed.append(f"recovered {recovered} < rpo {rpo}")
    if failover_bound is not None and t.read_twice_failover > failover_bound:
        missed.append(f"read twice failover {t.read_twice_failover} > {failover_bound} (read in one checkpoint "
                      "interval before the kill)")
    return missed

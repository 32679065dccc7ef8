"""Exact consumer-offset translation: a source group's next offset -> the target group's next offset.

Used by the checkpoint connector's writer (driver) with the link's ``offset_map`` runs and its committed
source offsets. Pure: no I/O, no clock; tested without Spark or brokers.

The rule (beating MirrorMaker 2's sparse OffsetSyncStore): a source offset S (the next message
the group would consume) maps to the target offset of the *first replicated message at or after S*, so a
consumer failing over to the target neither skips nor repeats a message:

* a run of the offset map says source offsets ``source_first..source_last`` of one source queue landed at
  ``target_first..target_last`` of one target queue. When the run is contiguous (as many messages as
  source offsets), S inside it is exact: ``target_first + (S - source_first)``. A run with gaps (messages
  skipped by the loop guard or tag filter inside it) is translated to its first target offset when S is
  inside it: correct but conservative (the consumer re-reads part of that run), and marked inexact;
* S past every replicated message of the queue, while replication has passed S (the link's committed
  next offset >= S): every message before S is on the target and none after it yet, so the translation is
  the offset after the last run (the next message of this source queue will land there or later);
* replication has not reached S yet (the group reads ahead of the link): pending; the caller waits (a target
  group never moves past data that is not replicated). A pending translation still carries the partial one:
  ``target_offset`` is the end of the replicated data of the queue on the target (the offset after its last
  run), exactly the part of what the group consumed that has crossed: every message before it came from a
  source offset below S, and the messages from the last run's end up to S, not crossed yet, land at or after
  it. The live committer does not commit it (the target queue waits for the exact translation); a failover,
  where the link is stopped and nothing more will cross, starts the group there;
* no run for the queue at all: unmapped; the caller leaves the queue alone and reports it.

Several source queues may feed one target queue (several topics into one, a target topic with fewer
queues than the source, growth the target refused): the target queue's offset is the minimum over the
source queues that feed it and that the group has an offset for (``TargetQueueOffsets``), so nothing is
skipped; the messages of the other source queues above that minimum are read again (at least once). No
translation can be exact there: the target queue interleaves the source queues' messages, and one target
offset must stand for several source positions; any offset above the minimum would skip a message of the
queue the minimum came from. ``OffsetTranslator.feeders`` says which target queues are shared (the
committer marks their rows "shared: may re-read"). Offsets never move backwards: ``TargetQueueOffsets``
takes the current target offsets and only raises them.

Re-replicated offsets (a reset of the link's offsets): when a run covers source offsets an earlier run
covered, the newest run wins; the older run is cut to the part it alone covers (exactly when it is
contiguous; a run with gaps keeps that part as a summary, see ``Run.summary``). A batch re-sent after a
driver kill adds no overlap: the killed send was never committed to the offset map, so its copies on the
target are simply not mapped, and S maps to the re-sent copy.

Memory: a queue's runs are merged when one continues the other exactly, so a link costs one run per
source queue and discontinuity (skipped message, re-replicated range, placement change), not per batch.
The runs below every translated group's offset are folded into a summary (``forget_below``, called by the
committer with each snapshot's lowest offset per queue), and at most ``max_runs`` are kept per queue (the link's
``checkpoints.max_runs_per_queue``, default ``DEFAULT_MAX_RUNS``; the oldest beyond it are folded): a group
that later shows up below that point is translated conservatively to the summary's lowest target offset
(re-reads, marked inexact, reported), never past a message.
"""

from __future__ import annotations

import bisect
import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

from broker_store.client import MessageQueue
from connectors.core.offsets import queue_key
from connectors.core.sync_settings import DEFAULT_MAX_RUNS_PER_QUEUE, MIN_MAX_RUNS_PER_QUEUE

DEFAULT_MAX_RUNS = DEFAULT_MAX_RUNS_PER_QUEUE
"""Runs kept per source queue by ``OffsetTranslator.forget_below`` (a few hundred bytes each); a link sets
it with ``checkpoints.max_runs_per_queue`` (``CheckpointSettings``, which owns the default)."""


class Run(NamedTuple):
    """Source offsets ``source_first..source_last`` landed at ``target_first..target_last`` of ``target``;
    ``messages`` of them were delivered (= the target span)."""

    source_first: int
    source_last: int
    target: MessageQueue
    target_first: int
    target_last: int
    messages: int
    summary: bool = False
    """Runs folded into one (``OffsetTranslator.forget_below``), or the part of a run with gaps that a newer
    run did not cover: where each source offset inside it landed is no longer known. ``target_first`` is
    the lowest target offset of its messages, so a translation into it is conservative (inexact)."""

    @property
    def contiguous(self) -> bool:
        """Every source offset of the run was delivered (no message skipped inside it)."""
        return not self.summary and self.messages == self.source_last - self.source_first + 1


class Outcome(enum.Enum):
    TRANSLATED = "translated"
    """``target_offset`` is where the group continues on the target."""
    PENDING = "pending"
    """Replication has not reached the source offset yet: try again later (``Translation.partial``: what has
    crossed of it)."""
    UNMAPPED = "unmapped"
    """Nothing of this source queue has been replicated (or it is not in the link): leave it alone."""


@dataclass(frozen=True)
class Translation:
    """The translation of one source queue's group offset."""

    source: MessageQueue
    source_offset: int
    outcome: Outcome
    target: MessageQueue | None = None
    """The target queue (None when unmapped)."""
    target_offset: int | None = None
    """Next target offset to consume (TRANSLATED); for PENDING, the partial translation: the end of the
    replicated data of the queue on the target (``partial``)."""
    exact: bool = True
    """False when S fell inside a run with gaps and the translation is conservative."""

    @property
    def partial(self) -> bool:
        """PENDING with the end of the replicated data as ``target_offset``: where the group would continue on
        the target if nothing more crossed."""
        return self.outcome is Outcome.PENDING and self.target_offset is not None


class OffsetTranslator:
    """The offset-map runs of one link, per source queue, and the translation rule of the module docstring."""

    def __init__(self, runs: Iterable[tuple[MessageQueue, Run]] = ()) -> None:
        self._runs: dict[MessageQueue, list[Run]] = {}
        self._firsts: dict[MessageQueue, list[int]] = {}
        self._feeders: dict[MessageQueue, set[MessageQueue]] = {}
        for source, run in runs:
            self.add(source, run)

    def feeders(self, target: MessageQueue) -> frozenset[MessageQueue]:
        """Every source queue any run ever added put into ``target`` (folding and cutting runs keep them):
        more than one means the target queue is shared and its translation may re-read."""
        return frozenset(self._feeders.get(target, ()))

    def add(self, source: MessageQueue, run: Run) -> None:
        """Add one run, newer than every run added before (offset-map rows in commit order).

        A queue's runs are kept sorted and disjoint, so only the runs the new one overlaps are touched
        (O(log n) plus the overlap). A contiguous run that continues its contiguous neighbour on the same
        target queue (the next batch of a steady link) is merged with it: a queue costs one entry per
        discontinuity (a skipped message, a re-sent batch, a target change), not one per batch, and the
        translation is unchanged (``target_first + (S - source_first)`` holds across the merged run)."""
        if run.source_last < run.source_first or run.messages <= 0:
            raise ValueError(f"{queue_key(source)}: empty or reversed run {run}")
        self._feeders.setdefault(run.target, set()).add(source)
        runs = self._runs.setdefault(source, [])
        firsts = self._firsts.setdefault(source, [])
        # runs[lo:hi]: the old runs the new one overlaps (only the first and last can stick out of it)
        lo = bisect.bisect_right(firsts, run.source_first) - 1
        if lo < 0 or runs[lo].source_last < run.source_first:
            lo += 1
        hi = bisect.bisect_right(firsts, run.source_last)
        replacement: list[Run] = []
        if lo < hi:
            # The new run re-replicated part of old ones: keep what only an old one covers (exactly when the
            # old one is contiguous; else as a summary from its first target offset, which re-reads rather
            # than skips).
            old = runs[lo]
            if old.source_first < run.source_first:
                if old.contiguous:
                    n = run.source_first - old.source_first
                    replacement.append(old._replace(source_last=run.source_first - 1,
                                                    target_last=old.target_first + n - 1, messages=n))
                else:
                    replacement.append(old._replace(source_last=run.source_first - 1, summary=True))
        replacement.append(run)
        if lo < hi:
            old = runs[hi - 1]
            if old.source_last > run.source_last:
                if old.contiguous:
                    skip = run.source_last + 1 - old.source_first
                    replacement.append(old._replace(source_first=run.source_last + 1,
                                                    target_first=old.target_first + skip,
                                                    messages=old.messages - skip))
                else:
                    replacement.append(old._replace(source_first=run.source_last + 1, summary=True))
        # merge across the edges of the replaced slice with the untouched neighbours too
        start, end = max(lo - 1, 0), min(hi + 1, len(runs))
        merged = _merge_continuations([*runs[start:lo], *replacement, *runs[hi:end]])
        runs[start:end] = merged
        firsts[start:end] = [r.source_first for r in merged]

    def forget_below(self, floors: Mapping[MessageQueue, int], max_runs: int = DEFAULT_MAX_RUNS) -> int:
        """Fold the runs no translation needs exactly any more into summaries; returns the runs folded.

        ``floors``: per source queue, the lowest offset any translated group is at (the caller's latest
        snapshot). Runs wholly below it are folded, and the oldest runs beyond ``max_runs`` per queue too
        (a group that stopped long ago must not keep every run since). The newest run is never folded.
        Translations of offsets at or above the floor and outside the capped runs are unchanged; one into
        a summary returns the lowest target offset of its messages, marked inexact: a group there re-reads,
        never skips. Runs are folded per stretch with the same target queue."""
        if max_runs < MIN_MAX_RUNS_PER_QUEUE:
            raise ValueError(f"max_runs must be >= {MIN_MAX_RUNS_PER_QUEUE}, got {max_runs}")
        folded = 0
        for source, runs in self._runs.items():
            firsts = self._firsts[source]
            n = 0
            floor = floors.get(source)
            if floor is not None:
                n = bisect.bisect_left(firsts, floor)  # runs starting below the floor; the last may reach it
                if n and runs[n - 1].source_last >= floor:
                    n -= 1
            n = min(max(n, len(runs) - max_runs + 1), len(runs) - 1)  # + 1: the summary is a run too
            if n < 2:
                continue
            kept = _fold(runs[:n])
            if len(kept) < n:
                runs[:n] = kept
                firsts[:n] = [r.source_first for r in kept]
                folded += n - len(kept)
        return folded

    def runs(self, source: MessageQueue) -> tuple[Run, ...]:
        """The queue's runs as kept (sorted by source offset, disjoint, continuations merged)."""
        return tuple(self._runs.get(source, ()))

    def sources(self) -> list[MessageQueue]:
        return sorted(self._runs, key=queue_key)

    def size(self) -> int:
        """Runs kept over every source queue (what the translator's memory grows with)."""
        return sum(len(r) for r in self._runs.values())

    def translate(self, source: MessageQueue, source_offset: int, replicated_next: int | None) -> Translation:
        """Where a group whose next source offset is ``source_offset`` continues on the target.
        ``replicated_next``: the link's committed next source offset for the queue (None: unknown, which
        counts as not replicated)."""
        runs = self._runs.get(source)
        if not runs:
            return Translation(source, source_offset, Outcome.UNMAPPED)
        # First run holding a message at or after S: the run starting at or before S if it reaches S,
        # else the next one.
        i = bisect.bisect_right(self._firsts[source], source_offset) - 1
        if i < 0 or runs[i].source_last < source_offset:
            i += 1
        if i < len(runs):
            run = runs[i]
            if source_offset <= run.source_first:
                return Translation(source, source_offset, Outcome.TRANSLATED, run.target, run.target_first,
                                   exact=not run.summary)
            if run.contiguous:
                return Translation(source, source_offset, Outcome.TRANSLATED, run.target,
                                   run.target_first + (source_offset - run.source_first))
            return Translation(source, source_offset, Outcome.TRANSLATED, run.target, run.target_first, exact=False)
        last = runs[-1]
        if replicated_next is None or replicated_next < source_offset:
            # S is past every run: the group has consumed every message of the queue that crossed
            return Translation(source, source_offset, Outcome.PENDING, last.target, last.target_last + 1)
        return Translation(source, source_offset, Outcome.TRANSLATED, last.target, last.target_last + 1)


def _fold(runs: list[Run]) -> list[Run]:
    """Sorted disjoint runs with every stretch of two or more on the same target queue folded into a
    summary (lowest target offset first, so translating into it never skips a message)."""
    out: list[Run] = []
    stretch: list[Run] = []
    for r in [*runs, None]:
        if r is not None and (not stretch or stretch[-1].target == r.target):
            stretch.append(r)
            continue
        if len(stretch) == 1:
            out.append(stretch[0])
        elif stretch:
            out.append(Run(stretch[0].source_first, stretch[-1].source_last, stretch[0].target,
                           min(x.target_first for x in stretch), max(x.target_last for x in stretch),
                           sum(x.messages for x in stretch), summary=True))
        stretch = [r] if r is not None else []
    return out


def _merge_continuations(runs: list[Run]) -> list[Run]:
    """Sorted disjoint runs with each contiguous run that continues the previous contiguous one (next source
    offset, next target offset, same target queue) folded into it."""
    out: list[Run] = []
    for r in runs:
        prev = out[-1] if out else None
        if (prev is not None and prev.contiguous and r.contiguous and prev.target == r.target
                and prev.source_last + 1 == r.source_first and prev.target_last + 1 == r.target_first):
            out[-1] = prev._replace(source_last=r.source_last, target_last=r.target_last,
                                    messages=prev.messages + r.messages)
        else:
            out.append(r)
    return out


@dataclass(frozen=True)
class TargetQueueOffsets:
    """The target group's offsets to commit, per target queue, from one snapshot of the source group."""

    commit: Mapping[MessageQueue, int]
    """Target queue -> next offset, only where it moves forward."""
    pending: tuple[Translation, ...]
    """Source queues whose offset is not replicated yet; their target queues are not committed."""
    unmapped: tuple[Translation, ...]
    """Source queues with no replicated message: left alone and reported."""
    inexact: tuple[Translation, ...]
    """Translations that fell inside a run with gaps (conservative)."""


def target_offsets(translations: Iterable[Translation], current: Mapping[MessageQueue, int]) -> TargetQueueOffsets:
    """Fold per-source-queue translations into target-queue offsets: the minimum over the source queues
    feeding a target queue, none for a target queue fed by a pending source queue, and only offsets above
    ``current`` (the target group's committed offsets; never backwards)."""
    lowest: dict[MessageQueue, int] = {}
    blocked: set[MessageQueue] = set()
    pending: list[Translation] = []
    unmapped: list[Translation] = []
    inexact: list[Translation] = []
    for t in translations:
        if t.outcome is Outcome.UNMAPPED:
            unmapped.append(t)
        elif t.outcome is Outcome.PENDING:
            pending.append(t)
            if t.target is not None:
                blocked.add(t.target)
        else:
            assert t.target is not None and t.target_offset is not None
            if not t.exact:
                inexact.append(t)
            lowest[t.target] = min(lowest.get(t.target, t.target_offset), t.target_offset)
    commit = {q: off for q, off in lowest.items() if q not in blocked and off > current.get(q, -1)}
    return TargetQueueOffsets(commit, tuple(pending), tuple(unmapped), tuple(inexact))

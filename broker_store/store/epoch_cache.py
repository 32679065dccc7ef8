"""The epoch cache: which primary epoch wrote which range of the CommitLog, and the rules over it.

Controller mode only. Each entry says "from this physical offset on, the log was written under this
primary epoch"; an epoch's range ends where the next entry starts, the newest one at the store's max
offset. The broker appends an entry when it becomes primary (after cutting the cache at its max
offset), a replica mirrors its primary's entries, and a replica rejoining a group compares its cache
with the primary's (``consistent_point``) to find where its log may have forked. Pure values and
functions, no I/O: ``store.epoch_file`` persists a cache; callers pass the max offsets in.

Invariant of an ``EpochCache`` (checked when one is built): epochs and start offsets both strictly
increase from the oldest entry to the newest, as RocketMQ requires of its epoch file.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from broker_store.protocol.errors import StoreError

MAX_EPOCH = (1 << 31) - 1
"""Epochs travel as int32 in the controller-mode HA handshake (12-byte entries: epoch 4, start 8)."""
MAX_START_OFFSET = (1 << 63) - 1
NO_CONSISTENT_POINT = -1
"""``consistent_point`` when the two caches share no epoch with the same start: the replica must refuse."""


class EpochEntry(NamedTuple):
    """One primary epoch's first CommitLog offset."""

    epoch: int
    """The primary epoch the controller assigned (0 <= epoch < 2**31)."""
    start_offset: int
    """First physical offset written under ``epoch``."""

    def __str__(self) -> str:
        return f"{self.epoch}-{self.start_offset}"


class EpochCache:
    """An immutable, validated sequence of epoch entries, oldest first.

    Every change returns a new cache (``appended``, ``truncated_suffix``), so a holder that persists it
    (``store.epoch_file.EpochFile``) can write the new cache first and swap it in only once written.
    """

    __slots__ = ("_entries",)

    def __init__(self, entries: Iterable[EpochEntry] = ()) -> None:
        entries = tuple(EpochEntry(*e) for e in entries)
        for entry in entries:
            if not 0 <= entry.epoch <= MAX_EPOCH or not 0 <= entry.start_offset <= MAX_START_OFFSET:
                raise StoreError(f"epoch entry {entry} out of range (epoch 0..{MAX_EPOCH}, "
                                 f"start offset 0..{MAX_START_OFFSET})")
        for older, newer in zip(entries, entries[1:], strict=False):
            problem = _append_problem(older, newer)
            if problem is not None:
                raise StoreError(f"epoch entries out of order: {problem}")
        self._entries = entries

    @property
    def entries(self) -> tuple[EpochEntry, ...]:
        return self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, EpochCache) and self._entries == other._entries

    def __hash__(self) -> int:
        return hash(self._entries)

    def __repr__(self) -> str:
        return f"EpochCache([{', '.join(map(str, self._entries))}])"

    @property
    def first_entry(self) -> EpochEntry | None:
        return self._entries[0] if self._entries else None

    @property
    def last_entry(self) -> EpochEntry | None:
        return self._entries[-1] if self._entries else None

    @property
    def last_epoch(self) -> int | None:
        """The newest epoch, None for an empty cache (a store that never ran in controller mode)."""
        return self._entries[-1].epoch if self._entries else None

    # -- changes ---------------------------------------------------------------------------------------

    def appended(self, entry: EpochEntry) -> EpochCache:
        """This cache plus ``entry`` as the newest; StoreError unless both its epoch and its start offset
        are strictly greater than the newest entry's (a new primary cuts the cache at its max offset with
        ``truncated_suffix`` first, so an epoch that wrote nothing does not block the next one)."""
        last = self.last_entry
        if last is not None:
            problem = _append_problem(last, EpochEntry(*entry))
            if problem is not None:
                raise StoreError(f"cannot append epoch entry: {problem}")
        return EpochCache((*self._entries, entry))

    def truncated_suffix(self, offset: int) -> EpochCache:
        """The entries that start below ``offset``: what remains when the CommitLog is cut at ``offset``
        (an entry starting at ``offset`` or later described bytes that no longer exist)."""
        keep = len(self._entries)
        while keep and self._entries[keep - 1].start_offset >= offset:
            keep -= 1
        return self if keep == len(self._entries) else EpochCache(self._entries[:keep])

    # -- queries ---------------------------------------------------------------------------------------

    def entry_for_epoch(self, epoch: int) -> EpochEntry | None:
        for entry in reversed(self._entries):
            if entry.epoch == epoch:
                return entry
            if entry.epoch < epoch:
                break
        return None

    def end_offset(self, epoch: int, max_offset: int) -> int | None:
        """Where ``epoch``'s range ends: the next entry's start, or ``max_offset`` for the newest epoch;
        None when the cache does not hold ``epoch``."""
        for i in range(len(self._entries) - 1, -1, -1):
            if self._entries[i].epoch == epoch:
                return self._end_of(i, max_offset)
        return None

    def find_by_offset(self, offset: int, max_offset: int) -> EpochEntry | None:
        """The entry whose range holds physical ``offset``: [start, next start) for older entries,
        [start, ``max_offset``] for the newest (the next byte written belongs to it). None below the first
        entry or past ``max_offset``."""
        if offset > max_offset:
            return None
        for entry in reversed(self._entries):
            if entry.start_offset <= offset:
                return entry
        return None

    def _end_of(self, index: int, max_offset: int) -> int:
        if index + 1 < len(self._entries):
            return self._entries[index + 1].start_offset
        start = self._entries[index].start_offset
        if max_offset < start:
            raise StoreError(f"max offset {max_offset} is below the newest epoch entry "
                             f"{self._entries[index]}: cut the cache at the max offset first")
        return max_offset


def consistent_point(local: EpochCache, local_max: int, primary: EpochCache, primary_max: int) -> int:
    """The offset up to which a replica's log is known to equal its primary's, or ``NO_CONSISTENT_POINT``.

    Walk the local entries newest first; at the first epoch the primary also holds with the same start
    offset, the point is min(local end of that epoch, primary end of it), an epoch's end being the next
    entry's start or, for the newest, that side's max offset. Below the point both logs were written by
    the same primary epoch from the same start, so they agree; the replica truncates to the point and
    follows. ``NO_CONSISTENT_POINT`` (-1) when no epoch matches: the logs share nothing provable and the
    replica must refuse to follow rather than re-copy silently. An empty local cache also gives -1; the
    caller decides whether that means "new replica, ship from the primary's min offset".

    ``local_max`` and ``primary_max`` must not be below their cache's newest start offset (StoreError).
    """
    for mine in reversed(local.entries):
        theirs = primary.entry_for_epoch(mine.epoch)
        if theirs is None or theirs.start_offset != mine.start_offset:
            continue
        local_end = local.end_offset(mine.epoch, local_max)
        primary_end = primary.end_offset(theirs.epoch, primary_max)
        assert local_end is not None and primary_end is not None  # both caches hold the epoch
        return min(local_end, primary_end)
    return NO_CONSISTENT_POINT


def _append_problem(last: EpochEntry, entry: EpochEntry) -> str | None:
    if entry.epoch <= last.epoch:
        return f"epoch {entry.epoch} is not greater than the newest epoch {last.epoch} ({entry} after {last})"
    if entry.start_offset <= last.start_offset:
        return (f"start offset {entry.start_offset} is not greater than the newest start offset "
                f"{last.start_offset} ({entry} after {last})")
    return None

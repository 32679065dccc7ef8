"""The epoch cache's rules (store.epoch_cache): appends, truncation, lookups and the consistent point.

The property tests simulate a replica group: nodes take turns as primary under increasing epochs, write,
and replicas copy a prefix of the primary's log and its epoch entries, so two logs can match, lag, fork or
share nothing. The ground truth is each byte's writer (its epoch): the consistent point must be exactly
the length of the common prefix of two logs, and -1 only when they share nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from broker_store.protocol.errors import StoreError
from broker_store.store.epoch_cache import (
    MAX_EPOCH,
    NO_CONSISTENT_POINT,
    EpochCache,
    EpochEntry,
    consistent_point,
)

E = EpochEntry


def cache(*pairs: tuple[int, int]) -> EpochCache:
    return EpochCache(E(*p) for p in pairs)


# -- appends and construction ----------------------------------------------------------------------------

def test_append_needs_strictly_greater_epoch_and_start() -> None:
    c = cache((1, 0), (2, 100))
    assert c.appended(E(3, 200)).entries == (E(1, 0), E(2, 100), E(3, 200))
    for bad in (E(2, 200), E(1, 300), E(3, 100), E(3, 50)):
        with pytest.raises(StoreError, match="cannot append"):
            c.appended(bad)
    assert c.entries == (E(1, 0), E(2, 100))  # unchanged: caches are values
    assert EpochCache().appended(E(0, 0)).entries == (E(0, 0),)


@pytest.mark.parametrize("entries", [
    [(1, 0), (1, 100)], [(1, 0), (2, 0)], [(2, 0), (1, 100)], [(-1, 0)], [(1, -5)], [(MAX_EPOCH + 1, 0)],
])
def test_invalid_entries_refused(entries: list[tuple[int, int]]) -> None:
    with pytest.raises(StoreError):
        cache(*entries)


def test_truncated_suffix_drops_entries_at_or_past_the_offset() -> None:
    c = cache((1, 0), (2, 100), (4, 250))
    assert c.truncated_suffix(300) is c
    assert c.truncated_suffix(251).entries == c.entries
    assert c.truncated_suffix(250).entries == (E(1, 0), E(2, 100))
    assert c.truncated_suffix(101).entries == (E(1, 0), E(2, 100))
    assert c.truncated_suffix(100).entries == (E(1, 0),)
    assert c.truncated_suffix(0).entries == ()


def test_promotion_after_an_epoch_that_wrote_nothing() -> None:
    # epoch 2's primary appended (2, 100) and died before writing: the next primary cuts it off first
    c = cache((1, 0), (2, 100))
    with pytest.raises(StoreError):
        c.appended(E(3, 100))
    assert c.truncated_suffix(100).appended(E(3, 100)).entries == (E(1, 0), E(3, 100))


def test_lookups() -> None:
    c = cache((1, 0), (2, 100), (5, 250))
    assert (c.first_entry, c.last_entry, c.last_epoch, len(c)) == (E(1, 0), E(5, 250), 5, 3)
    assert EpochCache().last_epoch is None and EpochCache().last_entry is None
    assert c.entry_for_epoch(2) == E(2, 100) and c.entry_for_epoch(3) is None and c.entry_for_epoch(9) is None
    assert [c.end_offset(e, 400) for e in (1, 2, 5, 3)] == [100, 250, 400, None]
    assert c.find_by_offset(0, 400) == E(1, 0)
    assert c.find_by_offset(99, 400) == E(1, 0)
    assert c.find_by_offset(100, 400) == E(2, 100)
    assert c.find_by_offset(400, 400) == E(5, 250)  # the next byte written belongs to the newest epoch
    assert c.find_by_offset(401, 400) is None
    assert cache((1, 50)).find_by_offset(10, 400) is None
    with pytest.raises(StoreError, match="below the newest"):
        c.end_offset(5, 200)


# -- consistent point: examples ---------------------------------------------------------------------------

@pytest.mark.parametrize(("local", "local_max", "primary", "primary_max", "point"), [
    # replica behind, same history
    ([(1, 0)], 50, [(1, 0), (2, 100)], 300, 50),
    ([(1, 0), (2, 100)], 150, [(1, 0), (2, 100)], 300, 150),
    # replica level
    ([(1, 0), (2, 100)], 300, [(1, 0), (2, 100)], 300, 300),
    # old primary back with an unreplicated tail of epoch 2; the new primary started epoch 3 at 200
    ([(1, 0), (2, 100)], 250, [(1, 0), (2, 100), (3, 200)], 400, 200),
    # the same epoch number with another start cannot be trusted: fall back to the older epoch
    ([(1, 0), (3, 120)], 250, [(1, 0), (3, 100)], 400, 100),
    # a replica ahead inside the shared newest epoch (primary lost a tail): cut to the primary's end
    ([(1, 0), (2, 100)], 500, [(1, 0), (2, 100)], 300, 300),
    # disjoint: nothing in common
    ([(1, 0)], 100, [(2, 0)], 100, NO_CONSISTENT_POINT),
    ([(1, 0), (2, 10)], 100, [(3, 0), (4, 10)], 100, NO_CONSISTENT_POINT),
    # empty local cache: no point; the caller decides (new replica ships from the primary's min offset)
    ([], 0, [(1, 0)], 100, NO_CONSISTENT_POINT),
])
def test_consistent_point_examples(local: list[tuple[int, int]], local_max: int, primary: list[tuple[int, int]],
                                   primary_max: int, point: int) -> None:
    assert consistent_point(cache(*local), local_max, cache(*primary), primary_max) == point


# -- consistent point: simulated replica groups ------------------------------------------------------------

@dataclass
class Node:
    log: list[int] = field(default_factory=list)
    """The epoch that wrote each unit of the log: units written by one primary at one offset are the same
    bytes wherever they were copied, so equal labels mean equal content."""
    epochs: EpochCache = field(default_factory=EpochCache)


def common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def check_pair(local: Node, primary: Node) -> int:
    truth = common_prefix(local.log, primary.log)
    point = consistent_point(local.epochs, len(local.log), primary.epochs, len(primary.log))
    if truth:
        assert point == truth, (local, primary)
    else:  # nothing shared: refuse, or (a matching empty epoch) start from 0; never claim more
        assert point in (0, NO_CONSISTENT_POINT), (local, primary)
    event("matching" if truth == len(local.log) else "diverging" if truth else "disjoint")
    return point


Step = tuple[int, int, list[tuple[int, int, bool]]]
steps = st.lists(st.tuples(st.integers(0, 2), st.integers(0, 4),
                           st.lists(st.tuples(st.integers(0, 2), st.integers(0, 100), st.booleans()), max_size=3)),
                 max_size=12)


@given(steps)
def test_consistent_point_in_simulated_groups(history: list[Step]) -> None:
    nodes = [Node(), Node(), Node()]
    epoch = 0
    for leader_index, writes, syncs in history:
        epoch += 1
        leader = nodes[leader_index]
        # promotion: cut the cache at the max offset, append (new epoch, max offset), then take writes
        leader.epochs = leader.epochs.truncated_suffix(len(leader.log)).appended(E(epoch, len(leader.log)))
        leader.log += [epoch] * writes
        for follower_index, percent, mirror_edge in syncs:
            follower = nodes[follower_index]
            if follower is leader:
                continue
            check_pair(follower, leader)
            # the replica truncates to the common point, copies some of the rest and the entries it covers
            shared = common_prefix(follower.log, leader.log)
            copied = shared + (len(leader.log) - shared) * percent // 100
            follower.log = leader.log[:copied]
            follower.epochs = EpochCache(e for e in leader.epochs.entries
                                         if e.start_offset < copied or (mirror_edge and e.start_offset == copied))
    for node in nodes:
        for offset, writer in enumerate(node.log):
            found = node.epochs.find_by_offset(offset, len(node.log))
            assert found is not None and found.epoch == writer
    for local in nodes:
        for primary in nodes:
            check_pair(local, primary)


@given(st.lists(st.integers(1, 50), min_size=1, max_size=8), st.data())
def test_a_replica_holding_a_prefix_matches_at_its_end(lengths: list[int], data: st.DataObject) -> None:
    entries, start = [], 0
    for epoch, length in enumerate(lengths, start=1):
        entries.append(E(epoch * 2, start))
        start += length
    primary = EpochCache(entries)
    copied = data.draw(st.integers(1, start))
    replica = EpochCache(e for e in entries if e.start_offset < copied)
    assert consistent_point(replica, copied, primary, start) == copied


@given(st.lists(st.tuples(st.integers(1, 10), st.integers(1, 50)), min_size=1, max_size=6),
       st.lists(st.tuples(st.integers(1, 10), st.integers(1, 50)), min_size=1, max_size=6))
def test_disjoint_epochs_never_match(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> None:
    # odd epochs on one side, even on the other: no epoch in common
    def build(steps: list[tuple[int, int]], parity: int) -> tuple[EpochCache, int]:
        entries, epoch, start = [], parity, 0
        for gap, length in steps:
            epoch += 2 * gap
            entries.append(E(epoch, start))
            start += length
        return EpochCache(entries), start

    (local, local_max), (primary, primary_max) = build(a, 1), build(b, 2)
    assert consistent_point(local, local_max, primary, primary_max) == NO_CONSISTENT_POINT

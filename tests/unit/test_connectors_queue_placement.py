"""connectors.replication.queue_placement: decisions never move, new queues spread evenly, re-runs decide alike."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from broker_store.client import MessageQueue
from connectors.replication.queue_placement import LEAST_LOADED, PRESERVED, LinkPlacements, Placement, TargetQueue


def _sources(topic: str, n: int, broker: str = "src-a") -> list[MessageQueue]:
    return [MessageQueue(topic, broker, i) for i in range(n)]


def _targets(n: int, broker: str = "dst-a") -> list[TargetQueue]:
    return [TargetQueue(broker, i) for i in range(n)]


def _place_all(p: LinkPlacements, topic: str, n_src: int, n_dst: int, *, preserve: bool = True,
               target_topic: str = "T") -> list[Placement]:
    sources = _sources(topic, n_src)
    return p.place(target_topic, sources, source_topic_queues=sources, target_queues=_targets(n_dst),
                   preserve=preserve)


def test_equal_counts_keep_positions() -> None:
    new = _place_all(LinkPlacements(), "A", 4, 4)
    assert [(d.source.queue_id, d.target.queue_id, d.reason) for d in new] == [(i, i, PRESERVED) for i in range(4)]


def test_preserve_off_spreads_least_loaded() -> None:
    new = _place_all(LinkPlacements(), "A", 4, 4, preserve=False)
    assert sorted(d.target.queue_id for d in new) == [0, 1, 2, 3]
    assert {d.reason for d in new} == {LEAST_LOADED}


def test_source_growth_keeps_old_queues_and_spreads_new_ones() -> None:
    p = LinkPlacements()
    before = {d.source: d.target for d in _place_all(p, "A", 4, 4)}
    new = _place_all(p, "A", 8, 4)
    assert [d.source.queue_id for d in new] == [4, 5, 6, 7]  # only the new queues are decided
    for source, target in before.items():
        assert p.get(source, "T") is not None and p.get(source, "T").target == target  # type: ignore[union-attr]
    assert sorted(p.load("T").values()) == [2, 2, 2, 2]


def test_eight_onto_three_is_even() -> None:
    p = LinkPlacements()
    _place_all(p, "A", 8, 3)
    assert sorted(p.load("T").values()) == [2, 3, 3]


def test_target_shrink_and_growth_move_nothing() -> None:
    p = LinkPlacements()
    first = {d.source: d.target for d in _place_all(p, "A", 4, 4)}
    assert _place_all(p, "A", 4, 2) == []  # target shrank: every queue is decided already
    assert _place_all(p, "A", 4, 8) == []  # and grew
    assert {d.source: d.target for d in p.decided()} == first


def test_restart_from_persisted_decisions_decides_the_same() -> None:
    p = LinkPlacements()
    _place_all(p, "A", 5, 3)
    restarted = LinkPlacements(p.decided())
    assert restarted.decided() == p.decided()
    # a re-run of a batch whose new decisions were not persisted decides them the same way
    again = LinkPlacements(p.decided()[:3])
    assert [d.target for d in _place_all(again, "A", 5, 3)] == [d.target for d in p.decided()[3:]]


def test_several_source_topics_into_one_share_the_load() -> None:
    p = LinkPlacements()
    _place_all(p, "A", 4, 4)
    _place_all(p, "B", 2, 4, preserve=False)
    _place_all(p, "C", 2, 4, preserve=False)
    assert sorted(p.load("T").values()) == [2, 2, 2, 2]


def test_first_decision_stands_when_loaded_twice() -> None:
    a = Placement(MessageQueue("A", "b", 0), "T", TargetQueue("d", 0), PRESERVED)
    b = Placement(MessageQueue("A", "b", 0), "T", TargetQueue("d", 1), LEAST_LOADED)
    p = LinkPlacements([a, b])
    assert p.get(a.source, "T") == a
    assert p.load("T") == {TargetQueue("d", 0): 1}


def test_no_target_queue_decides_nothing() -> None:
    assert _place_all(LinkPlacements(), "A", 4, 0) == []


@settings(max_examples=200, deadline=None)
@given(steps=st.lists(st.tuples(st.integers(1, 12), st.integers(1, 8), st.booleans()), min_size=1, max_size=6))
def test_decisions_never_change_and_load_stays_balanced(steps: list[tuple[int, int, bool]]) -> None:
    p = LinkPlacements()
    seen: dict[MessageQueue, TargetQueue] = {}
    for n_src, n_dst, preserve in steps:
        _place_all(p, "A", max(n_src, len(seen)), n_dst, preserve=preserve)  # sources only grow
        for d in p.decided():
            assert seen.setdefault(d.source, d.target) == d.target
    if all(not preserve for _, _, preserve in steps) and len({n for _, n, _ in steps}) == 1:
        loads = Counter(p.load("T").values())
        assert max(p.load("T").values()) - min(p.load("T").values()) <= 1, loads


def test_two_source_groups_into_one_target_group_of_as_many_queues_get_one_each() -> None:
    """2 source brokers x 4 queues into 1 target broker sized by config sync (8 queues): every
    source queue has its own target queue, in (broker, queue id) order."""
    sources = _sources("A", 4, "src-a") + _sources("A", 4, "src-b")
    new = LinkPlacements().place("T", sources, source_topic_queues=sources, target_queues=_targets(8),
                                 preserve=True)
    assert [(d.source.broker_name, d.source.queue_id, d.target.queue_id) for d in new] == [
        (b, i, n) for n, (b, i) in enumerate((b, i) for b in ("src-a", "src-b") for i in range(4))]
    assert len({d.target for d in new}) == 8


def test_positions_taken_by_earlier_decisions_fall_back_to_a_free_queue() -> None:
    """A source group added later that sorts before the first one: its positions are taken already (by
    the first group's queues), so its queues go to the free target queues, not onto taken ones."""
    p = LinkPlacements()
    first = _sources("A", 4, "src-b")
    p.place("T", first, source_topic_queues=first, target_queues=_targets(4), preserve=True)
    grown = _sources("A", 4, "src-a") + first
    new = p.place("T", grown, source_topic_queues=grown, target_queues=_targets(8), preserve=True)
    assert len(new) == 4 and sorted(d.target.queue_id for d in new) == [4, 5, 6, 7]
    assert set(p.load("T").values()) == {1}


@settings(max_examples=300, deadline=None)
@given(steps=st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6), st.integers(0, 4), st.booleans()),
                      min_size=1, max_size=6))
def test_enough_target_queues_mean_one_target_queue_per_source_queue(
        steps: list[tuple[int, int, int, bool]]) -> None:
    """Source groups a and b grow (each step at least what they had); the target topic has at least as many
    queues as the source topic at every step (sometimes more): no target queue is ever shared."""
    p = LinkPlacements()
    a = b = 0
    for grow_a, grow_b, spare, preserve in steps:
        a, b = a + grow_a, b + grow_b
        sources = _sources("A", a, "src-b") + _sources("A", b, "src-a")  # src-a sorts first, grows later
        p.place("T", sources, source_topic_queues=sources, target_queues=_targets(a + b + spare),
                preserve=preserve)
        assert all(n == 1 for n in p.load("T").values()), p.load("T")
        assert len(p.decided()) == a + b

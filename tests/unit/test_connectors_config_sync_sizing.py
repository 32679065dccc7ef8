"""connectors.config_sync.sizing and its use by plan: a target topic gets at least one queue per source queue,
whatever the two clusters' broker layouts. Pure."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from connectors.config_sync.plan import ChangeStatus, creation_for, plan_changes
from connectors.config_sync.sizing import per_group, size_target_topic
from connectors.config_sync.state import ClusterState, TopicState
from connectors.core.sync_settings import ConfigSyncSettings
from connectors.core.topic_mapping import TopicMapper
from connectors.core.topic_settings import TopicMappingConfig

MAPPER = TopicMapper(TopicMappingConfig.model_validate({
    "explicit": [{"source": ["EU", "US"], "target": "All"}], "include": [{"pattern": "Orders.*"}]}))


def spread(name: str, **groups: tuple[int, int]) -> TopicState:
    """A topic held by the broker groups ``groups`` (name -> (read, write))."""
    return TopicState(name, max(r for r, _ in groups.values()), max(w for _, w in groups.values()), 6,
                      brokers=tuple(sorted(groups)), queue_nums=groups)


def cluster(*topics: TopicState, brokers: tuple[str, ...]) -> ClusterState:
    return ClusterState(1, {t.name: t for t in topics}, {}, brokers)


def test_two_source_groups_into_one_target_group_get_the_total() -> None:
    """The layout docs/replicator.md names ("Checkpoints and config sync"): 2 brokers x 4 queues into 1 broker: 8 target
    queues, not 4."""
    sizing = size_target_topic([spread("Orders", a=(4, 4), b=(4, 4))], 1, 1024)
    assert (sizing.read_queue_nums, sizing.write_queue_nums, sizing.capped) == (8, 8, False)
    changes = plan_changes(cluster(spread("Orders", a=(4, 4), b=(4, 4)), brokers=("a", "b")),
                           cluster(brokers=("t",)), MAPPER, ConfigSyncSettings())
    assert [(c.kind.value, c.read_queue_nums, c.write_queue_nums) for c in changes] == [("create_topic", 8, 8)]


def test_totals_are_spread_over_the_target_groups_rounding_up() -> None:
    assert [per_group(8, n) for n in (1, 2, 3, 4, 8, 9)] == [8, 4, 3, 2, 1, 1]
    assert per_group(8, 0) == 8  # no target group known: one
    sizing = size_target_topic([spread("Orders", a=(8, 8), b=(2, 2))], 3, 1024)
    assert (sizing.read_queue_nums, sizing.source_read_total) == (4, 10)  # 3 x 4 >= 10
    # a layout alike on both sides keeps the per-group count (the 1:1 case does not change)
    same = size_target_topic([spread("Orders", a=(4, 4), b=(4, 4))], 2, 1024)
    assert (same.read_queue_nums, same.write_queue_nums) == (4, 4)


def test_read_and_write_are_sized_apart() -> None:
    sizing = size_target_topic([spread("Orders", a=(8, 4), b=(8, 2))], 1, 1024)
    assert (sizing.read_queue_nums, sizing.write_queue_nums) == (16, 6)


def test_several_topics_into_one_take_the_largest_total() -> None:
    eu, us = spread("EU", a=(4, 4), b=(4, 4)), spread("US", a=(6, 6))
    sizing = size_target_topic([eu, us], 1, 1024)
    assert sizing.write_queue_nums == 8
    created = creation_for("All", cluster(eu, us, brokers=("a", "b")), MAPPER, ConfigSyncSettings(), ["t"])
    assert created is not None and (created.status, created.write_queue_nums) == (ChangeStatus.PLANNED, 8)


def test_max_queue_nums_caps_a_spread_count_and_refuses_a_source_group_over_it() -> None:
    capped = size_target_topic([spread("Orders", a=(24, 24), b=(24, 24))], 1, 32)
    assert (capped.read_queue_nums, capped.capped) == (32, True) and not capped.refusal
    refused = size_target_topic([spread("Orders", a=(40, 40))], 2, 32)
    assert refused.refusal == "40 queues exceed max_queue_nums 32"
    source = cluster(spread("Orders", a=(24, 24), b=(24, 24)), brokers=("a", "b"))
    created = creation_for("Orders", source, MAPPER, ConfigSyncSettings(max_queue_nums=32), ["t"])
    assert created is not None and created.status is ChangeStatus.PLANNED and created.write_queue_nums == 32
    assert "capped at max_queue_nums" in created.detail and "share" in created.detail


def test_an_existing_smaller_target_topic_grows_and_never_shrinks() -> None:
    """The target topic made by the old per-group rule (4) grows to the total (8); a later smaller source
    never shrinks it."""
    source = cluster(spread("Orders", a=(4, 4), b=(4, 4)), brokers=("a", "b"))
    grow = plan_changes(source, cluster(spread("Orders", t=(4, 4)), brokers=("t",)), MAPPER, ConfigSyncSettings())
    assert [(c.kind.value, c.status.value, c.write_queue_nums) for c in grow] == [("update_topic", "planned", 8)]
    smaller = cluster(spread("Orders", a=(2, 2), b=(2, 2)), brokers=("a", "b"))
    kept = plan_changes(smaller, cluster(spread("Orders", t=(8, 8)), brokers=("t",)), MAPPER, ConfigSyncSettings())
    assert [(c.kind.value, c.status.value) for c in kept] == [("shrink", "refused")]
    assert "4/4 want 4/4 per target broker group" in kept[0].detail


def test_creation_for_spreads_over_the_target_groups_it_is_given() -> None:
    source = cluster(spread("Orders", a=(4, 4), b=(4, 4)), brokers=("a", "b"))
    for brokers, per in (([], 8), (["t"], 8), (["t1", "t2"], 4), (["t1", "t2", "t3"], 3)):
        created = creation_for("Orders", source, MAPPER, ConfigSyncSettings(), brokers)
        assert created is not None and created.write_queue_nums == per, brokers
        target = cluster(brokers=tuple(brokers) or ("t",))
        assert plan_changes(source, target, MAPPER, ConfigSyncSettings()) == [created]


def test_per_broker_counts_survive_json_and_old_json_still_reads() -> None:
    topic = spread("Orders", a=(4, 4), b=(2, 3))
    again = TopicState.from_json(topic.to_json())
    assert again == topic and (again.total_read_queue_nums, again.total_write_queue_nums) == (6, 7)
    old = {k: v for k, v in topic.to_json().items() if k != "queueNums"}
    legacy = TopicState.from_json(old)
    assert legacy.queue_nums == {} and legacy.total_read_queue_nums == 8  # every group taken at the largest count


@settings(max_examples=300, deadline=None)
@given(groups=st.lists(st.tuples(st.integers(1, 64), st.integers(1, 64)), min_size=1, max_size=6),
       target_groups=st.integers(1, 6), cap=st.integers(1, 1024))
def test_the_target_holds_one_queue_per_source_queue_unless_capped(groups: list[tuple[int, int]],
                                                                    target_groups: int, cap: int) -> None:
    topic = spread("Orders", **{f"g{i}": counts for i, counts in enumerate(groups)})
    sizing = size_target_topic([topic], target_groups, cap)
    if sizing.refusal:
        assert max(max(g) for g in groups) > cap
        return
    assert max(sizing.read_queue_nums, sizing.write_queue_nums) <= cap
    if not sizing.capped:
        assert sizing.read_queue_nums * target_groups >= topic.total_read_queue_nums
        assert sizing.write_queue_nums * target_groups >= topic.total_write_queue_nums
        # and no more than one group's worth of spare queues
        assert (sizing.write_queue_nums - 1) * target_groups < topic.total_write_queue_nums


def test_a_target_that_gains_broker_groups_reports_no_shrink() -> None:
    """1 x 8 into a target that had one group and now has two: 4 per group would do, but no source queue went
    away, so nothing is refused (the new group gets the topic, never-shrink keeps 8)."""
    source = cluster(spread("Orders", a=(8, 8)), brokers=("a",))
    target = cluster(spread("Orders", t1=(8, 8)), brokers=("t1", "t2"))
    changes = plan_changes(source, target, MAPPER, ConfigSyncSettings())
    assert [(c.kind.value, c.status.value, c.write_queue_nums) for c in changes] == [("create_topic", "planned", 8)]
    both = cluster(spread("Orders", t1=(8, 8), t2=(8, 8)), brokers=("t1", "t2"))
    assert plan_changes(source, both, MAPPER, ConfigSyncSettings()) == []
    # the source really shrinking is still refused and reported
    shrunk = plan_changes(cluster(spread("Orders", a=(4, 4)), brokers=("a",)), both, MAPPER, ConfigSyncSettings())
    assert [(c.kind.value, c.status.value) for c in shrunk] == [("shrink", "refused")]

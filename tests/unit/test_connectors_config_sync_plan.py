"""connectors.config_sync.plan: what changes on the target for a source configuration (pure)."""

from __future__ import annotations

from connectors.config_sync.evidence import Evidence
from connectors.config_sync.plan import ChangeKind, ChangeStatus, ConfigChange, creation_for, plan_changes
from connectors.config_sync.state import ClusterState, TopicState
from connectors.core.sync_settings import ConfigSyncSettings
from connectors.core.topic_mapping import TopicMapper
from connectors.core.topic_settings import TopicMappingConfig

MAPPER = TopicMapper(TopicMappingConfig.model_validate({
    "explicit": [{"source": ["EU", "US"], "target": "All"}],
    "include": [{"pattern": "App_.*", "target": "DR_{topic}"}]}))


def cluster(*topics: TopicState, groups: dict[str, dict[str, object]] | None = None,
            brokers: tuple[str, ...] = ("b1",)) -> ClusterState:
    return ClusterState(1, {t.name: t for t in topics}, groups or {}, brokers)


def topic(name: str, read: int, write: int | None = None, perm: int = 6, brokers: tuple[str, ...] = ("b1",),
          **attributes: str) -> TopicState:
    return TopicState(name, read, read if write is None else write, perm, False, attributes, brokers)


def deleted(*topics: str) -> Evidence:
    return Evidence(deleted_topics={t: "absent twice" for t in topics})


def kinds(changes: list[ConfigChange]) -> list[tuple[str, str, str]]:
    return [(c.kind.value, c.subject, c.status.value) for c in changes]


def test_new_topic_renamed_with_the_same_queue_count_and_attributes() -> None:
    changes = plan_changes(cluster(topic("App_1", 8, tier="gold"), topic("Other", 4)), cluster(), MAPPER,
                           ConfigSyncSettings())
    assert kinds(changes) == [("create_topic", "DR_App_1", "planned")]
    assert (changes[0].read_queue_nums, changes[0].write_queue_nums, dict(changes[0].attributes)) == \
           (8, 8, {"tier": "gold"})


def test_queues_grow_but_never_shrink() -> None:
    grow = plan_changes(cluster(topic("App_1", 16)), cluster(topic("DR_App_1", 8)), MAPPER, ConfigSyncSettings())
    assert kinds(grow) == [("update_topic", "DR_App_1", "planned")] and grow[0].read_queue_nums == 16
    shrink = plan_changes(cluster(topic("App_1", 4, 12)), cluster(topic("DR_App_1", 8)), MAPPER, ConfigSyncSettings())
    assert kinds(shrink) == [("shrink", "DR_App_1", "refused"), ("update_topic", "DR_App_1", "planned")]
    assert (shrink[1].read_queue_nums, shrink[1].write_queue_nums) == (8, 12)  # growth kept, shrink refused
    same = plan_changes(cluster(topic("App_1", 8)), cluster(topic("DR_App_1", 8)), MAPPER, ConfigSyncSettings())
    assert same == []


def test_several_sources_into_one_target_take_the_largest_count() -> None:
    changes = plan_changes(cluster(topic("EU", 4), topic("US", 8)), cluster(), MAPPER, ConfigSyncSettings())
    assert kinds(changes) == [("create_topic", "All", "planned")] and changes[0].sources == ("EU", "US")
    assert changes[0].write_queue_nums == 8


def test_missing_on_a_target_broker_is_created_there() -> None:
    changes = plan_changes(cluster(topic("App_1", 8)), cluster(topic("DR_App_1", 8), brokers=("b1", "b2")),
                           MAPPER, ConfigSyncSettings())
    assert kinds(changes) == [("create_topic", "DR_App_1", "planned")] and "b2" in changes[0].detail


def test_too_many_queues_refused() -> None:
    changes = plan_changes(cluster(topic("App_1", 64)), cluster(), MAPPER, ConfigSyncSettings(max_queue_nums=32))
    assert kinds(changes) == [("create_topic", "DR_App_1", "refused")]


def test_deletion_only_when_enabled_and_only_when_no_source_is_left() -> None:
    target = cluster(topic("DR_App_1", 8), topic("All", 8))
    off = plan_changes(cluster(topic("US", 8)), target, MAPPER, ConfigSyncSettings(), deleted("App_1", "EU"))
    assert [(c.kind, c.subject, c.status) for c in off if c.kind is ChangeKind.DELETE_TOPIC] == [
        (ChangeKind.DELETE_TOPIC, "DR_App_1", ChangeStatus.DISABLED)]  # "All" still has US
    on = plan_changes(cluster(topic("US", 8)), target, MAPPER, ConfigSyncSettings(propagate_deletion=True),
                      deleted("App_1"))
    assert [(c.subject, c.status) for c in on if c.kind is ChangeKind.DELETE_TOPIC] == [
        ("DR_App_1", ChangeStatus.PLANNED)]


def test_subscription_groups_created_and_updated_system_groups_skipped() -> None:
    source = cluster(groups={"billing": {"groupName": "billing", "retryMaxTimes": 3},
                             "audit": {"groupName": "audit"},
                             "CID_RMQ_SYS_REPLICATOR_l": {"groupName": "CID_RMQ_SYS_REPLICATOR_l"}})
    target = cluster(groups={"billing": {"groupName": "billing", "retryMaxTimes": 16},
                             "audit": {"groupName": "audit"}})
    assert kinds(plan_changes(source, target, MAPPER, ConfigSyncSettings())) == [
        ("update_group", "billing", "planned")]
    assert plan_changes(source, cluster(), MAPPER, ConfigSyncSettings(subscription_groups=False)) == []


def test_an_explicit_group_missing_on_the_source_is_reported_once_the_view_is_whole() -> None:
    settings = ConfigSyncSettings(groups={"explicit": ["billing", "ghost"]})
    source = cluster(groups={"billing": {"groupName": "billing"}})
    changes = plan_changes(source, cluster(), MAPPER, settings)
    assert kinds(changes) == [("create_group", "billing", "planned"), ("unknown_group", "ghost", "refused")]
    assert "no subscription group of that name on the source" in changes[1].detail
    # a source broker group did not answer: it might hold the group, so nothing is claimed
    partial = ClusterState(1, {}, {}, ("b1", "b2"), {"b2": "timeout"})
    assert plan_changes(partial, cluster(), MAPPER, settings) == []


def test_group_deleted_on_the_source_only_when_enabled_and_only_if_the_link_copies_it() -> None:
    settings = ConfigSyncSettings(groups={"include": ["app_.*"]})
    source = cluster(groups={"app_kept": {"groupName": "app_kept"}})
    target = cluster(groups={"app_kept": {"groupName": "app_kept"}, "app_gone": {"groupName": "app_gone"},
                             "other_gone": {"groupName": "other_gone"}, "target_only": {"groupName": "target_only"}})
    previous = Evidence(deleted_groups={g: "gone" for g in ["app_gone", "other_gone", "app_never_on_target"]})
    off = plan_changes(source, target, MAPPER, settings, previous)
    assert kinds(off) == [("delete_group", "app_gone", "disabled")]  # other_gone is not selected
    on = plan_changes(source, target, MAPPER, settings.model_copy(update={"propagate_deletion": True}), previous)
    assert kinds(on) == [("delete_group", "app_gone", "planned")]  # target_only was never on the source
    # groups not copied at all: nothing deleted either
    assert plan_changes(cluster(), target, MAPPER, ConfigSyncSettings(subscription_groups=False,
                                                                      propagate_deletion=True),
                        previous) == []


def test_creation_for_is_the_create_rule_of_plan_changes() -> None:
    source = cluster(topic("EU", 4, tier="gold"), topic("US", 8), topic("App_big", 64), topic("Other", 2))
    planned = plan_changes(source, cluster(), MAPPER, ConfigSyncSettings(max_queue_nums=32))
    for change in planned:
        assert creation_for(change.subject, source, MAPPER, ConfigSyncSettings(max_queue_nums=32)) == change
    created = creation_for("All", source, MAPPER, ConfigSyncSettings())
    assert created is not None and (created.status, created.write_queue_nums, created.sources) == (
        ChangeStatus.PLANNED, 8, ("EU", "US"))
    assert creation_for("Nothing_maps_here", source, MAPPER, ConfigSyncSettings()) is None


def test_permission_and_attribute_changes_are_updates() -> None:
    target = cluster(topic("DR_App_1", 8, perm=6, tier="gold"))
    inherit = plan_changes(cluster(topic("App_1", 8, perm=7, tier="gold")), target, MAPPER, ConfigSyncSettings())
    assert kinds(inherit) == [("update_topic", "DR_App_1", "planned")] and inherit[0].perm == 7
    retiered = plan_changes(cluster(topic("App_1", 8, perm=6, tier="silver")), target, MAPPER, ConfigSyncSettings())
    assert kinds(retiered) == [("update_topic", "DR_App_1", "planned")]
    assert dict(retiered[0].attributes) == {"tier": "silver"} and retiered[0].read_queue_nums == 8
    assert plan_changes(cluster(topic("App_1", 8, perm=6, tier="gold")), target, MAPPER, ConfigSyncSettings()) == []


def test_an_unknown_source_topic_defers_and_never_deletes_its_target() -> None:
    target = cluster(topic("DR_App_1", 8), topic("All", 8))
    unknown = Evidence(unknown_topics={"App_1": "broker group b1: not registered"},
                       deleted_topics={"EU": "absent twice"})
    for settings in (ConfigSyncSettings(), ConfigSyncSettings(propagate_deletion=True)):
        changes = plan_changes(ClusterState(1, {}, {}, (), {"b1": "gone"}), target, MAPPER, settings, unknown)
        assert kinds(changes) == [("delete_topic", "All", "deferred" if settings.propagate_deletion else "disabled"),
                                  ("source_topic_unknown", "DR_App_1", "deferred")]
        assert "not registered" in changes[1].detail


def test_a_deleted_topic_sharing_its_target_with_an_unknown_one_is_not_deleted() -> None:
    changes = plan_changes(cluster(), cluster(topic("All", 8)), MAPPER, ConfigSyncSettings(propagate_deletion=True),
                           Evidence(deleted_topics={"EU": "absent twice"}, unknown_topics={"US": "b2: timeout"}))
    assert kinds(changes) == [("source_topic_unknown", "All", "deferred")]


def test_a_deletion_carries_the_evidence_and_the_queue_counts_it_removes() -> None:
    changes = plan_changes(cluster(), cluster(topic("DR_App_1", 8, 12)), MAPPER,
                           ConfigSyncSettings(propagate_deletion=True), deleted("App_1"))
    assert kinds(changes) == [("delete_topic", "DR_App_1", "planned")]
    assert (changes[0].read_queue_nums, changes[0].write_queue_nums) == (8, 12)
    assert changes[0].detail == "source topic App_1 absent twice"


def test_a_partial_target_view_defers_topic_creation_and_growth_not_groups() -> None:
    target = ClusterState(1, {"DR_App_2": topic("DR_App_2", 4)}, {}, ("b1",), {"b2": "not registered"})
    source = cluster(topic("App_1", 8), topic("App_2", 8), groups={"billing": {"groupName": "billing"}})
    changes = plan_changes(source, target, MAPPER, ConfigSyncSettings())
    assert kinds(changes) == [("create_topic", "DR_App_1", "deferred"), ("update_topic", "DR_App_2", "deferred"),
                              ("create_group", "billing", "planned")]
    assert "target b2: not registered" in changes[0].detail


def test_a_recreated_topic_never_has_fewer_queues_than_before_its_deletion() -> None:
    changes = plan_changes(cluster(topic("App_1", 4)), cluster(), MAPPER, ConfigSyncSettings(),
                           queue_floors={"DR_App_1": (8, 16)})
    assert kinds(changes) == [("create_topic", "DR_App_1", "planned")]
    assert (changes[0].read_queue_nums, changes[0].write_queue_nums) == (8, 16)


def test_the_write_permission_is_the_targets_own_a_fenced_source_never_fences_the_target() -> None:
    # a switchover fences A by taking the write bit away: config sync must not copy that to B, where the
    # producers go; nor give write back to a target fenced by a failback
    writable = cluster(topic("DR_App_1", 8, perm=6))
    assert plan_changes(cluster(topic("App_1", 8, perm=4)), writable, MAPPER, ConfigSyncSettings()) == []
    fenced = cluster(topic("DR_App_1", 8, perm=4))
    assert plan_changes(cluster(topic("App_1", 8, perm=6)), fenced, MAPPER, ConfigSyncSettings()) == []
    created = plan_changes(cluster(topic("App_1", 8, perm=4)), cluster(), MAPPER, ConfigSyncSettings())
    assert kinds(created) == [("create_topic", "DR_App_1", "planned")] and created[0].perm == 6

"""TopicMapper: every mapping shape of a link, precedence rules, system topics, determinism."""

from __future__ import annotations

import pickle
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from connectors.core.config import parse_replicator_config
from connectors.core.errors import TopicMappingError
from connectors.core.topic_mapping import SYSTEM_TOPICS, TopicMapper, is_system_topic
from connectors.core.topic_settings import TopicMappingConfig


def mapper(reserved: tuple[str, ...] = (), **mapping: Any) -> TopicMapper:
    return TopicMapper(TopicMappingConfig.model_validate(mapping), reserved_names=reserved)


def test_same_name_renamed_and_many_to_one() -> None:
    m = mapper(explicit=[{"source": "Orders"}, {"source": "Pay", "target": "PayDR"},
                         {"source": ["EU", "US"], "target": "All"}, {"source": "APAC", "target": "All"}])
    assert m.select(["Orders", "Pay", "EU", "US", "APAC", "Other"]) == {
        "APAC": "All", "EU": "All", "Orders": "Orders", "Pay": "PayDR", "US": "All"}
    assert m.target_for("Other") is None
    assert m.missing_explicit(["Orders", "Pay"]) == ["APAC", "EU", "US"]


def test_regex_is_anchored_full_match_and_picks_up_new_topics() -> None:
    m = mapper(include=["Metrics_.*"])
    assert m.target_for("Metrics_cpu") == "Metrics_cpu"
    assert m.target_for("xMetrics_cpu") is None        # no search semantics
    assert m.target_for("Metrics") is None
    assert m.select(["Metrics_a"]) == {"Metrics_a": "Metrics_a"}
    # a topic created later shows up on the next refresh
    assert m.select(["Metrics_a", "Metrics_new"]) == {"Metrics_a": "Metrics_a", "Metrics_new": "Metrics_new"}
    assert mapper(include=["a|b"]).target_for("ab") is None  # alternation anchored as a whole


def test_exclusion_wins_over_include_and_all_topics() -> None:
    m = mapper(include=["Metrics_.*"], exclude=[".*_debug"])
    assert m.target_for("Metrics_debug") is None
    m = mapper(all_topics=True, exclude=["Tmp.*"])
    assert m.select(["A", "Tmp1", "B"]) == {"A": "A", "B": "B"}


def test_explicit_wins_over_regex_and_first_include_rule_wins() -> None:
    m = mapper(explicit=[{"source": "Audit_main", "target": "AuditMain"}],
               include=[{"pattern": "Audit_.*", "target": "DR_{topic}"}, {"pattern": ".*", "target": "Rest"}])
    assert m.target_for("Audit_main") == "AuditMain"
    assert m.target_for("Audit_x") == "DR_Audit_x"
    assert m.target_for("Zed") == "Rest"


def test_whole_cluster_skips_system_and_reserved_topics() -> None:
    m = mapper(reserved=("source", "source-a"), all_topics=True)
    topics = ["Orders", "TBW102", "SCHEDULE_TOPIC_XXXX", "%RETRY%g1", "%DLQ%g1", "rmq_sys_trace",
              "RMQ_SYS_TRANS_HALF_TOPIC", "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT", "BenchmarkTest",
              "TRANS_CHECK_MAX_TIME_TOPIC", "DefaultCluster", "source", "source-a", "source-b"]
    assert m.select(topics) == {"Orders": "Orders", "source-b": "source-b"}
    everything = mapper(reserved=("source",), include=[".*"]).select(topics)
    assert everything == {"Orders": "Orders", "source-a": "source-a", "source-b": "source-b"}


def test_explicit_may_name_a_system_topic() -> None:
    m = mapper(explicit=[{"source": "rmq_sys_replicator_heartbeat"}], all_topics=True)
    assert m.target_for("rmq_sys_replicator_heartbeat") == "rmq_sys_replicator_heartbeat"
    assert is_system_topic("rmq_sys_replicator_heartbeat") and all(is_system_topic(t) for t in SYSTEM_TOPICS)


def test_template_producing_invalid_topic_raises() -> None:
    m = mapper(include=[{"pattern": "L.*", "target": "DR_{topic}"}])
    with pytest.raises(TopicMappingError, match="invalid target"):
        m.target_for("L" * 126)


def test_same_topic_pair_both_directions() -> None:
    link = {"topics": {"explicit": [{"source": "Orders"}]}, "delta_location": "d"}
    config = parse_replicator_config({
        "clusters": [{"name": "A", "namesrv": "h:1"}, {"name": "B", "namesrv": "h:2"}],
        "links": [{**link, "name": "ab", "source": "A", "target": "B", "checkpoint_location": "c/ab"},
                  {**link, "name": "ba", "source": "B", "target": "A", "checkpoint_location": "c/ba"}],
    })
    forward, backward = (TopicMapper(link.topics) for link in config.links)
    assert forward.select(["Orders"]) == backward.select(["Orders"]) == {"Orders": "Orders"}


def link_mapper(topics: dict[str, Any], checkpoints: dict[str, Any] | None = None) -> TopicMapper:
    """The mapper of a link as the jobs build it (the link hands its checkpoint group selection to its mapping)."""
    config = parse_replicator_config({
        "clusters": [{"name": "A", "namesrv": "h:1"}, {"name": "B", "namesrv": "h:2"}],
        "links": [{"name": "ab", "source": "A", "target": "B", "checkpoint_location": "c/ab", "delta_location": "d",
                   "topics": topics,
                   **({"checkpoints": checkpoints} if checkpoints is not None else {})}],
    })
    link = config.links[0]
    return TopicMapper(pickle.loads(pickle.dumps(link.topics)))  # as executors get it


def test_group_retry_and_dlq_topics_travel_with_checkpointed_groups() -> None:
    """The %RETRY% and %DLQ% topics of every group checkpointed by name or pattern, by default, under their own
    names (groups keep theirs on the target); other system topics, SCHEDULE_TOPIC_XXXX included, still stay
    behind. The default selection (every group) moves no group's topics: it would take the whole cluster's."""
    topics = {"explicit": [{"source": "Orders", "target": "OrdersDR"}]}
    names = ["Orders", "%RETRY%billing", "%DLQ%billing", "%RETRY%CID_RMQ_SYS_REPLICATOR_ab", "SCHEDULE_TOPIC_XXXX",
             "%RETRY%", "rmq_sys_x"]
    m = link_mapper(topics, {"groups": {"include": [".*"]}})
    assert m.select(names) == {
        "%DLQ%billing": "%DLQ%billing", "%RETRY%billing": "%RETRY%billing", "Orders": "OrdersDR"}
    assert link_mapper(topics).select(names) == {"Orders": "OrdersDR"}


def test_group_topics_follow_the_group_selection_and_can_be_turned_off() -> None:
    topics = {"include": ["Pay.*"], "exclude": ["%DLQ%audit"]}
    m = link_mapper(topics, {"groups": {"explicit": ["billing"], "include": ["app_.*"], "exclude": ["app_test"]}})
    assert m.select(["%RETRY%billing", "%RETRY%app_1", "%RETRY%app_test", "%RETRY%other", "%DLQ%app_2"]) == {
        "%DLQ%app_2": "%DLQ%app_2", "%RETRY%app_1": "%RETRY%app_1", "%RETRY%billing": "%RETRY%billing"}
    assert link_mapper(topics, {"groups": {"include": ["audit"]}}).target_for("%DLQ%audit") is None  # exclude wins
    assert link_mapper({**topics, "group_topics": False}).target_for("%RETRY%billing") is None
    assert link_mapper(topics, {"enabled": False}).target_for("%RETRY%billing") is None  # no checkpoints, no move
    assert mapper(include=["Pay.*"]).target_for("%RETRY%billing") is None  # a mapping outside a link


topic_names = st.text(alphabet="ABCMetrics_xdebug%RY0", min_size=1, max_size=12)


@given(st.lists(topic_names, max_size=30), st.randoms(use_true_random=False))
def test_select_is_deterministic_whatever_the_order(topics: list[str], rnd: Any) -> None:
    m = mapper(explicit=[{"source": "A", "target": "B"}],
               include=["Metrics_.*", {"pattern": "C.*", "target": "Y"}],
               exclude=[".*debug.*"], all_topics=True)
    shuffled = list(topics) * 2
    rnd.shuffle(shuffled)
    first = m.select(topics)
    assert m.select(shuffled) == first
    assert list(first) == sorted(first)
    assert all(m.target_for(t) == target for t, target in first.items())

"""connectors.config_sync.evidence: a source topic or group is judged deleted only when every broker group that
held it answered without it in two consecutive snapshots; a holder that is down, frozen or expired makes it
unknown, never absent (pure, no brokers)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from connectors.config_sync.evidence import NOT_REGISTERED, Memory, judge
from connectors.config_sync.state import ClusterState, TopicState
from tests.support.clocks import MillisClock


def snapshot(ms: int, topics: dict[str, tuple[str, ...]], brokers: tuple[str, ...] = ("a", "b"),
             unreachable: dict[str, str] | None = None,
             groups: dict[str, tuple[str, ...]] | None = None) -> ClusterState:
    return ClusterState(ms, {n: TopicState(n, 4, 4, 6, brokers=h) for n, h in topics.items()},
                        {g: {"groupName": g} for g in groups or {}}, brokers, unreachable or {}, groups or {})


def test_a_broker_group_that_left_the_name_server_makes_its_topics_unknown_never_deleted() -> None:
    memory = judge(Memory(), snapshot(1000, {"T1": ("a",), "T2": ("a", "b"), "T3": ("b",)}), ()).memory
    assert memory.topics == {"T1": ("a",), "T2": ("a", "b"), "T3": ("b",)}
    for ms in (2000, 3000, 4000):  # "a" expired: T1 vanishes from the listing, round after round
        judged = judge(memory, snapshot(ms, {"T2": ("b",), "T3": ("b",)}, brokers=("b",)), ())
        memory = judged.memory
        assert judged.evidence.deleted_topics == {}
        assert judged.evidence.unknown_topics == {"T1": f"broker group a: {NOT_REGISTERED}"}
        assert judged.state.unreachable == {"a": NOT_REGISTERED}  # the applier sees a partial view
        assert memory.topics["T2"] == ("a", "b")  # a silent holder stays a holder
        assert memory.absent_topics == {}


def test_a_topic_absent_from_every_answering_holder_twice_is_deleted_with_the_evidence() -> None:
    memory = judge(Memory(), snapshot(1000, {"T": ("a", "b"), "K": ("a",)}), ()).memory
    first = judge(memory, snapshot(2000, {"K": ("a",)}), ())
    assert first.evidence.deleted_topics == {} and first.memory.absent_topics == {"T": 2000}
    second = judge(first.memory, snapshot(3000, {"K": ("a",)}), ())
    assert list(second.evidence.deleted_topics) == ["T"]
    assert "(a, b, all answering)" in second.evidence.deleted_topics["T"]
    assert "T" not in second.memory.topics and second.memory.absent_topics == {}


def test_the_count_starts_again_when_a_holder_stops_answering_in_between() -> None:
    memory = judge(Memory(), snapshot(1000, {"T": ("a",)}), ()).memory
    memory = judge(memory, snapshot(2000, {}), ()).memory  # absent once
    down = judge(memory, snapshot(3000, {}, unreachable={"a": "timeout"}), ())
    assert down.evidence.unknown_topics == {"T": "broker group a: timeout"} and down.memory.absent_topics == {}
    again = judge(down.memory, snapshot(4000, {}), ())
    assert again.evidence.deleted_topics == {} and again.memory.absent_topics == {"T": 4000}
    assert list(judge(again.memory, snapshot(5000, {}), ()).evidence.deleted_topics) == ["T"]


def test_a_cluster_that_cannot_be_listed_proves_nothing() -> None:
    memory = judge(Memory(), snapshot(1000, {"T": ("a",)}, groups={"g": ("a",)}), ()).memory
    failed = ClusterState(2000, {}, {}, (), {"src": "cannot list brokers: timeout"})
    for _ in range(3):
        judged = judge(memory, failed, None)
        memory = judged.memory
        assert judged.evidence.deleted_topics == {} and judged.evidence.deleted_groups == {}
        assert judged.evidence.unknown_topics == {"T": "broker group a: cannot list brokers: timeout"}
        assert list(judged.evidence.unknown_groups) == ["g"]


def test_subscription_groups_follow_the_same_rule() -> None:
    memory = judge(Memory(), snapshot(1000, {}, groups={"g1": ("a",), "g2": ("b",)}), ()).memory
    memory = judge(memory, snapshot(2000, {}, brokers=("b",), groups={}), ()).memory
    judged = judge(memory, snapshot(3000, {}, brokers=("b",), groups={}), ())
    assert judged.evidence.deleted_groups.keys() == {"g2"} and judged.evidence.unknown_groups.keys() == {"g1"}


def test_target_broker_groups_seen_before_and_missing_now_are_reported() -> None:
    memory = judge(Memory(), snapshot(1000, {}), ("x", "y")).memory
    assert memory.target_groups == ("x", "y")
    judged = judge(memory, snapshot(2000, {}), ("y",))
    assert judged.evidence.target_gaps(snapshot(2001, {}, brokers=("y",))) == {"x": NOT_REGISTERED}
    assert judged.evidence.target_gaps(snapshot(2001, {}, brokers=("x", "y"))) == {}  # back by the apply
    assert judged.memory.target_groups == ("x", "y")  # still expected back
    unlisted = judge(judged.memory, snapshot(3000, {}), None)
    assert unlisted.evidence.known_target_groups == ("x", "y") and unlisted.memory.target_groups == ("x", "y")


def test_a_target_group_that_leaves_between_the_snapshot_and_the_apply_counts_as_unreachable() -> None:
    # Registered when the reader judged, gone (or without a primary) when the applier reads the target: a
    # failover of the target's group in that second must not make its topics look missing there.
    evidence = judge(Memory(), snapshot(1000, {}), ("x", "y")).evidence
    assert evidence.known_target_groups == ("x", "y")
    read_later = snapshot(1001, {}, brokers=("y",))
    assert evidence.target_gaps(read_later) == {"x": NOT_REGISTERED}
    replicas_only = snapshot(1001, {}, brokers=("y",), unreachable={"x": "no primary"})
    assert evidence.target_gaps(replicas_only) == {}  # already unreachable, with its own reason
    assert evidence.target_gaps(snapshot(1001, {}, brokers=("x", "y"))) == {}
    assert type(evidence).from_json(evidence.to_json()) == evidence
    # a row written before the groups missing at the snapshot stopped being stored apart (they are among the known)
    older = {**evidence.to_json(), "missingTargetGroups": {"x": NOT_REGISTERED}}
    assert type(evidence).from_json(older) == evidence


TARGETS = st.lists(st.sampled_from("xyz"), unique=True).map(tuple)


@given(st.lists(TARGETS | st.none(), min_size=1, max_size=4), TARGETS, TARGETS)
def test_the_gaps_at_the_apply_are_the_groups_seen_so_far_that_the_later_read_neither_lists_nor_calls_unreachable(
        rounds: list[tuple[str, ...] | None], listed: tuple[str, ...], unreachable: tuple[str, ...]) -> None:
    # The rule written out from what the reader saw: groups registered at some snapshot, those missing at the
    # last one included, are expected at the apply.
    memory, seen = Memory(), set[str]()
    for ms, registered in enumerate(rounds):
        judged = judge(memory, snapshot(ms, {}), registered)
        memory, seen = judged.memory, seen | set(registered or ())
    later = snapshot(99, {}, brokers=listed, unreachable={g: "timeout" for g in unreachable})
    assert judged.evidence.target_gaps(later) == {
        g: NOT_REGISTERED for g in sorted(seen - set(listed) - set(unreachable))}


def test_a_group_registered_by_its_replicas_alone_is_read_as_unreachable_not_as_empty() -> None:
    from broker_store.client import TopicConfig
    from connectors.config_sync.state import NO_PRIMARY, read_cluster_state

    class Admin:  # the target mid-failover: group x lists only its replica
        def broker_groups(self, cluster: str | None) -> dict[str, str | None]:
            return {"x": None, "y": "127.0.0.1:2"}

        def all_topic_config(self, addr: str) -> dict[str, TopicConfig]:
            assert addr == "127.0.0.1:2"
            return {"T": TopicConfig("T", 4, 4)}

        def all_subscription_groups(self, addr: str) -> dict[str, dict[str, object]]:
            return {}

    state = read_cluster_state(Admin(), "dst", clock=MillisClock(5))  # type: ignore[arg-type]
    assert state.brokers == ("y",) and state.unreachable == {"x": NO_PRIMARY}
    assert state.topics["T"].brokers == ("y",)


def test_the_memory_survives_its_offset_and_a_version_1_offset_is_read() -> None:
    memory = judge(judge(Memory(), snapshot(1000, {"T": ("a",), "U": ("b",)}, groups={"g": ("a",)}), ("x",)).memory,
                   snapshot(2000, {"U": ("b",)}, groups={"g": ("a",)}), ("x",)).memory
    assert Memory.from_offset(memory.to_offset()) == memory
    old = Memory.from_offset({"tick": 7, "topics": ["T", "U"], "groups": ["g"]})
    assert old.topics == {"T": (), "U": ()} and old.tick == 7
    # holders not recorded: every broker group registered now counts as one, so T is absent once
    judged = judge(old, snapshot(2000, {"U": ("b",)}, brokers=("b",)), ())
    assert judged.evidence.deleted_topics == {} and judged.memory.absent_topics == {"T": 2000}
    assert judged.memory.topics["U"] == ("b",)


EVENTS = st.sampled_from(["present", "absent", "holder_down", "holder_expired", "listing_failed"])


@given(st.lists(EVENTS, max_size=12))
def test_deleted_exactly_after_two_absences_in_a_row_with_every_holder_answering(events: list[str]) -> None:
    memory = judge(Memory(), snapshot(0, {"T": ("a", "b")}), ()).memory
    previous = "present"
    for ms, event in enumerate(events, start=1):
        state = {"present": snapshot(ms, {"T": ("a", "b")}),
                 "absent": snapshot(ms, {}),
                 "holder_down": snapshot(ms, {"T": ("a",)}, unreachable={"b": "timeout"}),
                 "holder_expired": snapshot(ms, {}, brokers=("a",)),
                 "listing_failed": ClusterState(ms, {}, {}, (), {"src": "no name server"})}[event]
        judged = judge(memory, state, ())
        deleted = "T" in judged.evidence.deleted_topics
        assert deleted == (previous == event == "absent")
        if deleted:
            return
        memory, previous = judged.memory, event
